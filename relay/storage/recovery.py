"""Opening a stream's log after a restart: every segment re-checked, a torn or corrupt tail cut.

How this works: the segments are read in seq order. Each must name the stream, carry no
schema fingerprint but a version of the stream's schema (``StorageSettings.schemas``), continue
the previous one's chain (its header's base seq and digest are the previous last record's), and
hold frames that pass their checksum, decode, ascend, and fold to their stored digests. At the
first record that does not, the log is cut there: the files from that point on are moved to
``quarantine/`` for the operator, the problem is reported with the file and offset, and the
node fetches what follows from its peers. A torn tail (the last write cut short by a crash) is
the common case of the same rule.

What the core gets back (``Restored``): the last ``keep`` records up to the verified mark and
every record after it (the unverified tail), the digest before them, the mark, and the
producer keys of the dedup window before them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from relay.core.dedup import content_tag
from relay.core.digest import genesis
from relay.core.events import Restored
from relay.core.flake import seq_unix_ms
from relay.core.messages import KeyRecord, Tx, fold_tx, tx_bytes
from relay.storage.compaction import CLEANING
from relay.storage.files import OS_FILES, Files
from relay.storage.records import KEPT, TXS, CorruptRecord
from relay.storage.segment import Entry, Segment, SegmentName, parse_name, reopen, scan
from relay.storage.settings import StorageSettings
from relay.storage.stream_log import StreamLog


@dataclass(slots=True)
class Recovered:
    log: StreamLog
    restored: Restored
    problems: list[str] = field(default_factory=list)  # what was cut, for the operator


@dataclass(frozen=True, slots=True)
class Window:
    """How much of the log the core takes back into memory."""

    keep: int  # records up to the verified mark kept in memory
    keep_bytes: int  # and at most this many bytes of them (``tx_bytes``)
    dedup_ms: int
    dedup_keys_max: int
    total_bytes: int = 1 << 62  # over every log (a share of the node's memory budget)


def open_log(
    directory: Path,
    stream: str,
    settings: StorageSettings,
    window: Window,
    wall_ms: int,
    files: Files = OS_FILES,
) -> Recovered:
    problems: list[str] = []
    paths = _leftovers_removed(files, directory)
    segments: list[Segment] = []
    tail = _Tail(window.keep, window.keep_bytes, window.dedup_keys_max)
    for i, path in enumerate(paths):
        try:
            segment = _check(files, path, stream, settings, segments, tail)
        except _Cut as cut:
            problems.append(cut.reason)
            _quarantine(files, directory, paths[i:], cut, segments, wall_ms)
            break
        segments.append(segment)
    if segments and segments[-1].sealed is False:
        segments[-1].created_ms = wall_ms
    mark = min(tail.mark_seq, _head(segments))
    log = StreamLog(directory, stream, settings, segments, mark, files)
    return Recovered(log, tail.restored(stream, log, window.dedup_ms), problems)


def _leftovers_removed(files: Files, directory: Path) -> list[Path]:
    """The log's files in order, less what an unfinished compaction left: its file being
    written (``.cleaning``), and the files a compacted segment in place replaces (it is renamed
    into place only once whole and synced, before they are removed)."""
    names: dict[Path, SegmentName] = {}
    for path in files.listdir(directory):
        if path.name.endswith(CLEANING):
            files.unlink(path, missing_ok=True)
        elif (name := parse_name(path.name)) is not None:
            names[path] = name
    replaced = [
        path
        for path, name in names.items()
        if any(
            other is not path and _covers(kept, name)
            for other, kept in names.items()
            if kept.compacted
        )
    ]
    for path in replaced:
        files.unlink(path)
        del names[path]
    if replaced:
        files.fsync_dir(directory)
    return sorted(names, key=lambda p: names[p].order)


def _covers(kept: SegmentName, name: SegmentName) -> bool:
    """Whether the compacted segment ``kept`` holds the whole range of ``name``'s file."""
    if name.compacted:
        inside = kept.base_seq <= name.base_seq and name.last_seq <= kept.last_seq
        return inside and (kept.base_seq, kept.last_seq) != (name.base_seq, name.last_seq)
    return name.sealed and kept.base_seq < name.first_seq and name.last_seq <= kept.last_seq


def _head(segments: list[Segment]) -> int:
    return segments[-1].head_seq if segments else 0


class _Cut(Exception):
    def __init__(self, reason: str, path: Path, offset: int, segment: Segment | None) -> None:
        super().__init__(reason)
        self.reason, self.path, self.offset, self.segment = reason, path, offset, segment


def _check(
    files: Files,
    path: Path,
    stream: str,
    settings: StorageSettings,
    before: list[Segment],
    tail: _Tail,
) -> Segment:
    try:
        header, frames = scan(files, path)
    except (CorruptRecord, OSError) as exc:
        raise _Cut(f"{path}: unreadable segment ({exc}); cut here", path, 0, None) from None
    if header.stream != stream:
        raise _Cut(f"{path}: belongs to stream {header.stream!r}; cut here", path, 0, None)
    if header.schema and header.schema not in settings.schemas | {settings.schema}:
        why = f"written under schema {header.schema.hex()[:16]}, no version of this stream's"
        raise _Cut(f"{path}: {why}; cut here", path, 0, None)
    head = before[-1] if before else None
    if head is not None and (header.base_seq, header.base_digest, header.base_count) != (
        head.head_seq,
        head.head_digest,
        head.head_count,
    ):
        raise _Cut(f"{path}: does not continue the segment before it; cut here", path, 0, None)
    segment = Segment(path, header)
    tail.start(header.base_seq, header.base_digest, header.base_count)
    if header.compacted:
        return _check_compacted(path, segment, frames, tail)
    chain, last = header.base_digest, header.base_seq
    offset = segment.data_start
    segment.size = offset
    try:
        for kind, offset, end, batch, mark, _, _ in frames:
            if kind == KEPT:
                raise CorruptRecord(f"a compacted batch in a segment that is not, at {offset}")
            if kind == TXS:
                for item, digest in batch:  # the whole frame holds, or it is cut whole
                    if item.seq <= last or fold_tx(chain, item) != digest:
                        raise CorruptRecord(
                            f"a record that does not chain (seq {item.seq}) in the frame at "
                            f"offset {offset}"
                        )
                    chain, last = digest, item.seq
                segment.noted(batch, offset)
                tail.add(batch)
            else:
                tail.mark(min(mark, last))
            segment.size = end
    except CorruptRecord as exc:
        raise _Cut(f"{path}: {exc}; cut here", path, segment.size, segment) from None
    return segment


def _check_compacted(path: Path, segment: Segment, frames: Iterator[Entry], tail: _Tail) -> Segment:
    """A compacted segment: kept batches alone, whose records ascend inside its range (each
    folds from its own prev digest: ``decode_kept``); its timeline ends where its header says.
    What it holds is served from the log: the core's window starts after it."""
    header = segment.header
    last, index = header.base_seq, header.base_count  # index: the lowest the next may have
    offset = segment.size = segment.data_start
    try:
        for kind, offset, end, batch, _, _, indexes in frames:
            if kind != KEPT:
                raise CorruptRecord(f"a frame of kind {kind} in a compacted segment at {offset}")
            if batch[0][0].seq <= last or batch[-1][0].seq > header.end_seq:
                raise CorruptRecord(f"kept records out of order or range at offset {offset}")
            if any(a[0].seq >= b[0].seq for a, b in pairwise(batch)):
                raise CorruptRecord(f"kept records out of order at offset {offset}")
            if indexes[0] < index or indexes[-1] >= header.end_count:
                raise CorruptRecord(f"kept records' indexes out of range at offset {offset}")
            last, index = batch[-1][0].seq, indexes[-1] + 1
            segment.noted(batch, offset, indexes[0])
            segment.note_tombstones(tx for tx, _ in batch)
            segment.size = end
    except CorruptRecord as exc:
        raise _Cut(f"{path}: {exc}; cut here", path, 0, None) from None
    segment.last_seq, segment.last_digest = header.end_seq, header.end_digest
    tail.start_over(header.end_seq, header.end_digest, header.end_count)
    return segment


def _quarantine(
    files: Files, directory: Path, rest: list[Path], cut: _Cut, kept: list[Segment], wall_ms: int
) -> None:
    """Move the files from the cut on aside (into a folder named by the UTC time); the cut
    one keeps its good part, and a copy of the whole of it goes aside too."""
    aside = directory / "quarantine" / time.strftime("%Y%m%dT%H%M%S", time.gmtime(wall_ms / 1000))
    files.mkdir(aside, parents=True)
    salvage = cut.segment if cut.segment is not None and cut.segment.first_seq else None
    for path in rest:
        if path == cut.path and salvage is not None:
            files.copy(path, aside / path.name)
        else:
            files.rename(path, aside / path.name)
    if salvage is not None:
        files.truncate(cut.path, cut.offset)
        reopen(files, salvage)
        kept.append(salvage)
    files.fsync_dir(directory)


class _Tail:
    """The records a recovery hands the core: a bounded window before the verified mark and
    everything after it, and the dedup keys of what falls out of the window."""

    def __init__(self, keep: int, keep_bytes: int, keys_max: int) -> None:
        self.verified: deque[tuple[Tx, bytes]] = deque()
        self.verified_bytes = 0
        self.unverified: list[tuple[Tx, bytes]] = []
        self.keep = keep
        self.keep_bytes = keep_bytes
        self.base: tuple[int, bytes, int] | None = None  # the last record that fell out, and
        # how many txs the stream's history holds up to it
        self.keys: deque[KeyRecord] = deque(maxlen=keys_max)
        self.mark_seq = 0  # the highest verified mark read

    def start(self, base_seq: int, base_digest: bytes, base_count: int) -> None:
        """A segment begins; the first one says where the log starts."""
        if self.base is None:  # the log starts at a verified seq (genesis or a snapshot's)
            self.base = (base_seq, base_digest, base_count)
            self.mark_seq = base_seq

    def start_over(self, seq: int, digest: bytes, count: int) -> None:
        """Everything up to ``seq`` is verified and served from the log alone (a compacted
        segment ends there): the window starts after it."""
        self.verified.clear()
        self.unverified.clear()
        self.verified_bytes = 0
        self.base = (seq, digest, count)
        self.mark_seq = max(self.mark_seq, seq)

    def add(self, records: list[tuple[Tx, bytes]]) -> None:
        self.unverified += records

    def mark(self, seq: int) -> None:
        if seq <= self.mark_seq:
            return
        self.mark_seq = seq
        moved = 0
        for tx, _ in self.unverified:
            if tx.seq > seq:
                break
            moved += 1
        self.verified.extend(self.unverified[:moved])
        self.verified_bytes += sum(tx_bytes(tx) for tx, _ in self.unverified[:moved])
        del self.unverified[:moved]
        while len(self.verified) > self.keep or self.verified_bytes > self.keep_bytes:
            tx, digest = self.verified.popleft()
            self.verified_bytes -= tx_bytes(tx)
            self.base = (tx.seq, digest, self.base[2] + 1 if self.base else 1)
            if tx.producer_id:
                self.keys.append((tx.producer_id, tx.msg_id, tx.seq, digest, content_tag(tx)))

    def restored(self, stream: str, log: StreamLog, dedup_ms: int) -> Restored:
        records = [*self.verified, *self.unverified]
        base_seq, base_digest, base_count = self.base or (0, genesis(stream), 0)
        head = records[-1][0].seq if records else base_seq
        horizon = seq_unix_ms(head) - dedup_ms
        keys = tuple(k for k in self.keys if seq_unix_ms(k[2]) >= horizon)
        return Restored(
            stream,
            base_seq,
            base_digest,
            tuple(tx for tx, _ in records),
            tuple(d for _, d in records),
            log.mark,
            keys,
            log.base_seq,  # below the records kept in memory, readers are served from the log
            log.chained_seq,
            base_count,
        )
