"""Reading a node's logs while it is down, changing nothing: what ``relay log`` shows.

How this works: every function here only reads. ``segments`` lists a stream's files with
their seq and time ranges; ``verify`` re-folds every segment's chain (each record of a compacted
segment from its own prev digest) and names the file and offset of the first record that does
not hold; ``records`` walks a seq range.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from relay.core.flake import seq_unix_ms
from relay.core.messages import Tx, fold_tx
from relay.storage.files import OS_FILES
from relay.storage.records import KEPT, TXS, CorruptRecord
from relay.storage.segment import parse_name, scan
from relay.storage.store import dir_name


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    path: Path
    first_seq: int
    last_seq: int
    first_ms: int
    last_ms: int
    size: int
    records: int
    sealed: bool


def streams(data_dir: Path) -> list[tuple[str, Path]]:
    """(stream, directory) of every stream a data directory holds."""
    found = []
    root = data_dir / "streams"
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        for path in sorted(directory.glob("*")):
            if parse_name(path.name):
                try:
                    header, _ = scan(OS_FILES, path)
                except (CorruptRecord, OSError):
                    continue
                if dir_name(header.stream) == directory.name:
                    found.append((header.stream, directory))
                break
    return found


def ordered(directory: Path) -> list[Path]:
    def key(path: Path) -> int:
        name = parse_name(path.name)
        assert name is not None
        return name.order

    return sorted((p for p in directory.iterdir() if parse_name(p.name)), key=key)


def segments(directory: Path) -> list[SegmentInfo]:
    """Each segment of a stream with its ranges (an open one is scanned for them)."""
    found = []
    for path in ordered(directory):
        name = parse_name(path.name)
        assert name is not None
        size = path.stat().st_size
        first = last = count = 0
        try:
            _, frames = scan(OS_FILES, path)
            for kind, _, _, batch, _, _, _ in frames:
                if kind in (TXS, KEPT):
                    first, last = first or batch[0][0].seq, batch[-1][0].seq
                    count += len(batch)
        except CorruptRecord:
            pass  # ``verify`` says where
        found.append(
            SegmentInfo(
                path,
                first,
                last,
                seq_unix_ms(first) if first else 0,
                seq_unix_ms(last) if last else 0,
                size,
                count,
                name.sealed,
            )
        )
    return found


def verify(directory: Path, stream: str) -> tuple[int, str | None]:
    """(records checked, the first problem as "file: what at offset N", or None)."""
    checked = 0
    chain: bytes | None = None
    last = 0
    for path in ordered(directory):
        try:
            header, frames = scan(OS_FILES, path)
            if header.stream != stream:
                return checked, f"{path}: belongs to stream {header.stream!r}"
            if chain is not None and (header.base_seq, header.base_digest) != (last, chain):
                return checked, f"{path}: does not continue the segment before it"
            chain, last = header.base_digest, header.base_seq
            for _, offset, _, batch, _, prevs, _ in frames:
                for i, (item, digest) in enumerate(batch):
                    prev = prevs[i] if prevs else chain  # a kept record folds from its own
                    if item.seq <= last or fold_tx(prev, item) != digest:
                        return checked, (
                            f"{path}: a record that does not chain (seq {item.seq}) in the frame "
                            f"at offset {offset}"
                        )
                    chain, last, checked = digest, item.seq, checked + 1
            if header.compacted:
                chain, last = header.end_digest, header.end_seq
        except CorruptRecord as exc:
            return checked, f"{path}: {exc}"
        except OSError as exc:
            return checked, f"{path}: unreadable ({exc.strerror or exc})"
    return checked, None


def records(directory: Path, after_seq: int, upto_seq: int) -> Iterator[tuple[Tx, bytes]]:
    """The records with ``after_seq < seq <= upto_seq``, in order; a bad frame raises
    ``CorruptRecord``."""
    for path in ordered(directory):
        _, frames = scan(OS_FILES, path)
        for _, _, _, batch, _, _, _ in frames:
            for item, digest in batch:
                if item.seq > upto_seq:
                    return
                if after_seq < item.seq:
                    yield item, digest
