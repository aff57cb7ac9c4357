"""The node's disk, as its loop sees it: open and restore, write what the core persists,
sync in the background, and hand the core what became durable.

How this works: at start the data directory is checked and every stream's log recovered; the
core is built on the epoch, seq floor and reservation kept there, and the restored timelines
are its first events. Each turn, ``Persist`` effects are written and ``Reserve`` effects made
durable at once (rare and tiny); after the turn the syncer starts a group commit, and its
completions come back (through the runner's wake-up) as ``Persisted`` events. The node and the
simulator run this same code: the node on the operating system's files and a sync thread, the
simulator on simulated files and simulated time. A write or sync the disk refuses is
reported (``PersistFailed``), never acknowledged: the core's vote waits for a ``Persisted``
that does not come.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from relay import errors
from relay.core.events import (
    Event,
    LogRead,
    LogSpan,
    LogSync,
    Persist,
    Persisted,
    PersistFailed,
    ReadResult,
    Rejected,
    Reserve,
    Reserved,
    Restored,
    Retained,
    SpanResult,
)
from relay.core.messages import ANSWER_BYTES_MAX, SyncData
from relay.core.params import CoreParams
from relay.core.reads import cut_span
from relay.core.routing import QUEUE_SUFFIX
from relay.core.status import NodeStatus
from relay.storage.compactor import CompactionRunner, Compactor, ProcessCompactions
from relay.storage.records import CorruptRecord
from relay.storage.recovery import Window
from relay.storage.store import NodeStore
from relay.storage.stream_log import LogSlice, StorageError
from relay.storage.syncer import Syncer, SyncRunner, ThreadRunner

log = logging.getLogger("relay.disk")

RETRY_MS = 1000  # after the disk refused a write, how long until the next try
RETAIN_SCAN_MAX = 256  # logs a retention pass visits beside those written since the last
SPAN_TXS_MAX = 10_000_000  # a span with no bound counts at most this many txs of the log
SPAN_CHUNK = 10_000  # records read from the log at a time
RingEntries = Callable[[str, int, int, int], tuple[list[int], list[bytes]]]  # NodeCore.ring_entries


def restore_window(params: CoreParams) -> Window:
    """How much of its logs a node takes back into memory at start."""
    return Window(
        keep=max(1, params.buffer_txs_max // 2),
        keep_bytes=params.buffer_bytes_max // 2,
        dedup_ms=params.dedup_window_ms,
        dedup_keys_max=params.dedup_keys_max,
        total_bytes=params.rings_bytes_max // 2,  # a restart leaves room for new writes
    )


class NodeDisk:
    def __init__(
        self,
        store: NodeStore,
        window: Window,
        runner: SyncRunner | None = None,
        compactions: CompactionRunner | None = None,
    ) -> None:
        self.store = store
        self.window = window
        self.runner = runner if runner is not None else ThreadRunner()
        self.compactor = Compactor(store, compactions or ProcessCompactions(), window.dedup_ms)
        self.syncer: Syncer | None = None
        self.written: set[str] = set()  # logs written since the last retention pass
        self.changed: set[str] = set()  # logs written or trimmed since ``take_changed``
        self.scan: list[str] = []  # the logs a retention pass visits in turn
        self.scan_at = 0
        self.error = ""  # the last write or sync the disk refused, until one succeeds
        self.retry_at_ms = 0

    def open(self, wall_ms: int) -> tuple[list[Restored], tuple[int, int, int]]:
        """The logs to restore, and (epoch, floor, reservation) to start the core on."""
        restored, problems = self.store.open(self.window, wall_ms)
        for problem in problems:
            log.error("recovery: %s", problem)
        start = self.store.start(wall_ms)
        self.syncer = Syncer(self.store, self.runner)
        held = sum(len(r.txs) for r in restored)
        log.info(
            "restored %d streams (%d txs in memory) from %s",
            len(restored),
            held,
            self.store.data_dir,
        )
        return restored, start

    def carry_out(self, effect: Persist | Reserve, wall_ms: int, elapsed_ms: int) -> Event | None:
        """Write one effect; the event it answers at once, if any. After the disk refused a
        write, writes are tried again once per ``RETRY_MS``; meanwhile each is refused."""
        assert self.syncer is not None
        if isinstance(effect, Reserve):  # written by the syncer, which paces a failing disk
            if not self.store.reserve(effect.seq):
                return Reserved(effect.seq)  # already durable
            self.syncer.reserve(effect.seq)
            return None
        if self.error and elapsed_ms < self.retry_at_ms:
            return PersistFailed(effect.stream, self.error)
        try:
            released = self.store.apply(effect, wall_ms)
            self.syncer.wrote(effect.stream, len(effect.txs))
            for name in released:  # the syncer syncs and closes what it wrote
                self.syncer.wrote(name, 0)
            self.written.add(effect.stream)
            self.changed.add(effect.stream)
        except (StorageError, OSError) as exc:
            self._refused(str(exc), elapsed_ms)
            return PersistFailed(effect.stream, self.error)
        recovered, self.error = bool(self.error), ""
        if recovered and self.syncer.mode == "never":
            # no sync will say the disk takes writes again: this write does
            held = self.store.logs[effect.stream]
            return Persisted(effect.stream, effect.generation, held.head_seq, held.mark)
        return None

    def after_turn(self, elapsed_ms: int, epoch: int) -> None:
        assert self.syncer is not None
        try:
            self.store.epoch_started(epoch)
        except OSError as exc:
            self._refused(f"node.json: {exc}", elapsed_ms)
        self.syncer.after_turn(elapsed_ms)

    def retain(self, wall_ms: int) -> list[Event]:
        """Apply retention to the logs written since the last pass and to the next
        ``RETAIN_SCAN_MAX`` of all (so a pass costs what was written, and a log that ages
        past ``retention_ms`` untouched is trimmed within one round of every log); the core
        hears where each trimmed log now starts. A work group's control stream is never
        trimmed: it is the group's whole history, which every replica folds from its start."""
        if self.scan_at >= len(self.scan):
            self.scan, self.scan_at = list(self.store.logs), 0
        visit = self.written.union(self.scan[self.scan_at : self.scan_at + RETAIN_SCAN_MAX])
        self.scan_at += RETAIN_SCAN_MAX
        self.written = set()
        events: list[Event] = []
        for name in sorted(visit):
            stream_log = self.store.logs.get(name)
            if stream_log is None or QUEUE_SUFFIX in name:
                continue
            try:
                base = stream_log.retain(wall_ms)
            except OSError as exc:
                log.error("retention: %s: %s", name, exc)
                continue
            if base is not None:
                log.info("retention: %s now starts after seq %d", name, base)
                self.changed.add(name)
                events.append(Retained(name, base, stream_log.chained_seq))
        return events

    def compact(self, wall_ms: int, bounds: dict[str, int]) -> list[Event]:
        """Install a compaction that finished and start the next (``Compactor``);
        ``bounds``: stream -> the seq its compaction may reach (``Compactor.tick``).
        The core hears where a compacted log now chains from."""
        events: list[Event] = []
        for name in self.compactor.tick(wall_ms, bounds):
            self.changed.add(name)
            found = self.store.logs[name]
            events.append(Retained(name, found.base_seq, found.chained_seq))
        return events

    def take_changed(self) -> set[str]:
        """The logs written or trimmed since the last call."""
        changed, self.changed = self.changed, set()
        return changed

    def completed(self, elapsed_ms: int) -> list[Event]:
        assert self.syncer is not None
        done, failed = self.syncer.completed(elapsed_ms)
        events: list[Event] = list(done)
        for event in done:
            if isinstance(event, Persisted) and event.stream in self.store.logs:
                self.store.logs[event.stream].synced(event.generation, event.mark)
        for stream, why in failed:
            self._refused(f"{stream}: {why}", elapsed_ms)
            if stream != "node.json":  # the syncer writes a reservation again
                self.store.logs[stream].sync_failed()
                events.append(PersistFailed(stream, self.error, sync=True))
        return events

    # --- reads below the memory ring ----------------------------------------------------

    def status(self, status: NodeStatus) -> NodeStatus:
        """``status`` with what each stream's log holds: oldest seq, txs and bytes."""
        streams = []
        for s in status.streams:
            found = self.store.logs.get(s.name)
            if found is not None:
                s = replace(
                    s,
                    log_first_seq=found.first_seq(),
                    log_txs=found.records(),
                    log_bytes=found.bytes_on_disk(),
                )
            streams.append(s)
        return replace(status, streams=tuple(streams))

    def read(self, q: LogRead) -> ReadResult | Rejected:
        """A consumer's read from the log (after ``q.after_seq``, or from the entry of dense
        index ``q.from_index``), re-checked record by record."""
        log_ = self.store.logs.get(q.stream)
        earliest = log_.first_seq() if log_ else 0
        after: int | None = q.after_seq
        if q.from_index >= 0 and log_ is not None:
            index = max(q.from_index, log_.base_count) if q.from_held else q.from_index
            try:
                after = log_.seq_before_index(index)
            except (CorruptRecord, OSError) as exc:
                log.error("storage: %s: a read found the log damaged: %s", q.stream, exc)
                why = "this replica's log is damaged there; read from another replica"
                return Rejected(errors.UNAVAILABLE, why)
        elif q.from_index >= 0:
            after = None
        found = None
        if after is not None:
            found = self._records(q.stream, after, q.upto_seq, q.limit, q.bytes_max)
        if isinstance(found, Rejected):
            return found
        if found is None:
            return ReadResult(q.stream, (), (), b"", q.verified_seq, earliest, True)
        txs = tuple(tx for tx, _ in found.records)
        digests = tuple(d for _, d in found.records)
        return ReadResult(
            q.stream,
            txs,
            digests,
            found.prev,
            q.verified_seq,
            earliest,
            False,
            tuple(found.prevs),
            found.through,
            found.first_index,
            found.indexes,
        )

    def span(self, q: LogSpan, ring_entries: RingEntries) -> SpanResult | Rejected:
        """A span starting below the memory ring: the log's part counted record by record
        (chain-checked), then what the memory ring holds up to ``q.upto_seq``."""
        limit = q.max_txs if q.max_txs > 0 else SPAN_TXS_MAX
        seqs: list[int] = []
        digests: list[bytes] = []
        after = q.after_seq
        while len(seqs) < limit and after < min(q.trimmed_seq, q.upto_seq):
            upto = min(q.trimmed_seq, q.upto_seq)
            chunk = min(SPAN_CHUNK, limit - len(seqs))
            found = self._records(q.stream, after, upto, chunk, ANSWER_BYTES_MAX)
            if isinstance(found, Rejected):
                return found
            if found is None:
                return cut_span(q.stream, [], [], q.parts, q.readable_seq, 0, True)
            if not found.records and found.through <= after:
                break
            seqs += [tx.seq for tx, _ in found.records]
            digests += [d for _, d in found.records]
            after = max(found.through, found.records[-1][0].seq if found.records else 0)
        if len(seqs) < limit:
            more_seqs, more_digests = ring_entries(q.stream, after, q.upto_seq, limit - len(seqs))
            seqs += more_seqs
            digests += more_digests
        log_ = self.store.logs.get(q.stream)
        earliest = log_.first_seq() if log_ else 0
        return cut_span(q.stream, seqs, digests, q.parts, q.readable_seq, earliest, False)

    def sync_data(self, q: LogSync, node_id: int) -> SyncData | None:
        """A peer's sync from below the memory ring, answered from the log."""
        found = self._records(q.stream, q.after_seq, q.upto_seq, q.limit, ANSWER_BYTES_MAX)
        if found is None or isinstance(found, Rejected) or not found.records or found.prevs:
            return None  # a compacted range does not chain: a peer cannot fold it
        txs = tuple(tx for tx, _ in found.records)
        digests = tuple(d for _, d in found.records)
        count = found.first_index  # the first's index: the count up to after_seq
        return SyncData(
            q.stream, node_id, q.requester, q.after_seq, found.prev, txs, digests, (), count
        )

    def _records(
        self, stream: str, after_seq: int, upto_seq: int, limit: int, bytes_max: int
    ) -> LogSlice | Rejected | None:
        log_ = self.store.logs.get(stream)
        if log_ is None:
            return None
        try:
            return log_.read(after_seq, upto_seq, limit, bytes_max)
        except (CorruptRecord, OSError) as exc:
            log.error("storage: %s: a read found the log damaged: %s", stream, exc)
            why = "this replica's log is damaged there; read from another replica"
            return Rejected(errors.UNAVAILABLE, why)

    def close(self) -> None:
        self.compactor.close()
        self.runner.close()  # the syncer's, started or not
        self.store.close()

    def _refused(self, why: str, elapsed_ms: int) -> None:
        if why != self.error:
            log.error("storage: %s", why)
        self.error = why
        self.retry_at_ms = elapsed_ms + RETRY_MS
