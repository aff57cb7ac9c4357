"""One stream's log on disk: its segments, in order, continuing one digest chain.

How this works: ``apply`` carries out the core's ``Persist``: start over (a snapshot), cut the
unverified tail back to a seq, append records and a verified mark, rolling to a new segment at
``segment_bytes`` or ``segment_ms``. Writes go to the page cache; the file descriptors written
since the last sync are handed to the syncer (``take_unsynced``), which makes them durable
and reports the write generation and head they cover. ``read`` serves a range from the files,
checking each frame's checksum and the digest chain as it goes: nothing is served unproven.
Opening a log re-checks every segment and is in ``recovery.py``.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from relay.core.events import Persist
from relay.core.flake import seq_unix_ms
from relay.core.messages import Tx, fold_tx, tx_bytes
from relay.storage import compaction
from relay.storage.files import IOV_MAX, OS_FILES, Files
from relay.storage.records import (
    BATCH_BYTES,
    MARK,
    CorruptRecord,
    Record,
    SegmentHeader,
    cut_frame,
    mark_frame,
    records_end_at,
    txs_frame,
)
from relay.storage.segment import Entry, Segment, create, entries, reopen
from relay.storage.settings import StorageSettings


class LogSlice(NamedTuple):
    """Records read from the log, after the digest ``prev``: chained from it, the first of
    index ``first_index`` and the rest after it, or (read from a compacted segment,
    ``through`` > 0) each from its own digest in ``prevs``, of its own index in ``indexes``:
    every record the segment kept after the read's start and up to ``through`` (there may be
    none)."""

    prev: bytes
    records: list[tuple[Tx, bytes]]
    prevs: list[bytes]  # empty when the records chain from ``prev``
    through: int = 0
    first_index: int = 0
    indexes: tuple[int, ...] = ()


class StorageError(Exception):
    """The disk refused a write (full, I/O error) or the log is out of step with the core."""


@dataclass(slots=True)
class Unsynced:
    """What one sync of this log must cover."""

    fds: list[int] = field(default_factory=list)  # duplicates, closed by the syncer
    directory: bool = False  # files were created, renamed or removed
    active: bool = False  # fds holds a duplicate of the current append descriptor
    written: int = 0  # bytes written since the last sync took this
    generation: int = 0
    head_seq: int = 0
    mark: int = 0  # the last verified mark written before the sync took this


class StreamLog:
    def __init__(
        self,
        directory: Path,
        stream: str,
        settings: StorageSettings,
        segments: list[Segment],
        mark: int,
        files: Files = OS_FILES,
    ) -> None:
        self.files = files
        self.directory = directory
        self.stream = stream
        self.settings = settings
        self.segments = segments  # in seq order; the last may be open for appends
        self.mark = mark  # the highest verified mark written
        self.synced_mark = mark  # the highest one a sync made durable
        self.generation = 0
        self.fd: int | None = None
        self.unsynced = Unsynced()
        self.written = 0  # bytes written since the log was opened

    # --- where the log is ---------------------------------------------------------------

    @property
    def base_seq(self) -> int:
        """The oldest seq's predecessor: reads after it can be served."""
        return self.segments[0].header.base_seq if self.segments else 0

    @property
    def chained_seq(self) -> int:
        """Where the log chains from: the end of its compacted segments (0: none)."""
        ends = [s.head_seq for s in self.segments if s.compacted]
        return ends[-1] if ends else 0

    def first_seq(self) -> int:
        """The oldest seq the log holds (0 if none)."""
        return next((s.first_seq for s in self.segments if s.first_seq), 0)

    @property
    def head_seq(self) -> int:
        return self.segments[-1].head_seq if self.segments else 0

    @property
    def head_digest(self) -> bytes:
        return self.segments[-1].head_digest if self.segments else b""

    @property
    def head_count(self) -> int:
        """Txs in the stream's history up to ``head_seq``."""
        return self.segments[-1].head_count if self.segments else 0

    @property
    def base_count(self) -> int:
        """Txs in the stream's history up to ``base_seq`` (the first record's index)."""
        return self.segments[0].header.base_count if self.segments else 0

    def bytes_on_disk(self) -> int:
        return sum(s.size for s in self.segments)

    def records(self) -> int:
        """The txs the log holds."""
        return sum(s.records for s in self.segments)

    # --- writing ------------------------------------------------------------------------

    def apply(self, p: Persist, wall_ms: int) -> None:
        """Make the log after ``p.base_seq`` hold ``p.txs``; ``StorageError`` if the disk
        refuses (nothing is then reported durable)."""
        try:
            self._reopen()
            if p.reset or not self.segments:
                self._start_over(p.base_seq, p.base_digest, wall_ms, p.base_count)
            elif p.base_seq < self.mark and not p.rewind:
                raise StorageError(
                    f"{self.stream}: a write from seq {p.base_seq} would cut records verified "
                    f"up to {self.mark}"
                )
            elif p.base_seq < self.head_seq:
                self._cut_after(p.base_seq, p.base_digest)
            if p.base_seq != self.head_seq:
                raise StorageError(
                    f"{self.stream}: the log ends at seq {self.head_seq}, "
                    f"a write continues from {p.base_seq}"
                )
            mark = min(p.verified_seq, p.txs[-1].seq if p.txs else self.head_seq)
            marking = (mark_frame(mark),) if mark > self.mark else ()
            if p.txs:  # the mark goes in the records' last write: one syscall a turn
                self._append(p.txs, p.digests, wall_ms, marking)
            elif marking:  # into the open segment: after a crash the last one may be sealed
                self._active(wall_ms)
                self._write(*marking)
            self.mark = max(self.mark, mark)
        except OSError as exc:
            self._drop_partial()
            raise StorageError(f"{self.stream}: {exc.strerror or exc}") from exc
        except CorruptRecord as exc:  # a cut read a damaged file: refused, never a crash
            raise StorageError(f"{self.stream}: the log is damaged: {exc}") from exc
        self.generation = p.generation
        self.unsynced.generation, self.unsynced.head_seq = p.generation, self.head_seq
        self.unsynced.mark = self.mark

    def _drop_partial(self) -> None:
        """A write failed part way: cut the active file back to its last whole frame."""
        if self.fd is not None and self.segments:
            with contextlib.suppress(OSError):  # else recovery cuts the torn tail at restart
                self.files.ftruncate(self.fd, self.segments[-1].size)

    def synced(self, generation: int, mark: int) -> None:
        """A sync of the writes of ``generation`` made the log durable up to ``mark`` (a
        report from before a later generation's write, which may have cut, is not taken)."""
        if generation == self.generation:
            self.synced_mark = max(self.synced_mark, mark)

    def sync_failed(self) -> None:
        """A sync failed: what it covered may be gone from the page cache, so a mark written
        since the last good sync is written again when the core asks for it."""
        self.mark = min(self.mark, self.synced_mark)

    def take_unsynced(self) -> Unsynced:
        """What the next sync covers: the descriptors written and the head they hold."""
        found = self.unsynced
        self.unsynced = Unsynced(generation=self.generation, head_seq=self.head_seq, mark=self.mark)
        return found

    def release(self) -> bool:
        """Give up the append descriptor (the next sync still covers what it wrote, and the
        next write opens it again); whether the log held one."""
        if self.fd is None:
            return False
        self._retire()
        return True

    def _reopen(self) -> None:
        """The active segment's append descriptor, after a release or a restart."""
        if self.fd is None and self.segments and not self.segments[-1].sealed:
            self.fd = self.files.open_append(self.segments[-1].path)

    def close(self) -> None:
        if self.fd is not None:
            self.files.close(self.fd)
            self.fd = None
        for fd in self.take_unsynced().fds:
            self.files.close(fd)

    def _append(
        self, txs: tuple[Tx, ...], digests: tuple[bytes, ...], wall_ms: int, then: tuple[bytes, ...]
    ) -> None:
        """Append records as batch frames of about ``BATCH_BYTES``, one write per segment
        they fill (a large batch rolls mid-way at ``segment_bytes``), and the frames ``then``
        after the last. Frames are cut by the records' estimated sizes (an upper bound), so
        each is encoded once."""
        records = list(zip(txs, digests, strict=True))
        ends = [0, *records_end_at(txs)]  # ends[k]: about the bytes of the first k records
        i, full = 0, False
        while i < len(records):
            active = self._active(wall_ms, full)
            segment_end = ends[i] + max(1, self.settings.segment_bytes - active.size)
            parts: list[bytes] = []  # each frame's head and body
            noted: list[tuple[list[Record], int]] = []  # each frame's records and offset
            offset = active.size
            while i < len(records) and ends[i] < segment_end:
                # up to and with the record that reaches the frame's size
                reach = min(ends[i] + BATCH_BYTES, segment_end)
                end = min(bisect_left(ends, reach, i + 1), len(records))
                head, body = txs_frame(records[i:end])
                parts += (head, body)
                noted.append((records[i:end], offset))
                offset += len(head) + len(body)
                i = end
            if i == len(records):
                parts += then
            self._write(*parts)
            for written, at in noted:
                active.noted(written, at)
            full = True  # records left over: this segment had its share

    def _write(self, *parts: bytes) -> None:
        """Append ``parts`` in gathered writes (of at most ``IOV_MAX`` parts each)."""
        assert self.fd is not None
        for at in range(0, len(parts), IOV_MAX):
            chunk = parts[at : at + IOV_MAX]
            if self.files.writev(self.fd, chunk) != sum(map(len, chunk)):
                raise OSError(28, "short write (disk full?)")
        written = sum(map(len, parts))
        self.segments[-1].size += written
        self.written += written
        self.unsynced.written += written
        self._track()

    def _track(self) -> None:
        """The current append descriptor has writes the next sync must cover (none comes
        with ``fsync = "never"``: no duplicate to hand over and close each turn)."""
        if not self.unsynced.active and self.fd is not None and self.settings.fsync != "never":
            self.unsynced.fds.append(self.files.dup(self.fd))
            self.unsynced.active = True

    def _retire(self) -> None:
        """The append descriptor is done with; the syncer closes it once synced."""
        if self.fd is not None:
            self.unsynced.fds.append(self.fd)
            self.fd = None
        self.unsynced.active = False

    def _active(self, wall_ms: int, full: bool = False) -> Segment:
        """The segment to append to, rolling to a new one when this one is ``full`` (or
        reached ``segment_bytes``) or old."""
        last = self.segments[-1]
        full = full or last.size >= self.settings.segment_bytes
        old = wall_ms - last.created_ms >= self.settings.segment_ms
        if not last.sealed and last.first_seq and (full or old):
            self._seal(last)
        if self.segments[-1].sealed:
            schema, count = self.settings.schema, self.head_count
            header = SegmentHeader(
                self.stream, self.head_seq, self.head_digest, schema, base_count=count
            )
            segment, self.fd = create(self.files, self.directory, header, wall_ms)
            self.segments.append(segment)
            self.unsynced.directory = True
            self._track()
        return self.segments[-1]

    def _seal(self, segment: Segment) -> None:
        self._retire()
        sealed = segment.path.with_name(segment.sealed_name())
        self.files.rename(segment.path, sealed)
        segment.path = sealed
        self.unsynced.directory = True

    def _start_over(self, base_seq: int, base_digest: bytes, wall_ms: int, count: int) -> None:
        """Drop the whole log; it continues from ``base_seq``, the ``count``-th tx of the
        stream (a peer's snapshot)."""
        self._retire()
        for segment in self.segments:
            self.files.unlink(segment.path, missing_ok=True)
        schema = self.settings.schema
        header = SegmentHeader(self.stream, base_seq, base_digest, schema, base_count=count)
        segment, self.fd = create(self.files, self.directory, header, wall_ms)
        self.segments = [segment]
        self.mark = self.synced_mark = base_seq
        self.unsynced.directory = True
        self._track()

    def _cut_after(self, seq: int, digest_at: bytes) -> None:
        """Cut the log after ``seq``, whose digest is ``digest_at`` (the core gave up an
        unverified tail, or rewinds to a quorum's timeline)."""
        if seq < self.segments[0].header.base_seq:  # refused before anything is touched
            raise StorageError(f"{self.stream}: a cut after {seq} reaches below the log")
        while len(self.segments) > 1 and self.segments[-1].header.base_seq >= seq:
            self._retire()  # the active segment goes, and its descriptor with it
            self.files.unlink(self.segments.pop().path)
            self.unsynced.directory = True
        segment = self.segments[-1]
        if segment.compacted and seq == segment.header.base_seq:  # the log's first: all goes
            self._start_over(seq, digest_at, 0, segment.header.base_count)
            return
        if segment.compacted:  # a rewind into it (compaction stays below the readable seq,
            # which no rewind reaches while a quorum's logs hold it: so only after a power loss
            # of every node under fsync other than "always", or a hostile peer's vouchers):
            self._retire()  # rewritten with its end moved back, to a record it kept
            if seq != segment.head_seq:
                try:
                    self.segments[-1] = compaction.rewrite(
                        self.files, self.directory, segment, seq, digest_at
                    )
                except ValueError as exc:
                    raise StorageError(f"{self.stream}: {exc}") from None
            self.mark = min(self.mark, seq)
            self.synced_mark = min(self.synced_mark, seq)
            return
        start = segment.offset_before(seq)
        cut, last, digest = start, 0, b""
        inside = False  # the cut lands inside a batch: a cut frame after it voids the rest
        removed = voided = 0  # records above ``seq``, read to the end to count them (a
        for kind, _, end, found, _, _, _ in self._frames(segment, start):  # short tail): frames
            if kind == MARK:  # the truncation takes, and in a batch the cut frame voids
                continue
            kept = [r for r in found if r[0].seq <= seq] if not (inside or removed) else []
            if kept:
                cut, last, digest = end, kept[-1][0].seq, kept[-1][1]
                inside = len(kept) < len(found)
                voided = len(found) - len(kept)
            else:
                removed += len(found)
        if seq != segment.header.base_seq and last != seq:
            raise StorageError(f"{self.stream}: the log holds no seq {seq} to cut after")
        self._retire()
        if segment.sealed:
            reopen(self.files, segment)
            self.unsynced.directory = True
        self.files.truncate(segment.path, cut)  # only frames wholly above ``seq`` (and their marks)
        segment.forget_after(cut)
        segment.records -= removed
        self.fd = self.files.open_append(segment.path)
        self._track()
        mark = min(self.mark, seq)
        tail = (cut_frame(seq) if inside else b"") + (mark_frame(mark) if mark else b"")
        if tail:  # the cut may have taken the last mark with it: one write puts both back
            self._write(tail)
        segment.records -= voided  # written: the split batch's void part is gone too
        if last:  # the file says so now; a failed write above leaves this to a retry
            segment.last_seq, segment.last_digest = last, digest
        else:
            segment.first_seq, segment.last_seq, segment.last_digest = 0, 0, b""
        self.mark = mark
        self.synced_mark = min(self.synced_mark, mark)

    # --- retention ----------------------------------------------------------------------

    def retain(self, wall_ms: int) -> int | None:
        """Delete the oldest sealed segments past ``retention_ms`` of age, or that the log can
        spare and still hold ``retention_bytes`` and ``retention_txs``; never the open one,
        never one holding unverified records. The seq the log now starts after, if it moved."""
        keep_ms, keep_bytes = self.settings.retention_ms, self.settings.retention_bytes
        keep_txs = self.settings.retention_txs
        if not keep_ms and not keep_bytes and not keep_txs:
            return None
        total, count = self.bytes_on_disk(), self.records()
        dropped = 0
        for segment in self.segments[:-1]:
            old = keep_ms and seq_unix_ms(segment.last_seq) < wall_ms - keep_ms
            # as Kafka's retention.bytes: a segment goes if the rest still hold the bound
            big = (keep_bytes and total - segment.size >= keep_bytes) or (
                keep_txs and count - segment.records >= keep_txs
            )
            if not segment.sealed or segment.last_seq > self.mark or not (old or big):
                break
            self.files.unlink(segment.path)
            total -= segment.size
            count -= segment.records
            dropped += 1
        if not dropped:
            return None
        del self.segments[:dropped]
        self.unsynced.directory = True
        return self.base_seq

    # --- reading ------------------------------------------------------------------------

    def read(self, after_seq: int, upto_seq: int, limit: int, bytes_max: int) -> LogSlice | None:
        """Up to ``limit`` records after ``after_seq`` and at or below ``upto_seq`` and within
        ``bytes_max`` (one larger record still goes), each re-checked; None if the log no
        longer holds ``after_seq``. Stops at the end of a segment: ask again from its head. A
        compacted segment's records come with their own prev digests, and ``through`` says how
        far the read looked (``LogSlice``)."""
        segment = next((s for s in self.segments if s.head_seq > after_seq), None)
        if segment is None or after_seq < segment.header.base_seq:
            return None
        if segment.compacted:
            return self._read_kept(segment, after_seq, upto_seq, limit, bytes_max)
        chain = segment.header.base_digest
        records: list[tuple[Tx, bytes]] = []
        size = 0
        start, index = segment.seek(after_seq)  # index: the first record's, once found
        for kind, offset, _, batch, _, _, _ in self._frames(segment, start):
            if kind == MARK:
                continue
            for item, digest in batch:
                if item.seq <= after_seq:
                    chain = digest  # the anchor: checked against what follows it
                    index += 1
                    continue
                size += tx_bytes(item)
                if item.seq > upto_seq or len(records) >= limit or (size > bytes_max and records):
                    return LogSlice(chain, records, [], first_index=index)
                expected = fold_tx(records[-1][1] if records else chain, item)
                if expected != digest:
                    raise CorruptRecord(
                        f"{segment.path}: the record at seq {item.seq} in the frame at offset "
                        f"{offset} does not chain"
                    )
                records.append((item, digest))
        return LogSlice(chain, records, [], first_index=index)

    def _read_kept(
        self, segment: Segment, after_seq: int, upto_seq: int, limit: int, bytes_max: int
    ) -> LogSlice:
        records: list[tuple[Tx, bytes]] = []
        prevs: list[bytes] = []
        indexes: list[int] = []
        size = 0
        for _, _, _, batch, _, own, at in self._frames(segment, segment.offset_before(after_seq)):
            for (item, digest), prev, index in zip(batch, own, at, strict=True):
                if item.seq <= after_seq:
                    continue
                size += tx_bytes(item)
                if item.seq > upto_seq or len(records) >= limit or (size > bytes_max and records):
                    through = records[-1][0].seq if records else upto_seq
                    first = prevs[0] if prevs else b""
                    return LogSlice(first, records, prevs, through, indexes=tuple(indexes))
                records.append((item, digest))
                prevs.append(prev)
                indexes.append(index)
        through = min(upto_seq, segment.head_seq)
        first = prevs[0] if prevs else segment.head_digest
        return LogSlice(first, records, prevs, through, indexes=tuple(indexes))

    def seq_before_index(self, index: int) -> int | None:
        """The seq after which the record of stream index ``index`` comes (where a read from
        it starts): the seq of the record before it, or of the nearest one kept before it in a
        compacted segment; the head for an index past it; None below the log's first."""
        if index < self.base_count:
            return None
        segment = next((s for s in self.segments if s.head_count > index), None)
        if segment is None:
            return self.head_seq
        before = segment.header.base_seq
        start, at = segment.seek_index(index)
        for _, _, _, batch, _, _, own in self._frames(segment, start):
            for i, (item, _) in enumerate(batch):
                if (own[i] if own else at) >= index:
                    return before
                before, at = item.seq, at + 1
        return before

    def _frames(self, segment: Segment, offset: int) -> Iterator[Entry]:
        with self.files.view(segment.path, offset) as data:
            if data is not None:
                yield from entries(data, offset)
