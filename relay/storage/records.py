"""How a segment file is laid out: a header, then framed records.

Every frame is ``length u32 | crc32 u32 | kind u8 | body`` (big-endian; the CRC covers kind and
body), so a torn write or a flipped byte is found where it is. Kinds:

- ``HEADER`` (first frame of every segment): msgpack ``[format, stream, base_seq, base_digest]``
  and a map after them when it has any of ``"count"`` (how many txs the stream's history holds
  up to ``base_seq``: the dense index of the segment's first record; absent: 0) and
  ``"schema"`` (for a typed stream, a fingerprint); the segment continues a timeline whose
  digest at ``base_seq`` is ``base_digest``, and holds entries of the schema with that
  fingerprint (``relay.schema``).
- ``TXS``: a batch of records, msgpack ``[[[seq, prev, origin, epoch, producer_id, msg_id,
  payload, key, headers], digest], ...]``: each the record of docs/design.md with its
  replication fields and its rolling digest. One frame per write (as Kafka's record batches):
  one checksum and one encoding call cover everything a loop turn appends, and a torn batch is
  cut whole.
- ``MARK``: ``seq u64``: a quorum verified the timeline up to ``seq`` (a lower bound).
- ``CUT``: ``seq u64``, right after a batch: its records above ``seq`` are void (the core gave
  up an unverified tail that ends inside the batch; the batch itself is never rewritten, so
  nothing at or below ``seq`` is ever taken off the disk).
- ``KEPT``: the records a compaction kept (``compaction.py``), msgpack ``[[[seq, ...], prev,
  digest, index], ...]``: each with the digest before it as well as after it, since the record
  before it may be gone, and its dense index. Only a compacted segment holds them, and nothing
  else but its header, whose map says where the segment's timeline ends (``"end": [seq,
  digest, count]``) whatever it kept.

Everything read back is checked as hostile input: a bad frame raises ``CorruptRecord`` naming
what is wrong; nothing here trusts a length or a type it has not checked.
"""

from __future__ import annotations

import mmap
import zlib
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from itertools import accumulate, repeat
from operator import add
from struct import Struct
from typing import Any

import msgpack
import msgspec

from relay.core.digest import DIGEST_BYTES
from relay.core.messages import Tx, fold_tx, payload_of, plain, producer_id_of
from relay.wire.fields import TxRow, as_bytes, as_int, as_str, checked_txs

FORMAT = 3  # 3: a header may count the history before it, kept records their index
FRAME = Struct(">IIB")  # length of kind + body, crc32 of kind + body, kind
MARK_BODY = Struct(">Q")
HEADER, TXS, MARK, CUT, KEPT = 1, 2, 3, 4, 5
FRAME_BYTES_MAX = 64 << 20  # a batch's last record may be as large as a client request
BATCH_BYTES = 192 << 10  # a batch frame holds about this much (or one larger record):
# measured 2-6% more throughput than 512 KiB frames under glibc's default mmap threshold,
# which maps frames of 256 KiB and more afresh (relay.runtime.malloc raises it)
RECORD_OVERHEAD = 96  # a record's bytes besides its payload, key, producer id and headers

Record = tuple[Tx, bytes]  # a tx and the stream's digest after it
Kept = tuple[Tx, bytes, bytes, int]  # a compacted segment's record: the tx, the digests
# before and after it, its index (how many txs the stream's history holds before it)
_BATCH = msgspec.msgpack.Decoder(list[tuple[TxRow, bytes]])
_KEPT = msgspec.msgpack.Decoder(list[tuple[TxRow, bytes, bytes, int]])
_encode = msgspec.msgpack.Encoder().encode


class CorruptRecord(ValueError):
    """A frame that is torn, fails its checksum, or does not decode."""


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    stream: str
    base_seq: int
    base_digest: bytes
    schema: bytes = b""  # the fingerprint of the schema its entries were checked against
    end_seq: int = 0  # a compacted segment's: where its timeline ends, and the digest there
    end_digest: bytes = b""
    base_count: int = 0  # txs in the stream's history up to base_seq (the first's index)
    end_count: int = 0  # a compacted segment's: txs in the stream's history up to end_seq

    @property
    def compacted(self) -> bool:
        return self.end_seq > 0

    def __reduce__(self) -> tuple[type[SegmentHeader], tuple[Any, ...]]:
        """Pickled as its fields (segments go to the compaction process and back): compiled,
        a frozen class cannot be unpickled by setting its attributes one by one."""
        return SegmentHeader, astuple(self)


def frame(kind: int, body: bytes) -> bytes:
    return b"".join(frame_parts(kind, body))


def frame_parts(kind: int, body: bytes) -> tuple[bytes, bytes]:
    """A frame as its head and its body, for a gathered write (no copy of the body)."""
    crc = zlib.crc32(body, zlib.crc32(bytes((kind,))))
    return FRAME.pack(len(body) + 1, crc, kind), body


def header_frame(header: SegmentHeader) -> bytes:
    fields: list[Any] = [FORMAT, header.stream, header.base_seq, header.base_digest]
    extra: dict[str, Any] = {"schema": header.schema} if header.schema else {}
    if header.base_count:
        extra["count"] = header.base_count
    if header.compacted:
        extra["end"] = [header.end_seq, header.end_digest, header.end_count]
    if extra:
        fields.append(extra)
    return frame(HEADER, msgpack.packb(fields))


def txs_frame(records: list[Record]) -> tuple[bytes, bytes]:
    """A batch frame of ``records``, as its head and its body (``frame_parts``)."""
    return frame_parts(TXS, _encode(records))


def record_bytes(tx: Tx) -> int:
    """About what ``tx`` takes in a batch frame (to size batches before encoding them)."""
    _, _, _, _, producer_id, _, payload, key, headers = tx
    size = RECORD_OVERHEAD + len(payload) + len(producer_id)
    if key is None and not headers:
        return size
    return size + len(key or b"") + sum(len(name) + len(value) + 8 for name, value in headers)


def records_end_at(txs: Sequence[Tx]) -> list[int]:
    """About where each of ``txs`` ends in a batch frame of them all (``record_bytes``,
    summed): passes at C speed for a plain batch (payloads only)."""
    if not plain(txs):
        return list(accumulate(map(record_bytes, txs)))
    sizes = map(add, map(len, map(payload_of, txs)), map(len, map(producer_id_of, txs)))
    return list(accumulate(map(add, sizes, repeat(RECORD_OVERHEAD))))


def kept_frame(records: list[Kept]) -> bytes:
    return frame(KEPT, _encode(records))


def decode_kept(body: bytes) -> list[Kept]:
    """A compacted segment's records, each folding from its own prev digest to its digest
    (checked here: a record that does not is corrupt)."""
    try:
        rows = _KEPT.decode(body)
        txs = checked_txs([row for row, _, _, _ in rows])
    except (msgspec.DecodeError, ValueError) as exc:
        raise CorruptRecord(f"bad kept batch: {exc}") from None
    if not rows:
        raise CorruptRecord("an empty kept batch")
    found: list[Kept] = []
    for tx, (_, prev, digest, index) in zip(txs, rows, strict=True):
        if len(prev) != DIGEST_BYTES or fold_tx(prev, tx) != digest:
            raise CorruptRecord(f"bad kept batch: the record at seq {tx.seq} does not fold")
        if index < (found[-1][3] + 1 if found else 0):
            raise CorruptRecord(f"bad kept batch: the record at seq {tx.seq} has index {index}")
        found.append((tx, prev, digest, index))
    return found


def mark_frame(seq: int) -> bytes:
    return frame(MARK, MARK_BODY.pack(seq))


def cut_frame(seq: int) -> bytes:
    return frame(CUT, MARK_BODY.pack(seq))


def read_frame(data: bytes | mmap.mmap, offset: int) -> tuple[int, bytes, int] | None:
    """(kind, body, next offset) of the frame at ``offset``; None at a clean end of data.
    A frame cut short (a torn write) or failing its checksum raises ``CorruptRecord``."""
    end = len(data)
    if offset == end:
        return None
    if offset + FRAME.size > end:
        raise CorruptRecord(f"a frame header cut short at offset {offset}")
    length, crc, kind = FRAME.unpack_from(data, offset)
    if not 1 <= length <= FRAME_BYTES_MAX:
        raise CorruptRecord(f"a frame of impossible length {length} at offset {offset}")
    start = offset + FRAME.size
    stop = start + length - 1
    if stop > end:
        raise CorruptRecord(f"a frame cut short at offset {offset} (torn write)")
    body = bytes(data[start:stop])
    if zlib.crc32(body, zlib.crc32(bytes((kind,)))) != crc:
        raise CorruptRecord(f"a frame fails its checksum at offset {offset}")
    return kind, body, stop


def decode_header(body: bytes) -> SegmentHeader:
    f = _unpack(body)
    if len(f) not in (4, 5) or f[0] != FORMAT:
        raise CorruptRecord(f"not a segment header of format {FORMAT}")
    try:
        digest = as_bytes(f[3])
        if len(digest) != DIGEST_BYTES:
            raise ValueError("a digest has 32 bytes")
        extra = f[4] if len(f) == 5 else {}
        known = isinstance(extra, dict) and not set(extra) - {"schema", "end", "count"}
        if not known or (len(f) == 5 and not extra):  # a header without any has no map
            raise ValueError("its last field is a map of a count, a schema and an end")
        schema = as_bytes(extra.get("schema", b""))
        if len(schema) != DIGEST_BYTES and "schema" in extra:
            raise ValueError("a schema fingerprint has 32 bytes")
        base_count = as_int(extra.get("count", 0))
        if "count" in extra and not base_count:
            raise ValueError("a count is a positive integer (absent when 0)")
        end_seq, end_digest, end_count = 0, b"", 0
        if "end" in extra:
            end = extra["end"]
            if not isinstance(end, list) or len(end) != 3:
                raise ValueError("an end is [seq, digest, count]")
            end_seq, end_digest, end_count = as_int(end[0]), as_bytes(end[1]), as_int(end[2])
            if end_seq <= as_int(f[2]) or len(end_digest) != DIGEST_BYTES:
                raise ValueError("an end is a seq above the base and its 32-byte digest")
            if end_count <= base_count:
                raise ValueError("an end's count is above the base's")
        return SegmentHeader(
            as_str(f[1]),
            as_int(f[2]),
            digest,
            schema,
            end_seq,
            end_digest,
            base_count,
            end_count,
        )
    except ValueError as exc:
        raise CorruptRecord(f"bad segment header: {exc}") from None


def decode_txs(body: bytes) -> list[Record]:
    try:
        rows = _BATCH.decode(body)
        txs = checked_txs([row for row, _ in rows])
    except (msgspec.DecodeError, ValueError) as exc:
        raise CorruptRecord(f"bad tx batch: {exc}") from None
    if not rows:
        raise CorruptRecord("an empty tx batch")
    found = [(tx, digest) for tx, (_, digest) in zip(txs, rows, strict=True)]
    for tx, digest in found:
        if len(digest) != DIGEST_BYTES:
            raise CorruptRecord(f"bad tx batch: a digest of {len(digest)} bytes at seq {tx.seq}")
    return found


def decode_seq(body: bytes) -> int:
    """The seq of a mark or a cut."""
    if len(body) != MARK_BODY.size:
        raise CorruptRecord("a mark or a cut has 8 bytes")
    seq: int = MARK_BODY.unpack(body)[0]
    return seq


def _unpack(body: bytes) -> list[Any]:
    try:
        f = msgpack.unpackb(body, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CorruptRecord(f"not msgpack: {exc}") from None
    if type(f) is not list:
        raise CorruptRecord(f"a record body is a list, not {type(f).__name__}")
    return f
