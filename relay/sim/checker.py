"""The invariants of docs/design.md, checked over a simulated cluster after every step.

How this works: for each stream the checker keeps one reference timeline, the longest
verified prefix any replica has shown. Every replica's verified entries must sit in it at
consecutive positions (one timeline, digest agreement); the reference must ascend, chain from
genesis, and hold no (producer id, msg id) twice. A replica that restarted with empty memory
starts from a snapshot: its first entry must follow its snapshot's base in the reference.
Acknowledged publishes are remembered; once the cluster is quiet each must be in the
reference and in every live replica's verified timeline (unless trimmed from its buffer).
A node never acknowledges a write while fenced.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from relay.core.digest import genesis
from relay.core.flake import SEQ_MAX
from relay.core.messages import Item, Tx, fold_tx
from relay.core.node import NodeCore
from relay.storage.records import CorruptRecord
from relay.storage.stream_log import StreamLog

READ_CHUNK = 10_000  # records read from a log at a time


@dataclass(slots=True)
class LogState:
    """What a node's log of a stream holds (as its process reads it)."""

    base_seq: int
    verified: int  # its verified mark
    seqs: list[int] = field(default_factory=list)
    txs: list[Tx] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)


def log_state(log: StreamLog | None) -> LogState | None:
    """Read the whole of ``log`` (through the real log code, chain-checked); a compacted
    range is passed over, the log's chain starting after it."""
    if log is None:
        return None
    state = LogState(log.base_seq, log.mark)
    after = log.base_seq
    while True:
        try:
            found = log.read(after, SEQ_MAX, READ_CHUNK, 1 << 62)
        except CorruptRecord as exc:  # no simulated fault damages a file: the code did
            why = f"durability: the log of {log.stream!r} is damaged: {exc}"
            raise InvariantViolation(why) from exc

        if found is not None and found.through > after:  # a compacted range: no chain
            state.base_seq = after = found.through  # to extend a reference with
            continue
        if found is None or not found.records:
            return state
        for tx, digest in found.records:
            state.seqs.append(tx.seq)
            state.txs.append(tx)
            state.digests.append(digest)
        after = state.seqs[-1]


LogOf = Callable[[str], LogState | None]  # a node's log of a stream, as its disk holds it


class InvariantViolation(AssertionError):
    pass


@dataclass(slots=True)
class StreamReference:
    seqs: list[int] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    keys: set[tuple[str, int]] = field(default_factory=set)
    last_digest: bytes = b""
    txs: list[Tx] | None = None  # the txs too, for a stream a checker replays (``keep_txs``)

    def extend(self, name: str, tx: Tx, digest: bytes) -> None:
        """Append the next verified tx: it must ascend, chain, and carry a new key."""
        if self.seqs and tx.seq <= self.seqs[-1]:
            raise InvariantViolation(f"ascending seqs broken in {name!r} at {tx.seq}")
        if fold_tx(self.last_digest, tx) != digest:
            raise InvariantViolation(f"digest chain broken in {name!r} at {tx.seq}")
        if tx.producer_id:
            k = (tx.producer_id, tx.msg_id)
            if k in self.keys:
                raise InvariantViolation(f"duplicate {k} verified in {name!r}")
            self.keys.add(k)
        self.seqs.append(tx.seq)
        self.digests.append(digest)
        self.last_digest = digest
        if self.txs is not None:
            self.txs.append(tx)

    def index_of(self, seq: int, digest: bytes, where: str) -> int:
        i = bisect_left(self.seqs, seq)
        if i == len(self.seqs) or self.seqs[i] != seq or self.digests[i] != digest:
            raise InvariantViolation(
                f"one timeline: {where} starts from seq {seq}, which no "
                "verified timeline holds with that digest"
            )
        return i


@dataclass(slots=True)
class InvariantChecker:
    references: dict[str, StreamReference] = field(default_factory=dict)
    # (incarnation, stream) -> (last checked seq, its index in the reference)
    checked: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)
    last_seq_by_origin: dict[tuple[int, str], int] = field(default_factory=dict)
    # (stream, producer, msg id) -> (seq, digest, what the acknowledged message carried)
    acked: dict[tuple[str, str, int], tuple[int, bytes, Item]] = field(default_factory=dict)
    # consumer -> its last delivery's position in the stream's reference (-1: none yet)
    consumer_positions: dict[int, int] = field(default_factory=dict)
    # (incarnation, stream) -> the verified seq last seen, and the last one announced
    verified_seen: dict[tuple[int, str], int] = field(default_factory=dict)
    announced: dict[tuple[int, str], int] = field(default_factory=dict)
    # (origin, epoch, stream) -> the highest promise its acks made there
    promises: dict[tuple[int, int, str], int] = field(default_factory=dict)

    def keep_txs(self, name: str) -> list[Tx]:
        """The verified txs of stream ``name``, kept from now on (before any is verified)."""
        ref = self.references.setdefault(name, StreamReference(last_digest=genesis(name)))
        if ref.txs is None:
            if ref.seqs:
                raise ValueError(f"{name!r} has verified txs already")
            ref.txs = []
        return ref.txs

    def check_node(
        self, node: NodeCore, incarnation: int, names: Iterable[str], log_of: LogOf
    ) -> None:
        """Check the verified prefixes of the streams ``names`` (the ones that can have
        changed) against the references, and every advance was announced. A timeline that
        starts past the reference (restored from a log, every replica alike) extends the
        reference from its log (``log_of``) first: consumers read those txs from disk. A
        restored timeline is checked once it is readable as far as where it starts: until a
        quorum's marks say so, what its log holds verified may be a tail it verified that
        the peers gave up (docs/design.md, "Anti-entropy")."""
        for name in names:
            state = node.streams[name]
            timeline = state.timeline
            ref = self.references.setdefault(name, StreamReference(last_digest=genesis(name)))
            key = (incarnation, name)
            where = f"node {node.node_id} in {name!r}"
            last = self.checked.get(key)
            if last is not None and timeline.trimmed_seq > last[0]:
                last = None  # the timeline started over from a snapshot past what we checked
            if last is None:
                if timeline.trimmed_seq == 0:
                    last = (0, -1)
                elif timeline.readable_seq < timeline.trimmed_seq:
                    continue  # restored verified, not readable: peers may have given it up
                elif not ref.seqs or timeline.trimmed_seq > ref.seqs[-1]:
                    if not self._extend_from_log(ref, name, log_of(name), timeline.trimmed_seq):
                        continue  # it starts where no replica has made readable yet: later
                    base = ref.index_of(timeline.trimmed_seq, timeline.trimmed_digest, where)
                    last = (timeline.trimmed_seq, base)
                else:
                    base = ref.index_of(timeline.trimmed_seq, timeline.trimmed_digest, where)
                    last = (timeline.trimmed_seq, base)
            last_seq, pos = last
            i = bisect_right(timeline.seqs, last_seq)
            end = bisect_right(timeline.seqs, timeline.readable_seq)
            while i < end:
                seq, digest, tx = timeline.seqs[i], timeline.digests[i], timeline.txs[i]
                pos += 1
                if pos < len(ref.seqs):
                    if ref.seqs[pos] != seq or ref.digests[pos] != digest:
                        raise InvariantViolation(
                            f"one timeline: {where} verified seq {seq} at position {pos} where "
                            f"the reference has seq {ref.seqs[pos]}"
                        )
                else:
                    ref.extend(name, tx, digest)
                last_seq = seq
                i += 1
            self.checked[key] = (last_seq, pos)
            seen = self.verified_seen.get(key, 0)
            readable = state.timeline.readable_seq
            if readable > seen and self.announced.get(key) != readable:
                raise InvariantViolation(
                    f"node {node.node_id} verified {name!r} up to {readable} "
                    f"without announcing it (announced {self.announced.get(key)})"
                )
            self.verified_seen[key] = readable

    @staticmethod
    def _extend_from_log(
        ref: StreamReference, name: str, log: LogState | None, upto_seq: int
    ) -> bool:
        """Extend ``ref`` with what ``log`` holds after it, up to ``upto_seq``, which is
        readable (the ring sheds only readable entries, and a restored timeline is judged
        once it is readable where it starts), so under the log's written mark or not: with a
        refused write that mark lags; True if the reference then reaches ``upto_seq``."""
        end = ref.seqs[-1] if ref.seqs else 0
        if log is None or log.base_seq > end:
            return False
        if log.base_seq < end and end not in log.seqs:
            return False  # the log continues another chain: the index check will say so
        for i in range(bisect_right(log.seqs, end), bisect_right(log.seqs, upto_seq)):
            ref.extend(name, log.txs[i], log.digests[i])
        return bool(ref.seqs) and ref.seqs[-1] == upto_seq

    def note_announced(self, incarnation: int, stream: str, seq: int) -> None:
        """A node announced its verified seq (parked reads wait for it)."""
        self.announced[(incarnation, stream)] = seq

    def check_origin_seq(self, origin: int, stream: str, seq: int) -> None:
        last = self.last_seq_by_origin.get((origin, stream), 0)
        if seq <= last:
            raise InvariantViolation(f"ids: node {origin} issued {seq} after {last} in {stream!r}")
        self.last_seq_by_origin[(origin, stream)] = seq

    def note_promise(self, origin: int, epoch: int, stream: str, promise: int) -> None:
        """An ack promised that ``origin`` originates nothing more in ``stream`` at or below
        ``promise`` in ``epoch`` (a lead, or its floor)."""
        key = (origin, epoch, stream)
        self.promises[key] = max(self.promises.get(key, 0), promise)

    def check_promise_kept(self, origin: int, epoch: int, stream: str, seq: int) -> None:
        promised = self.promises.get((origin, epoch, stream), 0)
        if seq <= promised:
            raise InvariantViolation(
                f"promises: node {origin} originated {seq} in {stream!r} at or below its "
                f"promise {promised} (epoch {epoch})"
            )

    def check_ack(
        self,
        node_id: int,
        fenced: bool,
        stream: str,
        item: Item,
        producer_id: str,
        seq: int,
        digest: bytes,
    ) -> None:
        if fenced:
            raise InvariantViolation(f"fencing: node {node_id} acknowledged {seq} while fenced")
        key = (stream, producer_id, item.msg_id)
        earlier = self.acked.get(key)
        if earlier is not None and earlier[0] != seq:
            raise InvariantViolation(
                f"idempotent retries: {key} acknowledged as {earlier[0]} and as {seq}"
            )
        if earlier is not None and earlier[2] != item:
            raise InvariantViolation(f"conflicts: {key} acknowledged with two contents at {seq}")
        self.acked[key] = (seq, digest, item)

    def check_delivery(
        self, consumer: int, stream: str, seq: int, digest: bytes, index: int
    ) -> None:
        """A consumer got ``seq`` as the entry of dense index ``index``: it must be the next
        entry of the one timeline after what it got before (no gap, no duplicate, one order),
        at that position of it."""
        ref = self.references.get(stream)
        if ref is None:
            raise InvariantViolation(f"consumer {consumer} got {seq} of unverified {stream!r}")
        pos = ref.index_of(seq, digest, f"consumer {consumer}'s delivery")
        if index != pos:
            raise InvariantViolation(
                f"dense index: consumer {consumer} got seq {seq} of {stream!r} as entry {index}; "
                f"it is entry {pos} of the one timeline"
            )
        last = self.consumer_positions.get(consumer, -1)
        if last >= 0 and pos != last + 1:
            raise InvariantViolation(
                f"one timeline: consumer {consumer} of {stream!r} got seq {seq} at position "
                f"{pos} right after position {last}"
            )
        self.consumer_positions[consumer] = pos

    def consumer_skipped(self, consumer: int) -> None:
        """The consumer's position was trimmed everywhere: it starts again from the earliest."""
        self.consumer_positions.pop(consumer, None)

    def consumer_resumed(self, consumer: int, stream: str, seq: int, digest: bytes) -> None:
        """The consumer restarted from its group's committed position: it must be a position
        of the one timeline, and not past what the consumer was given."""
        pos = self.references[stream].index_of(seq, digest, f"consumer {consumer}'s commit")
        last = self.consumer_positions.get(consumer)
        if last is not None and pos > last:  # None: its position was trimmed, it began again
            raise InvariantViolation(
                f"committed offsets: consumer {consumer} resumed at position {pos} of "
                f"{stream!r}, past the {last} it was given"
            )
        self.consumer_positions[consumer] = pos

    def check_no_acked_loss(self, live: list[NodeCore]) -> None:
        for (stream, pid, mid), (seq, digest, item) in self.acked.items():
            ref = self.references.get(stream)
            if ref is None:
                raise InvariantViolation(f"acknowledged loss: nothing verified in {stream!r}")
            ref.index_of(seq, digest, f"the ack of ({pid}, {mid}) in {stream!r}")
            for node in live:
                if not node.replicates(stream):
                    continue
                state = node.streams.get(stream)
                if state is not None and seq <= state.timeline.trimmed_seq:
                    continue  # held once, trimmed from the buffer since
                got = state.timeline.digest_at(seq) if state else None
                verified = state.timeline.readable_seq if state else 0
                if got != digest or verified < seq:
                    raise InvariantViolation(
                        f"acknowledged loss: {stream!r} seq {seq} ({pid}, {mid}) is not verified "
                        f"on node {node.node_id} (verified {verified})"
                    )
                assert state is not None
                held = next(state.timeline.txs_between(seq - 1, seq))
                if (held.payload, held.key, held.headers) != (item.payload, item.key, item.headers):
                    raise InvariantViolation(
                        f"conflicts: ({pid}, {mid}) was acknowledged at seq {seq} of {stream!r}, "
                        "which holds another message"
                    )
