"""The client protocol's replies: how a node encodes them and how a client reads them.

How this works: every reply is msgpack ``[version, kind, req_id, ...]`` (see
``relay.wire.client``). The node encodes each kind with one function here; a client decodes any
reply with ``decode_reply`` into a typed record. Every field is type-checked, and a reply that
does not have its kind's shape raises ``ProtocolError`` naming the kind and the field, so a
broken or hostile node never surfaces as an ``IndexError`` inside a client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise, repeat
from operator import itemgetter
from typing import Any, Literal, NamedTuple, TypeVar

import msgpack
import msgspec

from relay.auth.settings import is_public_key
from relay.core.digest import DIGEST_BYTES, Headers
from relay.core.events import Acked, PublishResults, ReadResult, Rejected, SpanResult
from relay.core.status import NodeStatus, StatusFormatError
from relay.errors import ProtocolError
from relay.queue.service import ClaimAnswer, SettleAnswer
from relay.wire.client import VERSION, pack
from relay.wire.fields import (
    U64,
    HeaderRows,
    NodeId,
    as_bytes,
    as_headers,
    as_int,
    as_key,
    as_list,
    as_node_id,
    as_str,
)

Address = tuple[int, str, int, str]  # (node id, host, client port, public key or "")
T = TypeVar("T")


class AckRow(NamedTuple):  # one per published message: cheap to make
    seq: int
    digest: bytes


class ErrorRow(NamedTuple):
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class AcksReply:
    req_id: int
    rows: tuple[AckRow | ErrorRow, ...]  # one per published message, in order


class TxRow(NamedTuple):
    seq: int
    origin: int
    producer_id: str
    msg_id: int
    payload: bytes
    key: bytes | None
    headers: Headers
    digest: bytes


@dataclass(frozen=True, slots=True)
class TxsReply:
    req_id: int
    stream: str
    prev_digest: bytes  # the digest just before the first row
    verified_seq: int
    earliest_seq: int
    lost: bool
    rows: tuple[TxRow, ...]
    prevs: tuple[bytes, ...] = ()  # a ``kept`` reply's: the digest before each row
    through_seq: int = 0  # and the rows are all its compacted range holds up to this seq
    first_index: int = 0  # the dense index of the first row (the rest follow one by one)
    indexes: tuple[int, ...] = ()  # a ``kept`` reply's: each row's own index


@dataclass(frozen=True, slots=True)
class SpanReply:
    req_id: int
    stream: str
    verified_seq: int
    earliest_seq: int
    lost: bool
    bounds: tuple[tuple[int, bytes, int], ...]  # per part: (last seq, digest there, tx count)


@dataclass(frozen=True, slots=True)
class StatusReply:
    req_id: int
    status: NodeStatus


@dataclass(frozen=True, slots=True)
class RedirectReply:
    req_id: int
    stream: str
    nodes: tuple[Address, ...]


@dataclass(frozen=True, slots=True)
class ErrorReply:
    req_id: int
    code: str
    message: str
    try_nodes: tuple[Address, ...]


class JobRow(NamedTuple):
    seq: int
    priority: int
    not_before: int  # unix ms; 0: ready at once
    key: bytes | None
    delivery: int  # 1 for the first delivery
    lease_ms: int
    payload: bytes
    headers: Headers


@dataclass(frozen=True, slots=True)
class JobsReply:
    req_id: int
    rows: tuple[JobRow, ...]
    next_ready_ms: int  # with no row: when the next delayed job is ready (0: none known)


@dataclass(frozen=True, slots=True)
class SettledReply:
    req_id: int
    results: tuple[str, ...]  # per item: settled, or stale (the member no longer holds it)


@dataclass(frozen=True, slots=True)
class QueueInfoReply:
    req_id: int
    info: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StreamInfoReply:
    req_id: int
    info: dict[str, Any]  # the stream's settings in force, by their cluster file keys


Reply = (
    AcksReply
    | TxsReply
    | SpanReply
    | StatusReply
    | RedirectReply
    | ErrorReply
    | JobsReply
    | SettledReply
    | QueueInfoReply
    | StreamInfoReply
)


# --- the node's side ---------------------------------------------------------------------


def encode_acks(req_id: int, results: PublishResults) -> bytes:
    found = results.results
    if found and list(map(type, found)).count(Acked) == len(found):  # the usual: all acked
        seqs, digests = zip(*found, strict=True)
        return pack("acks", req_id, list(zip(repeat(0), seqs, digests)))
    rows = [[0, r.seq, r.digest] if isinstance(r, Acked) else [1, r.code, r.message] for r in found]
    return pack("acks", req_id, rows)


def encode_txs(req_id: int, result: ReadResult) -> bytes:
    """A read's answer: ``txs`` (rows chaining from ``prev_digest``), or ``kept`` for rows read
    from a compacted segment, each with the digest before it."""
    rows = [
        [tx.seq, tx.origin, tx.producer_id, tx.msg_id, tx.payload, tx.key, tx.headers, digest]
        for tx, digest in zip(result.txs, result.digests, strict=True)
    ]
    r = result
    if r.through_seq:
        prevs, indexes = list(r.prevs), list(r.indexes)
        return pack(
            "kept",
            req_id,
            r.stream,
            r.verified_seq,
            r.earliest_seq,
            rows,
            prevs,
            r.through_seq,
            indexes,
        )
    return pack(
        "txs",
        req_id,
        r.stream,
        r.prev_digest,
        r.verified_seq,
        r.earliest_seq,
        r.lost,
        rows,
        r.first_index,
    )


def encode_span(req_id: int, result: SpanResult) -> bytes:
    bounds = [list(bound) for bound in result.bounds]
    return pack(
        "span",
        req_id,
        result.stream,
        result.verified_seq,
        result.earliest_seq,
        result.lost,
        bounds,
    )


def encode_status(req_id: int, status: NodeStatus) -> bytes:
    return pack("status", req_id, status.to_wire())


def encode_jobs(req_id: int, answer: ClaimAnswer) -> bytes:
    rows = [
        [
            j.leased.job.seq,
            j.leased.job.priority,
            j.leased.job.not_before,
            j.tx.key,
            j.leased.delivery,
            j.leased.lease_ms,
            j.tx.payload,
            j.tx.headers,
        ]
        for j in answer.jobs
    ]
    return pack("jobs", req_id, rows, answer.next_ready_ms)


def encode_settled(req_id: int, answer: SettleAnswer) -> bytes:
    return pack("settled", req_id, list(answer.results))


def encode_queue_info(req_id: int, info: dict[str, Any]) -> bytes:
    return pack("qinfo", req_id, info)


def encode_stream_info(req_id: int, info: dict[str, Any]) -> bytes:
    return pack("sinfo", req_id, info)


def encode_redirect(req_id: int, stream: str, nodes: list[Address]) -> bytes:
    return pack("redirect", req_id, stream, [list(n) for n in nodes])


def encode_error(req_id: int, rejected: Rejected, nodes: list[Address]) -> bytes:
    return pack("error", req_id, rejected.code, rejected.message, [list(n) for n in nodes])


# --- the client's side -------------------------------------------------------------------


def decode_reply(body: bytes) -> Reply:
    """The reply in ``body``; ``ProtocolError`` naming the field if it is not one."""
    if body[:6] == _TXS_PREFIX:  # the bulk of a reader's bytes: decoded in C when well formed
        fast = _txs_reply(body)
        if fast is not None:
            return fast
    if body[:7] == _ACKS_PREFIX:  # a producer's: one row per message
        acks = _acks_reply(body)
        if acks is not None:
            return acks
    try:
        f = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ProtocolError(f"a reply that is not msgpack ({exc})") from None
    if not isinstance(f, list) or len(f) < 3 or f[0] != VERSION:
        raise ProtocolError(
            f"a reply that is not [{VERSION}, kind, req_id, ...] (client protocol v{VERSION})"
        )
    kind, fields = f[1], f[2:]
    shape = SHAPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        raise ProtocolError(f"a reply of unknown kind {kind!r:.40}")
    build, readers = shape
    if len(fields) != len(readers) + 1:
        raise ProtocolError(f"{kind} reply: {len(fields)} fields, expected {len(readers) + 1}")
    where = "req_id"
    try:
        values = [as_int(fields[0])]
        for (field, read), value in zip(readers, fields[1:], strict=True):
            where = field
            values.append(read(value))
    except (ValueError, StatusFormatError) as exc:
        raise ProtocolError(f"{kind} reply: {where}: {exc}") from None
    reply: Reply = build(*values)
    return reply


_TXS_PREFIX = b"\x9a" + bytes((VERSION,)) + b"\xa3txs"  # [v, "txs", 8 fields more]
_TXS_REPLY = msgspec.msgpack.Decoder(
    tuple[
        int,
        str,
        U64,
        str,
        bytes,
        U64,
        U64,
        bool,
        tuple[tuple[U64, NodeId, str, U64, bytes, bytes | None, HeaderRows, bytes], ...],
        U64,
    ]
)  # fmt: skip  (the ranges are checked while decoding)


_ACKS_PREFIX = b"\x94" + bytes((VERSION,)) + b"\xa4acks"  # [v, "acks", req_id, rows]
_ACKS_REPLY = msgspec.msgpack.Decoder(tuple[int, str, U64, list[tuple[Literal[0], U64, bytes]]])
_SECOND, _THIRD = itemgetter(1), itemgetter(2)
_new_row = tuple.__new__  # a named tuple straight from its fields


def _acks_reply(body: bytes) -> AcksReply | None:
    """An ``acks`` reply whose every row is an ack, read by a typed decoder; None otherwise
    (a reply with an error row, or not well formed: the field readers read it again)."""
    try:
        _, _, req_id, rows = _ACKS_REPLY.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    acks = zip(map(_SECOND, rows), map(_THIRD, rows), strict=True)  # of [0, seq, digest]
    return AcksReply(req_id, tuple(map(_new_row, repeat(AckRow), acks)))


def _txs_reply(body: bytes) -> TxsReply | None:
    """A ``txs`` reply read by a typed decoder, its values checked; None if it is not well
    formed (the field readers then read it again and say what is wrong)."""
    try:
        _, _, req_id, stream, prev, verified, earliest, lost, rows, first = _TXS_REPLY.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    txs = tuple(map(_new_row, repeat(TxRow), rows))
    return TxsReply(req_id, stream, prev, verified, earliest, lost, txs, first_index=first)


def rows_of(read: Callable[[list[Any]], T], width: int) -> Callable[[Any], tuple[T, ...]]:
    """A reader of a list of ``width``-field rows, naming the row that is wrong."""

    def each(rows: Any) -> tuple[T, ...]:
        found = []
        for i, row in enumerate(as_list(rows)):
            if type(row) is not list or len(row) != width:
                raise ValueError(f"[{i}] is not a list of {width} fields")
            try:
                found.append(read(row))
            except ValueError as exc:
                raise ValueError(f"[{i}]: {exc}") from None
        return tuple(found)

    return each


def _address(row: list[Any]) -> Address:
    key = as_str(row[3])
    if key and not is_public_key(key):
        raise ProtocolError(f"a node address carries {key!r:.60}, not a public key")
    return as_int(row[0]), as_str(row[1]), as_int(row[2]), key


def _ack_row(row: list[Any]) -> AckRow | ErrorRow:
    if row[0] == 0:
        return AckRow(as_int(row[1]), as_bytes(row[2]))
    if row[0] == 1:
        return ErrorRow(as_str(row[1]), as_str(row[2]))
    raise ValueError(f"outcome must be 0 (acked) or 1 (error), got {row[0]!r:.20}")


def _tx_row(row: list[Any]) -> TxRow:
    seq, origin, pid, mid, payload, key, headers, digest = row
    return TxRow(
        as_int(seq),
        as_node_id(origin),
        as_str(pid),
        as_int(mid),
        as_bytes(payload),
        as_key(key),
        () if headers == [] else as_headers(headers),
        as_bytes(digest),
    )


def _job_row(row: list[Any]) -> JobRow:
    seq, priority, not_before, key, delivery, lease, payload, headers = row
    return JobRow(
        as_int(seq),
        as_int(priority),
        as_int(not_before),
        as_key(key),
        as_int(delivery),
        as_int(lease),
        as_bytes(payload),
        () if headers == [] else as_headers(headers),
    )


def _results(v: Any) -> tuple[str, ...]:
    return tuple(as_str(r) for r in as_list(v))


def _txs(
    req_id: int,
    stream: str,
    prev_digest: bytes,
    verified_seq: int,
    earliest_seq: int,
    lost: bool,
    rows: tuple[TxRow, ...],
    first_index: int,
) -> TxsReply:
    """A plain ``txs`` reply read field by field (``_txs_reply`` could not): the first row's
    index is the reply's last field, which ``TxsReply`` keeps after a kept reply's fields."""
    return TxsReply(
        req_id, stream, prev_digest, verified_seq, earliest_seq, lost, rows, first_index=first_index
    )


def _kept(
    req_id: int,
    stream: str,
    verified_seq: int,
    earliest_seq: int,
    rows: tuple[TxRow, ...],
    prevs: tuple[bytes, ...],
    through_seq: int,
    indexes: tuple[int, ...],
) -> TxsReply:
    if len(prevs) != len(rows) or len(indexes) != len(rows):
        raise ProtocolError("kept reply: one prev digest and one index per row")
    if any(a >= b for a, b in pairwise(indexes)):
        raise ProtocolError("kept reply: indexes in ascending order")
    if not through_seq or any(row.seq > through_seq for row in rows):
        raise ProtocolError("kept reply: through_seq is at or past every row's seq")
    if through_seq > verified_seq:
        raise ProtocolError("kept reply: through_seq is past the verified seq")
    if any(a.seq >= b.seq for a, b in pairwise(rows)):
        raise ProtocolError("kept reply: rows in ascending seq order")
    first = prevs[0] if prevs else b""
    return TxsReply(
        req_id,
        stream,
        first,
        verified_seq,
        earliest_seq,
        False,
        rows,
        prevs,
        through_seq,
        indexes[0] if indexes else 0,
        indexes,
    )


def _indexes(v: Any) -> tuple[int, ...]:
    return tuple(as_int(i) for i in as_list(v))


def _digests(v: Any) -> tuple[bytes, ...]:
    found = tuple(as_bytes(d) for d in as_list(v))
    if any(len(d) != DIGEST_BYTES for d in found):
        raise ValueError("a digest has 32 bytes")
    return found


def _info(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
        raise ValueError("expected a map with string keys")
    return v


def _bound(row: list[Any]) -> tuple[int, bytes, int]:
    return as_int(row[0]), as_bytes(row[1]), as_int(row[2])


def _flag(v: Any) -> bool:
    if type(v) is not bool:
        raise ValueError(f"expected true or false, got {v!r:.20}")
    return v


Reader = tuple[str, Callable[[Any], Any]]
SHAPES: dict[str, tuple[Callable[..., Reply], tuple[Reader, ...]]] = {
    "acks": (AcksReply, (("rows", rows_of(_ack_row, 3)),)),
    "txs": (
        _txs,
        (
            ("stream", as_str),
            ("prev_digest", as_bytes),
            ("verified_seq", as_int),
            ("earliest_seq", as_int),
            ("lost", _flag),
            ("rows", rows_of(_tx_row, 8)),
            ("first_index", as_int),
        ),
    ),
    "kept": (
        _kept,
        (
            ("stream", as_str),
            ("verified_seq", as_int),
            ("earliest_seq", as_int),
            ("rows", rows_of(_tx_row, 8)),
            ("prevs", _digests),
            ("through_seq", as_int),
            ("indexes", _indexes),
        ),
    ),
    "span": (
        SpanReply,
        (
            ("stream", as_str),
            ("verified_seq", as_int),
            ("earliest_seq", as_int),
            ("lost", _flag),
            ("bounds", rows_of(_bound, 3)),
        ),
    ),
    "status": (StatusReply, (("status", NodeStatus.from_wire),)),
    "jobs": (JobsReply, (("rows", rows_of(_job_row, 8)), ("next_ready_ms", as_int))),
    "settled": (SettledReply, (("results", _results),)),
    "qinfo": (QueueInfoReply, (("info", _info),)),
    "sinfo": (StreamInfoReply, (("info", _info),)),
    "redirect": (RedirectReply, (("stream", as_str), ("nodes", rows_of(_address, 4)))),
    "error": (
        ErrorReply,
        (("code", as_str), ("message", as_str), ("try_nodes", rows_of(_address, 4))),
    ),
}
