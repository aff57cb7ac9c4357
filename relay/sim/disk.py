"""A simulated disk per node (after FoundationDB's): writes land in a page cache, an fsync
makes them durable after a drawn latency, and a crash decides what survives.

How this works: each stream's log is a ``LogState`` (base, records, verified mark). A
``Persist`` effect is applied at once to the *cached* state and queued as an unsynced write.
After every turn the node's touched logs start an fsync; when it completes, the writes it
covered are applied to the *durable* state and the node hears ``Persisted`` for the write
generation and head it covered. A process crash keeps the cache (the kernel still has it); a
power loss keeps the durable state plus a random prefix of the unsynced writes, the last of
which may be torn: only part of its txs reach the disk, and not its verified mark.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass, field

from relay.core.dedup import content_tag
from relay.core.digest import genesis
from relay.core.events import (
    LogRead,
    LogSync,
    Persist,
    Persisted,
    ReadReply,
    ReadResult,
    Reserved,
    Restored,
)
from relay.core.messages import SyncData, Tx


@dataclass(slots=True)
class LogState:
    base_seq: int
    base_digest: bytes
    txs: list[Tx] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    verified: int = 0
    seqs: list[int] = field(default_factory=list)

    @property
    def head_seq(self) -> int:
        return self.txs[-1].seq if self.txs else self.base_seq

    def copy(self) -> LogState:
        return LogState(
            self.base_seq,
            self.base_digest,
            list(self.txs),
            list(self.digests),
            self.verified,
            list(self.seqs),
        )

    def apply(self, op: Persist, keep_txs: int | None = None) -> None:
        """Apply one write; ``keep_txs`` tears it after that many txs (and loses its mark)."""
        if op.reset:
            self.base_seq, self.base_digest = op.base_seq, op.base_digest
            self.txs, self.digests, self.seqs, self.verified = [], [], [], op.base_seq
        else:
            seqs = self.seqs
            assert op.base_seq >= self.base_seq, "a write never reaches below the log's base"
            cut = bisect_right(seqs, op.base_seq)
            at_seq = op.base_seq == self.base_seq or (cut and seqs[cut - 1] == op.base_seq)
            assert at_seq, "a write starts at a seq the log holds"
            assert self.verified <= op.base_seq or cut == len(seqs) or op.rewind, (
                "verified is never cut but by a rewind"
            )
            del self.txs[cut:], self.digests[cut:], self.seqs[cut:]
            if op.rewind:
                self.verified = min(self.verified, op.base_seq)
        count = len(op.txs) if keep_txs is None else keep_txs
        self.txs += op.txs[:count]
        self.digests += op.digests[:count]
        self.seqs += [tx.seq for tx in op.txs[:count]]
        if keep_txs is None:
            self.verified = max(self.verified, min(op.verified_seq, self.head_seq))


@dataclass(slots=True)
class SimLog:
    cached: LogState
    durable: LogState
    unsynced: list[Persist] = field(default_factory=list)


@dataclass(slots=True)
class PendingSync:
    at_ms: int
    stream: str
    writes: int  # how many of the unsynced writes it covers
    generation: int
    seq: int


class SimDisk:
    def __init__(self, rng: random.Random, latency_ms_max: int) -> None:
        self.rng = rng
        self.latency_ms_max = latency_ms_max
        self.logs: dict[str, SimLog] = {}
        self.syncing: list[PendingSync] = []
        self.touched: dict[str, tuple[int, int]] = {}  # stream -> (generation, head) written
        self.epoch = 0  # the highest epoch the node started, kept in its metadata
        self.reserved = 0  # the durable bound on the node's seqs, kept in its metadata
        self.reserving: list[tuple[int, int]] = []  # (done at ms, seq)

    def write(self, op: Persist) -> None:
        log = self.logs.get(op.stream)
        if log is None:
            empty = LogState(0, genesis(op.stream))
            log = self.logs[op.stream] = SimLog(empty, empty.copy())
        log.cached.apply(op)
        log.unsynced.append(op)
        self.touched[op.stream] = (op.generation, log.cached.head_seq)

    def log_state(self, stream: str) -> LogState | None:
        """What the log of ``stream`` holds, as the node itself reads it."""
        log = self.logs.get(stream)
        return log.cached if log is not None else None

    def start_syncs(self, now_ms: int) -> None:
        """One fsync per log written this turn (group commit)."""
        for stream, (generation, seq) in self.touched.items():
            at = now_ms + self.rng.randint(0, self.latency_ms_max)
            writes = len(self.logs[stream].unsynced)
            self.syncing.append(PendingSync(at, stream, writes, generation, seq))
        self.touched.clear()

    def reserve(self, now_ms: int, seq: int) -> None:
        self.reserving.append((now_ms + self.rng.randint(0, self.latency_ms_max), seq))

    def next_time(self) -> int | None:
        times = [s.at_ms for s in self.syncing] + [at for at, _ in self.reserving]
        return min(times, default=None)

    def completed(self, now_ms: int) -> list[Persisted | Reserved]:
        done = [s for s in self.syncing if s.at_ms <= now_ms]
        self.syncing = [s for s in self.syncing if s.at_ms > now_ms]
        events: list[Persisted | Reserved] = []
        for _, seq in [r for r in self.reserving if r[0] <= now_ms]:
            self.reserved = max(self.reserved, seq)
            events.append(Reserved(seq))
        self.reserving = [r for r in self.reserving if r[0] > now_ms]
        for sync in done:
            log = self.logs[sync.stream]
            for op in log.unsynced[: sync.writes]:
                log.durable.apply(op)
            del log.unsynced[: sync.writes]
            for later in self.syncing:
                if later.stream == sync.stream:
                    later.writes = max(0, later.writes - sync.writes)  # it covered these
            events.append(Persisted(sync.stream, sync.generation, sync.seq, log.durable.verified))
        return events

    def crash(self, power_loss: bool) -> None:
        """The node died: what its disk holds from now on."""
        self.syncing.clear()
        self.touched.clear()
        self.reserving.clear()
        for log in self.logs.values():
            if power_loss:
                state = log.durable
                survive = self.rng.randint(0, len(log.unsynced))
                for i, op in enumerate(log.unsynced[:survive]):
                    torn = i == survive - 1 and op.txs and self.rng.random() < 0.5
                    state.apply(op, self.rng.randint(0, len(op.txs) - 1) if torn else None)
            else:
                state = log.cached
            log.cached, log.durable, log.unsynced = state, state.copy(), []

    def read(
        self, stream: str, after_seq: int, upto_seq: int, limit: int
    ) -> tuple[bytes, list[tuple[Tx, bytes]]] | None:
        """What the node's own log (as its kernel has it) holds after ``after_seq``."""
        log = self.logs.get(stream)
        if log is None or after_seq < log.cached.base_seq:
            return None
        state = log.cached
        start = bisect_right(state.seqs, after_seq)
        prev = state.digests[start - 1] if start else state.base_digest
        end = min(bisect_right(state.seqs, upto_seq), start + limit)
        return prev, list(zip(state.txs[start:end], state.digests[start:end], strict=True))

    def read_reply(self, reply: ReadReply) -> ReadReply:
        """A consumer's read below the node's memory ring, served from this disk."""
        q = reply.body
        assert isinstance(q, LogRead)
        found = self.read(q.stream, q.after_seq, q.upto_seq, q.limit)
        if found is None:
            result = ReadResult(q.stream, (), (), b"", q.verified_seq, 0, True)
        else:
            txs = tuple(tx for tx, _ in found[1])
            digests = tuple(d for _, d in found[1])
            result = ReadResult(q.stream, txs, digests, found[0], q.verified_seq, 0, False)
        return ReadReply(reply.client, reply.req_id, result)

    def sync_data(self, q: LogSync, node_id: int) -> SyncData | None:
        """A peer's sync from below the node's memory ring, served from this disk."""
        found = self.read(q.stream, q.after_seq, q.upto_seq, q.limit)
        if not found or not found[1]:
            return None
        txs = tuple(tx for tx, _ in found[1])
        digests = tuple(d for _, d in found[1])
        return SyncData(q.stream, node_id, q.requester, q.after_seq, found[0], txs, digests, ())

    def restored(self, tail_extra: int) -> list[Restored]:
        """What a restarted node reads back: every log from up to ``tail_extra`` txs before
        its verified mark (the rest stays on disk, as a real node keeps only a tail)."""
        events = []
        for stream, log in sorted(self.logs.items()):
            state = log.durable
            seqs = state.seqs
            start = max(0, bisect_right(seqs, state.verified) - tail_extra)
            base_seq = seqs[start - 1] if start else state.base_seq
            base_digest = state.digests[start - 1] if start else state.base_digest
            keys = tuple(
                (tx.producer_id, tx.msg_id, tx.seq, d, content_tag(tx))
                for tx, d in zip(state.txs[:start], state.digests[:start], strict=True)
            )
            events.append(
                Restored(
                    stream,
                    base_seq,
                    base_digest,
                    tuple(state.txs[start:]),
                    tuple(state.digests[start:]),
                    state.verified,
                    tuple(k for k in keys if k[0]),
                    state.base_seq,
                )
            )
        return events
