"""One segment file of a stream's log: its name, its sparse index, appends, scans and reads.

How this works: the active segment is named by the seq its timeline continues from
(``<base>.open``); sealing renames it to ``<first>-<last>_<first ms>-<last ms>.seg``, so a
reader finds the file for a seq or a time from the names alone. A compacted segment
(``compaction.py``) is ``<base>-<end>.kept``: the timeline after ``base`` up to ``end``, less
what the compaction dropped. While a segment is written or
scanned it keeps a sparse index, one ``(seq, offset, index)`` every ``INDEX_BYTES`` of records
(the frame's first seq and its stream index), so a read seeks near its start, by seq or by
index, and parses forward. A plain segment's records are dense: the n-th holds the index
``base_count + n`` of its header; a compacted one's carry their own.
"""

from __future__ import annotations

import mmap
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from relay.core.flake import seq_unix_ms
from relay.core.messages import Tx
from relay.storage.files import Files
from relay.storage.records import (
    CUT,
    HEADER,
    KEPT,
    MARK,
    TXS,
    CorruptRecord,
    Record,
    SegmentHeader,
    decode_header,
    decode_kept,
    decode_seq,
    decode_txs,
    header_frame,
    read_frame,
)

INDEX_BYTES = 64 << 10
SEALED = re.compile(r"^(\d{20})-(\d{20})_(\d{13})-(\d{13})\.seg$")
ACTIVE = re.compile(r"^(\d{20})\.open$")
COMPACTED = re.compile(r"^(\d{20})-(\d{20})\.kept$")


@dataclass(frozen=True, slots=True)
class SegmentName:
    base_seq: int  # for an open segment; 0 for a sealed one (its header says)
    first_seq: int
    last_seq: int
    first_ms: int
    last_ms: int
    sealed: bool
    compacted: bool = False

    @property
    def order(self) -> int:
        """Where the file goes among its log's: by the first seq it may hold."""
        return self.first_seq if self.sealed and not self.compacted else self.base_seq + 1


def parse_name(name: str) -> SegmentName | None:
    m = SEALED.match(name)
    if m:
        first, last, first_ms, last_ms = (int(g) for g in m.groups())
        return SegmentName(0, first, last, first_ms, last_ms, True)
    m = COMPACTED.match(name)
    if m:
        base, end = int(m.group(1)), int(m.group(2))
        return SegmentName(base, 0, end, 0, 0, True, True)
    m = ACTIVE.match(name)
    if m:
        return SegmentName(int(m.group(1)), 0, 0, 0, 0, False)
    return None


@dataclass(slots=True)
class Segment:
    path: Path
    header: SegmentHeader
    first_seq: int = 0  # 0 while empty
    last_seq: int = 0
    last_digest: bytes = b""
    size: int = 0
    records: int = 0  # txs it holds (cut frames applied)
    created_ms: int = 0  # wall time it was opened for writing (segment_ms rolls on it)
    index: list[tuple[int, int, int]] = field(default_factory=list)  # (seq, offset, index)
    indexed_at: int = -INDEX_BYTES  # offset of the last indexed frame
    oldest_tombstone_ms: int = 0  # a compacted segment's: its oldest tombstone's time (0: none)

    @property
    def sealed(self) -> bool:
        # the path's string is kept by pathlib; its ``suffix`` is Python code, 4x slower
        return str(self.path).endswith((".seg", ".kept"))

    @property
    def compacted(self) -> bool:
        return self.header.compacted

    @property
    def head_seq(self) -> int:
        return self.last_seq or self.header.base_seq

    @property
    def head_digest(self) -> bytes:
        return self.last_digest or self.header.base_digest

    def compacted_name(self) -> str:
        return f"{self.header.base_seq:020d}-{self.header.end_seq:020d}.kept"

    def sealed_name(self) -> str:
        first, last = self.first_seq, self.last_seq
        return f"{first:020d}-{last:020d}_{seq_unix_ms(first):013d}-{seq_unix_ms(last):013d}.seg"

    @property
    def head_count(self) -> int:
        """Txs in the stream's history up to ``head_seq`` (the next record's index)."""
        if self.compacted:
            return self.header.end_count
        return self.header.base_count + self.records

    def noted(self, records: list[Record], offset: int, first_index: int = -1) -> None:
        """A batch frame of ``records`` at ``offset`` was written or scanned (``first_index``:
        a kept frame's first record's index; a plain one's follows the records before it)."""
        if first_index < 0:
            first_index = self.header.base_count + self.records
        if not self.first_seq:
            self.first_seq = records[0][0].seq
        self.last_seq, self.last_digest = records[-1][0].seq, records[-1][1]
        self.records += len(records)
        if offset - self.indexed_at >= INDEX_BYTES:
            self.index.append((records[0][0].seq, offset, first_index))
            self.indexed_at = offset

    def note_tombstones(self, txs: Iterable[Tx]) -> None:
        """Kept ``txs`` were written or scanned: the oldest tombstone among them counts."""
        for tx in txs:
            if tx.key is not None and not tx.payload:
                ms = seq_unix_ms(tx.seq)
                if not self.oldest_tombstone_ms or ms < self.oldest_tombstone_ms:
                    self.oldest_tombstone_ms = ms

    def offset_before(self, seq: int) -> int:
        """An offset at or before the frame holding the first tx above ``seq`` (a frame
        start): the index names each indexed frame by its first seq."""
        i = bisect_right(self.index, (seq, 1 << 62, 0))
        return self.index[i - 1][1] if i and self.index[i - 1][0] <= seq else self.data_start

    def seek(self, seq: int) -> tuple[int, int]:
        """``offset_before(seq)``, and the index of the first record from there."""
        i = bisect_right(self.index, (seq, 1 << 62, 0))
        if i and self.index[i - 1][0] <= seq:
            return self.index[i - 1][1], self.index[i - 1][2]
        return self.data_start, self.header.base_count

    def seek_index(self, index: int) -> tuple[int, int]:
        """The offset of a frame whose first record comes before the record of stream index
        ``index`` (so that a scan from there meets the record before it), and that first
        record's index."""
        i = bisect_left([at for _, _, at in self.index], index)
        if i:
            return self.index[i - 1][1], self.index[i - 1][2]
        return self.data_start, self.header.base_count

    @property
    def data_start(self) -> int:
        return len(header_frame(self.header))

    def forget_after(self, offset: int) -> None:
        """The file was cut at ``offset``: index entries past it go."""
        self.index = [entry for entry in self.index if entry[1] < offset]
        self.indexed_at = self.index[-1][1] if self.index else -INDEX_BYTES
        self.size = offset


def create(
    files: Files, directory: Path, header: SegmentHeader, wall_ms: int
) -> tuple[Segment, int]:
    """A new open segment with its header written; (segment, fd for appending)."""
    path = directory / f"{header.base_seq:020d}.open"
    fd = files.create(path)
    data = header_frame(header)
    try:
        if files.writev(fd, (data,)) != len(data):
            raise OSError(28, "short write (disk full?)")
    except OSError:
        files.close(fd)
        raise
    return Segment(path, header, size=len(data), created_ms=wall_ms), fd


class Entry(NamedTuple):
    """One frame as read: a batch (its cuts applied), a compacted batch, or a mark."""

    kind: int
    offset: int
    end: int  # where the next frame starts
    records: list[Record]  # (tx, digest) of a batch, TXS or KEPT
    mark: int  # a mark's seq
    prevs: list[bytes]  # a KEPT batch's: the digest before each record
    indexes: list[int]  # and each record's index


def scan(files: Files, path: Path) -> tuple[SegmentHeader, Iterator[Entry]]:
    """The header and the frames of a whole segment file; a bad frame raises
    ``CorruptRecord`` from the iterator with the offset in its message."""
    data = files.read_bytes(path)
    first = read_frame(data, 0)
    if first is None or first[0] != HEADER:
        raise CorruptRecord(f"{path}: no segment header at offset 0")
    header = decode_header(first[1])
    return header, entries(data, first[2])


def entries(data: bytes | mmap.mmap, offset: int) -> Iterator[Entry]:
    """The frames from ``offset`` on; a batch comes with the cut frames that follow it
    applied (its void records left out, its ``end`` past them)."""
    while True:
        found = read_frame(data, offset)
        if found is None:
            return
        kind, body, end = found
        try:
            if kind == TXS:
                end, batch = _cuts_applied(data, end, decode_txs(body))
                entry = Entry(kind, offset, end, batch, 0, [], [])
            elif kind == KEPT:
                kept = decode_kept(body)
                batch = [(tx, digest) for tx, _, digest, _ in kept]
                prevs, indexes = [r[1] for r in kept], [r[3] for r in kept]
                entry = Entry(kind, offset, end, batch, 0, prevs, indexes)
            elif kind == MARK:
                entry = Entry(kind, offset, end, [], decode_seq(body), [], [])
            elif kind == CUT:
                raise CorruptRecord("a cut frame that follows no batch")
            else:
                raise CorruptRecord(f"a frame of unknown kind {kind}")
        except CorruptRecord as exc:
            raise CorruptRecord(f"{exc} at offset {offset}") from None
        yield entry
        offset = end


def _cuts_applied(
    data: bytes | mmap.mmap, end: int, batch: list[Record]
) -> tuple[int, list[Record]]:
    """A batch ending at ``end`` less what the cut frames right after it void. A bad frame
    after it is left for the next read to report."""
    while True:
        try:
            found = read_frame(data, end)
        except CorruptRecord:
            return end, batch
        if found is None or found[0] != CUT:
            return end, batch
        seq = decode_seq(found[1])
        batch = [r for r in batch if r[0].seq <= seq]
        if not batch:
            raise CorruptRecord("a cut frame voids a whole batch")
        end = found[2]


def reopen(files: Files, segment: Segment) -> None:
    """Rename a sealed segment back to an open one (its tail is being cut)."""
    if segment.sealed:
        opened = segment.path.with_name(f"{segment.header.base_seq:020d}.open")
        files.rename(segment.path, opened)
        segment.path = opened
