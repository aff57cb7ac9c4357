"""``relay.Consumer``: iterate a stream's verified transactions from any node.

How this works: the consumer long-polls one node for txs after the last seq it holds. It
checks every batch against the rolling digest (each tx must chain from the one before), so
what it yields is provably the quorum's timeline. If its node stops answering, is fenced or
does not replicate the stream, it moves on (following redirects) and resumes after the last
seq it yielded: no gap, no duplicate. Its first batch is confirmed by a second replica
(``anchor.py``) before it is yielded, so the chain it continues is the quorum's. Every
transaction carries its dense index (0 for the stream's first, as a Kafka offset; compaction
leaves gaps); ``start=Index(n)`` starts at one (``Index(-n)``: the last n) in one request, and
``stop_after`` and ``until`` end the reading after a count of transactions or at a time.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path

from relay import errors
from relay.client.anchor import Anchor
from relay.client.batches import acks_payload, item_of
from relay.client.directory import NodeAddress, identity, resolve
from relay.client.fetcher import Fetcher
from relay.client.groups import commit_payload, group_stream, read_committed
from relay.client.producer import Producer
from relay.core.digest import Folder, Headers
from relay.core.flake import SEQ_MAX, make_seq, seq_unix_ms
from relay.wire.replies import TxsReply


@dataclass(frozen=True, slots=True)
class Index:
    """Where a consumer starts: the entry of this dense index (0: the stream's first); a
    negative one counts back from the verified end (-10: the last 10)."""

    at: int


Start = str | int | datetime | Index


class Anchoring(Enum):
    """How far a consumer's chain is confirmed by a second replica (``anchor.py``)."""

    FIRST = "first"  # nothing confirmed yet: the next batch is compared at its end
    LOOSE = "loose"  # after a compacted range, which the other may have compacted further
    # (or one it held none of): the next batch is compared at any seq both hold
    DONE = "done"  # a second replica agreed: every later batch continues this chain


ACKS_PER_RECORD = 20_000  # batch item indexes per ack record (under 1 MiB however scattered)


@dataclass(frozen=True, slots=True)
class Transaction:
    stream: str
    seq: int
    origin: int
    payload: bytes
    digest: bytes
    producer_id: str
    msg_id: int
    key: bytes | None = None
    headers: Headers = ()
    index: int = -1  # the dense index: how many txs the stream's history holds before it

    @property
    def timestamp_ms(self) -> int:
        return seq_unix_ms(self.seq)


class Consumer:
    def __init__(
        self,
        stream: str,
        config: str | Path | None = None,
        nodes: list[str] | None = None,
        node: int | None = None,
        start: Start = "earliest",
        batch_max: int = 1000,
        wait_ms: int = 500,
        reply_timeout_s: float = 3.0,
        verify: bool = True,
        group: str | None = None,
        commit_interval_ms: int = 5000,
        client_key: str | Path | None = None,
        stop_after: int | None = None,
        until: datetime | None = None,
    ) -> None:
        """``group``: resume after the group's committed position in this stream (``start``
        applies when it has none), and commit what ``poll`` returned every
        ``commit_interval_ms`` (0: only on ``commit()``) and on ``close``. ``client_key``: a
        .key_secret file for a cluster that admits only listed clients. ``stop_after``: end
        after this many transactions; ``until``: end before the first one stamped at or after
        this time (``ended`` says so; iterating stops)."""
        self.stream = stream
        self.batch_max = batch_max
        self.wait_ms = wait_ms
        self.reply_timeout_s = reply_timeout_s
        self.verify = verify
        self._folder = Folder()  # re-folds each fetched tx's digest
        order = resolve(config, nodes, node)
        pair = identity(config, client_key)
        self._fetcher = Fetcher(stream, order, reply_timeout_s, pair=pair)
        self._anchor = Anchor(stream, order, reply_timeout_s, pair)
        self._buffer: deque[Transaction] = deque()
        self.position = 0  # the last seq yielded; the next fetch asks for txs after it
        self.verified_head: int | None = None  # the serving node's verified seq, last answer
        self.last_digest: bytes | None = None
        self._start = start
        self._started = False
        self._strict = False
        self._anchoring = Anchoring.FIRST
        self._kept_gap = False  # the last rows came from a compacted range: no chain to continue
        self._through = 0  # how far a compacted range was read (past records it dropped)
        self.group = group
        self.commit_interval_s = commit_interval_ms / 1000
        self.committed_seq = 0
        self._commit_at = time.monotonic() + self.commit_interval_s
        self._group_fetcher = (
            Fetcher(group_stream(stream, group), order, pair=pair) if group else None
        )
        self._producer_args = (config, nodes, node, client_key)
        self._committer: Producer | None = None
        self._acks: dict[str, set[int]] = {}  # batch -> item indexes acked, not yet sent
        self._processed: tuple[int, bytes] | None = None  # (seq, digest) the caller finished
        self._from_index: int | None = None  # the first fetch's dense index (``Index``)
        if stop_after is not None and stop_after < 0:
            raise ValueError(f"stop_after is a count of transactions, not {stop_after}")
        self.stop_after = stop_after
        self.until_ms = None if until is None else int(until.timestamp() * 1000)
        self.returned = 0  # transactions poll returned
        self.ended = stop_after == 0  # stop_after or until reached: poll returns no more

    # --- the API ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Transaction]:
        while not self.ended:  # one at a time: a loop left early processed what it took
            yield from self.poll(timeout_s=None, max_txs=1)

    def poll(self, timeout_s: float | None = 1.0, max_txs: int | None = None) -> list[Transaction]:
        """The next verified txs (possibly none if ``timeout_s`` passes first). Calling it
        again says that what it returned before is processed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if self.last_digest is not None:
            self._processed = (self.position, self.last_digest)
        if self.commit_interval_s and time.monotonic() >= self._commit_at:
            self.commit()
        while not self._buffer and not self.ended:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            wait = self.wait_ms if remaining is None else min(self.wait_ms, int(remaining * 1000))
            self._fetch(max(0, wait))
            head = self.verified_head
            if self.until_ms is not None and head and self.at_end():
                self.ended = seq_unix_ms(head) >= self.until_ms  # all before it is taken
        take = len(self._buffer) if max_txs is None else min(max_txs, len(self._buffer))
        if self.stop_after is not None:
            take = min(take, self.stop_after - self.returned)
        out = [self._buffer.popleft() for _ in range(take)]
        if self.until_ms is not None:
            kept = [tx for tx in out if tx.timestamp_ms < self.until_ms]
            self.ended = len(kept) < len(out)
            out = kept
        self.returned += len(out)
        self.ended = self.ended or self.returned == self.stop_after
        if out:
            self.position = out[-1].seq
            self.last_digest = out[-1].digest
        return out

    def take(self, count: int, timeout_s: float) -> list[Transaction]:
        """Exactly ``count`` txs, or fewer if ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        out: list[Transaction] = []
        while len(out) < count and time.monotonic() < deadline:
            out.extend(self.poll(deadline - time.monotonic(), max_txs=count - len(out)))
        return out

    def at_end(self) -> bool:
        """Everything the serving node had verified at its last answer is taken (kcat's end
        of partition); False until a node has answered."""
        head = self.verified_head
        reached = max(self.position, self._through)  # a compacted range may end past its last
        return head is not None and self._started and not self._buffer and reached >= head

    @property
    def node(self) -> NodeAddress | None:
        """The node that served the last batch."""
        return self._fetcher.node

    def commit(self) -> None:
        """Commit the group's position after everything ``poll`` returned (Kafka's
        ``commitSync``), and send the batch items ``ack`` collected."""
        if self.last_digest is not None:
            self._commit((self.position, self.last_digest))

    def processed(self, tx: Transaction) -> None:
        """Say that the caller finished every tx up to ``tx`` (one ``poll`` returned), so
        ``close`` commits through it: for a caller that stops part way through a batch."""
        if self._processed is None or tx.seq > self._processed[0]:
            self._processed = (tx.seq, tx.digest)

    def _commit(self, upto: tuple[int, bytes] | None) -> None:
        self._commit_at = time.monotonic() + self.commit_interval_s
        if self.group is None:
            return
        for batch in list(self._acks):  # before the position: a redelivered item is acked again
            indexes = sorted(self._acks[batch])
            for i in range(0, len(indexes), ACKS_PER_RECORD):  # each record well below a
                chunk = set(indexes[i : i + ACKS_PER_RECORD])  # payload's size limit
                try:
                    self._publisher().publish(batch, acks_payload(self.group, chunk))
                except errors.RelayError as exc:
                    if exc.code not in errors.RETRYABLE:  # never storable: said once, dropped
                        del self._acks[batch]
                    raise
                self._acks[batch] -= chunk
            del self._acks[batch]
        if upto is None or upto[0] <= self.committed_seq:
            return
        payload = commit_payload(self.stream, upto[0], upto[1])
        name = group_stream(self.stream, self.group)
        self._publisher().publish(name, payload, key=self.stream)
        self.committed_seq = upto[0]

    def ack(self, tx: Transaction) -> None:
        """Acknowledge an item of a fan-out batch for this consumer's group, in any order and
        any number of times (it counts once); sent with the next commit."""
        found = item_of(tx.headers, tx.stream)
        if found is None or self.group is None:
            raise ValueError("only an item of a batch, by a consumer in a group, can be acked")
        self._acks.setdefault(found[0], set()).add(found[1])

    def _publisher(self) -> Producer:
        if self._committer is None:
            config, nodes, node, client_key = self._producer_args
            self._committer = Producer(
                config, nodes, node, timeout_s=self.reply_timeout_s * 5, client_key=client_key
            )
        return self._committer

    def close(self) -> None:
        """With auto-commit, commit what is surely processed: what polls before the last one
        returned (or, iterating, every transaction the loop came back from)."""
        try:
            if self.group is not None and self.commit_interval_s:
                self._commit(self._processed)
        finally:
            self._fetcher.close()
            self._anchor.close()
            if self._group_fetcher is not None:
                self._group_fetcher.close()
            if self._committer is not None:
                self._committer.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the engine ---------------------------------------------------------------------

    def _fetch(self, wait_ms: int) -> None:
        if not self._started:
            self._begin()
            return
        after = max(self._buffer[-1].seq if self._buffer else self.position, self._through)
        reply = self._fetcher.fetch(after, self.batch_max, wait_ms, self._from_index)
        if reply is None:
            return
        self.verified_head = reply.verified_seq
        if reply.lost and isinstance(self._start, datetime) and not self._strict:
            self.position = self._through = 0  # a time before what is retained: the oldest
            return
        if reply.lost:
            where = f"seq {after}" if self._from_index is None else f"index {self._from_index}"
            raise errors.DataLossError(
                "data_loss",
                f"{self.stream!r}: the txs after {where} were trimmed from every buffer "
                f"this consumer reached; the earliest held is {reply.earliest_seq}",
            )
        if reply.through_seq:
            self._take_kept(after, reply)
            return
        if not reply.rows:
            return
        if self._kept_gap:  # after a compacted range: the chain starts anew, anchored again
            chain = reply.prev_digest
        elif self._buffer:
            chain = self._buffer[-1].digest
        elif self._strict and self.last_digest is not None:
            chain = self.last_digest
        else:
            chain = reply.prev_digest
        batch = []
        fold = self._folder.fold
        index = reply.first_index
        for seq, origin, pid, mid, payload, key, headers, digest in reply.rows:
            if self.verify and fold(chain, seq, origin, pid, mid, payload, key, headers) != digest:
                raise errors.DigestMismatchError(
                    "digest_mismatch",
                    f"{self.stream!r} seq {seq} from {self.node} does not chain to the digest "
                    "before it; the node served a timeline that differs from what this consumer "
                    "holds",
                )
            chain = digest
            batch.append(
                Transaction(
                    self.stream, seq, origin, payload, digest, pid, mid, key, headers, index
                )
            )
            index += 1
        if self.verify and self._anchoring is not Anchoring.DONE:
            seqs, digests = [t.seq for t in batch], [t.digest for t in batch]
            loose = self._anchoring is Anchoring.LOOSE
            agreed = self._anchor.confirm(self.node, seqs, digests, self.reply_timeout_s, loose)
            if agreed is False:
                return  # no second replica agreed yet: fetched again on the next poll
            # None: the other holds none of the batch; the next one is compared, at any seq
            self._anchoring = Anchoring.DONE if agreed else Anchoring.LOOSE
        self._buffer.extend(batch)
        self._strict = True
        self._kept_gap = False
        self._from_index = None  # placed: it goes on after the seqs it took

    def _take_kept(self, after: int, reply: TxsReply) -> None:
        """Rows read from a compacted segment after seq ``after``: each must fold from its own
        prev digest to its digest, and where a second replica holds the same seqs it must
        agree on their digests (docs/design.md, "Compacted streams"). The chain after them is
        anchored anew."""
        if reply.through_seq <= after or (reply.rows and reply.rows[0].seq <= after):
            raise errors.ProtocolError(
                f"{self.stream!r}: {self.node} answered a read after seq {after} with a "
                f"compacted range through seq {reply.through_seq} that does not start after it"
            )
        batch = []
        fold = self._folder.fold
        for row, prev, index in zip(reply.rows, reply.prevs, reply.indexes, strict=True):
            seq, origin, pid, mid, payload, key, headers, digest = row
            if self.verify and fold(prev, seq, origin, pid, mid, payload, key, headers) != digest:
                raise errors.DigestMismatchError(
                    "digest_mismatch",
                    f"{self.stream!r} seq {seq} from {self.node} (a compacted range) does not "
                    "fold from the digest it names before it",
                )
            batch.append(
                Transaction(
                    self.stream, seq, origin, payload, digest, pid, mid, key, headers, index
                )
            )
        if self.verify:
            seqs, digests = [t.seq for t in batch], [t.digest for t in batch]
            self._anchor.confirm_kept(self.node, seqs, digests, self.reply_timeout_s)
        self._buffer.extend(batch)
        self._through = reply.through_seq
        self._from_index = None
        self._kept_gap = True
        self._anchoring = Anchoring.LOOSE

    def _begin(self) -> None:
        if self._group_fetcher is not None:
            name = self._group_fetcher.stream
            anchor = Anchor(name, self._fetcher.order, self.reply_timeout_s, self._fetcher.pair)
            try:
                committed = read_committed(self._group_fetcher, self.reply_timeout_s * 5, anchor)
            finally:
                anchor.close()
            if committed is not None:  # resume there, continuing the chain from its digest
                self.position = self.committed_seq = committed.seq
                self.last_digest, self._strict = committed.digest, True
                self._processed = (committed.seq, committed.digest)
                self._started = True
                return
        start = self._start
        if isinstance(start, Index):
            self._from_index = start.at
        elif start == "earliest":
            self.position = 0
        elif start == "latest":
            reply = self._fetcher.fetch(0, 0, 0)
            if reply is None:
                return
            self.position = self.verified_head = reply.verified_seq
        elif isinstance(start, datetime):
            seq = min(make_seq(int(start.timestamp() * 1000), 0, 0), SEQ_MAX)
            self.position = max(0, seq - 1)
        elif isinstance(start, int) and start >= 0:
            self.position = max(0, start - 1)  # a seq to start at, inclusive
        else:
            raise ValueError(
                f"start must be 'earliest', 'latest', a seq, a datetime or an Index: {start!r}"
            )
        self._started = True
