"""Compaction of a stream's log by key (``cleanup = "compact"``): sealed segments rewritten to
keep only the newest transaction of each key, and a tombstone (a key and an empty payload) only
until ``delete_retention_ms`` after its seq's time.

How this works: a pass has two halves. ``build`` reads sealed segments (files nothing writes any
more) and writes the compacted ones beside them as ``<name>.cleaning``, synced: it may run off the
loop, in another process (what it returns is plain data). As Kafka's cleaner does, it maps each key
(its blake3 hash) to its newest seq over the sealed segments from the first one not yet compacted
(or holding a tombstone past its retention) up to the bound, at most ``KEYS_MAX`` keys, then copies
the records of every segment up to the last one mapped that no newer record of their key replaces,
grouping neighbours so that each output holds about ``segment_bytes``. ``install`` runs on the loop:
if the log still begins with the segments the pass read, each output is renamed into place, the
directory synced, the inputs removed, and the log's list of segments takes the outputs. A crash at
any point leaves a valid log: an output is renamed only once whole and synced, and recovery removes
a ``.cleaning`` file and any file a compacted segment covers.

The bound is the caller's: the lowest of the verified mark, what a quorum's logs hold (a rewind
never reaches below it), the committed position of every consumer group of the stream (Transporter's
rule: never compact what a reader has not read), and the dedup window's start (a retry must still
find its original). A compacted segment keeps each record with the digest before it (``KEPT``
frames) and the digest at its end in its header, so that the chain of the segments stays whole and
each kept record can be checked on its own (docs/design.md, "Compacted streams").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from blake3 import blake3

from relay.core.flake import seq_unix_ms
from relay.storage.files import Files
from relay.storage.records import (
    BATCH_BYTES,
    KEPT,
    Kept,
    SegmentHeader,
    header_frame,
    kept_frame,
    record_bytes,
)
from relay.storage.segment import Segment, entries

CLEANING = ".cleaning"  # a compacted segment being written
KEYS_MAX = 1_000_000  # distinct keys one pass maps (about 60 MB); more wait for the next pass


@dataclass(slots=True)
class Built:
    """What ``build`` wrote, for ``install``."""

    count: int  # the segments it replaces: the first this many it was given
    shapes: list[tuple[Path, int]] = field(default_factory=list)  # their paths and sizes read
    outputs: list[Segment] = field(default_factory=list)  # their paths are the final names
    kept: int = 0  # records kept
    dropped: int = 0  # records dropped


def build(
    files: Files,
    directory: Path,
    segments: list[Segment],
    bound: int,
    tombstones_before_ms: int,
    segment_bytes: int,
) -> Built | None:
    """Write the compaction of the sealed ``segments`` (the log's first ones, in order) up to
    seq ``bound``; None if there is nothing to do. A record is dropped when a newer one of its
    key is in the segments up to the bound, or when it is a tombstone older than
    ``tombstones_before_ms``."""
    inputs = []
    for segment in segments:
        if not segment.sealed or segment.head_seq > bound:
            break
        inputs.append(segment)
    first = next(
        (
            i
            for i, s in enumerate(inputs)
            if not s.compacted or 0 < s.oldest_tombstone_ms < tombstones_before_ms
        ),
        None,
    )
    if first is None:
        return None
    newest, mapped = _newest(files, inputs[first:])
    inputs = inputs[: first + mapped]
    built = Built(len(inputs), [(s.path, s.size) for s in inputs])
    group: list[Segment] = []
    kept: list[Kept] = []
    size = 0
    for segment in inputs:
        for record in _records(files, segment):
            tx = record[0]
            if tx.key is not None:
                if newest.get(blake3(tx.key).digest(16), tx.seq) > tx.seq:
                    built.dropped += 1
                    continue
                if not tx.payload and seq_unix_ms(tx.seq) < tombstones_before_ms:
                    built.dropped += 1
                    continue
            kept.append(record)
            size += record_bytes(tx) + 32
        group.append(segment)
        if size >= segment_bytes:
            built.outputs.append(_write(files, directory, group, kept))
            built.kept += len(kept)
            group, kept, size = [], [], 0
    if group:
        built.outputs.append(_write(files, directory, group, kept))
        built.kept += len(kept)
    return built


def install(
    files: Files, directory: Path, log_segments: list[Segment], given: list[Segment], built: Built
) -> bool:
    """Put ``built`` in place of the segments it replaces (the first of ``given``, the list
    ``build`` was given), if the log still begins with them (else its files are removed:
    retention or a cut changed the log meanwhile); whether it did. ``OSError`` part way: the
    outputs renamed so far stand in the list for the inputs they cover, the rest are removed
    (recovery removes inputs left behind)."""
    count = built.count
    inputs, current = given[:count], log_segments[:count]
    same = len(current) == count and all(a is b for a, b in zip(current, inputs, strict=True))
    if not same or [(s.path, s.size) for s in current] != built.shapes:
        discard(files, built.outputs)
        return False
    placed: list[Segment] = []
    try:
        for output in built.outputs:
            files.rename(_cleaning(output.path), output.path)
            placed.append(output)
    finally:  # an output renamed may have taken an input's name: the list follows the files
        if len(placed) < len(built.outputs):
            with contextlib.suppress(OSError):
                discard(files, built.outputs[len(placed) :])
        covered = [s for s in inputs if placed and s.head_seq <= placed[-1].head_seq]
        log_segments[: len(covered)] = placed
    files.fsync_dir(directory)
    finals = {output.path for output in placed}
    for segment in covered:
        if segment.path not in finals:
            files.unlink(segment.path)
    files.fsync_dir(directory)
    return True


def discard(files: Files, outputs: list[Segment]) -> None:
    """Remove the ``.cleaning`` files of a pass's ``outputs``."""
    for output in outputs:
        files.unlink(_cleaning(output.path), missing_ok=True)


def rewrite(files: Files, directory: Path, segment: Segment, upto: int, digest: bytes) -> Segment:
    """``segment`` (compacted) cut after seq ``upto``, whose digest is ``digest``: its records
    above it dropped, its end moved there. Written whole, synced and renamed into place."""
    header = segment.header
    kept = [r for r in _records(files, segment) if r[0].seq <= upto]
    if not kept or kept[-1][0].seq != upto:  # the count at a seq it dropped is not known
        raise ValueError(f"{segment.path}: a cut at seq {upto}, which it does not hold")
    base = SegmentHeader(
        header.stream, header.base_seq, header.base_digest, header.schema, 0, b"", header.base_count
    )
    output = _write_segment(files, directory, base, upto, digest, kept[-1][3] + 1, kept)
    files.rename(_cleaning(output.path), output.path)
    if output.path != segment.path:
        files.unlink(segment.path)
    files.fsync_dir(directory)
    return output


def _newest(files: Files, inputs: list[Segment]) -> tuple[dict[bytes, int], int]:
    """Each key's newest seq over ``inputs``, and how many of them were mapped (all, unless
    ``KEYS_MAX`` keys filled the map first: a pass then covers the segments mapped; the first
    is always mapped whole)."""
    newest: dict[bytes, int] = {}
    for i, segment in enumerate(inputs):
        if len(newest) >= KEYS_MAX:
            return newest, i
        for tx, _, _, _ in _records(files, segment):
            if tx.key is not None:
                newest[blake3(tx.key).digest(16)] = tx.seq
    return newest, len(inputs)


def _records(files: Files, segment: Segment) -> Iterator[Kept]:
    """Every record of a sealed segment with the digest before it and its index."""
    chain = segment.header.base_digest
    index = segment.header.base_count
    with files.view(segment.path, segment.data_start) as data:
        if data is None:
            return
        for entry in entries(data, segment.data_start):
            kept = entry.kind == KEPT
            for i, (tx, digest) in enumerate(entry.records):
                if kept:
                    yield tx, entry.prevs[i], digest, entry.indexes[i]
                else:
                    yield tx, chain, digest, index
                    index += 1
                chain = digest


def _write(files: Files, directory: Path, group: list[Segment], kept: list[Kept]) -> Segment:
    first, last = group[0].header, group[-1]
    header = SegmentHeader(
        first.stream,
        first.base_seq,
        first.base_digest,
        last.header.schema,
        0,
        b"",
        first.base_count,
    )
    end = (last.head_seq, last.head_digest, last.head_count)
    return _write_segment(files, directory, header, *end, kept)


def _write_segment(
    files: Files,
    directory: Path,
    base: SegmentHeader,
    end_seq: int,
    end_digest: bytes,
    end_count: int,
    kept: list[Kept],
) -> Segment:
    """A compacted segment of ``kept`` written and synced as ``<final name>.cleaning``; the
    segment as it will be once renamed to its final name."""
    header = SegmentHeader(
        base.stream,
        base.base_seq,
        base.base_digest,
        base.schema,
        end_seq,
        end_digest,
        base.base_count,
        end_count,
    )
    segment = Segment(directory / "-", header)
    segment.path = directory / segment.compacted_name()
    parts = [header_frame(header)]
    offset = len(parts[0])
    noted: list[tuple[list[Kept], int]] = []
    i = 0
    while i < len(kept):
        size, j = 0, i
        while j < len(kept) and (j == i or size < BATCH_BYTES):
            size += record_bytes(kept[j][0])
            j += 1
        body = kept_frame(kept[i:j])
        parts.append(body)
        noted.append((kept[i:j], offset))
        offset += len(body)
        i = j
    fd = files.create(_cleaning(segment.path))
    try:
        if files.writev(fd, parts) != offset:
            raise OSError(28, "short write (disk full?)")
        files.fdatasync(fd)
    finally:
        files.close(fd)
    for records, at in noted:
        segment.noted([(tx, digest) for tx, _, digest, _ in records], at, records[0][3])
        segment.note_tombstones(tx for tx, _, _, _ in records)
    segment.size = offset
    segment.last_seq, segment.last_digest = end_seq, end_digest
    return segment


def _cleaning(path: Path) -> Path:
    return path.with_name(path.name + CLEANING)
