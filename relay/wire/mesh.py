"""Mesh frames: a topic frame (channel and stream, for ZeroMQ's prefix filtering) and a
msgpack body ``[version, kind, ...fields]``.

Decoding checks every field's type, so a malformed frame from the network raises
``MalformedFrame`` here and never reaches the core.
"""

from __future__ import annotations

from typing import Any

import msgspec

from relay.core.messages import (
    Channel,
    Heartbeat,
    MeshMessage,
    OriginReport,
    RepairData,
    RepairRequest,
    Replicate,
    StreamAck,
    SyncData,
    SyncRequest,
    Tx,
)
from relay.wire.fields import (
    TxRow,
    array_len,
    as_bytes,
    as_int,
    as_list,
    as_rows,
    as_str,
    checked_txs,
)

VERSION = 5  # 2: txs carry a key and headers; 3: dedup keys carry a content tag; 4: a repair
# answer may say it is complete; 5: an ack carries a promise apart from the floor
FRAME_BYTES_MAX = 64 << 20

_REPLICATE, _ACK, _HEARTBEAT, _REPAIR_REQUEST, _REPAIR_DATA, _SYNC_REQUEST, _SYNC_DATA = range(1, 8)


_encode = msgspec.msgpack.Encoder().encode
_ENVELOPE = msgspec.msgpack.Decoder(list[msgspec.Raw])  # the fields, each still encoded
_ANY = msgspec.msgpack.Decoder()
_TXS = msgspec.msgpack.Decoder(tuple[TxRow, ...])  # tx rows straight into checked types
FIELDS_MAX = 15  # the most fields a mesh frame has (an ack)
_ROWS_AT = {_REPLICATE: 6, _REPAIR_DATA: 6, _SYNC_DATA: 7}  # which field holds tx rows


class MalformedFrame(ValueError):
    """A frame that is not a valid mesh message of this version."""


def topic(channel: Channel, stream: str = "") -> bytes:
    return f"{channel.value}|{stream}".encode()


def topic_prefixes(patterns: tuple[str, ...]) -> list[bytes]:
    """SUB prefixes that let through every frame a node with these stream patterns needs."""
    prefixes = [topic(Channel.HEARTBEAT)]
    for channel in (Channel.TX, Channel.ACK, Channel.REPAIR):
        for pattern in patterns:
            literal = pattern
            for i, ch in enumerate(pattern):
                if ch in "*?[":
                    literal = pattern[:i]
                    break
            prefixes.append(topic(channel, literal))
    return sorted(set(prefixes))


def encode(message: MeshMessage) -> tuple[bytes, bytes]:
    """(topic, body) for one message."""
    m = message
    if isinstance(m, Replicate):
        body = [
            VERSION,
            _REPLICATE,
            m.stream,
            m.origin,
            m.epoch,
            m.floor,
            m.txs,
        ]
        return topic(Channel.TX, m.stream), _encode(body)
    if isinstance(m, StreamAck):
        reports = [[r.origin, r.epoch, r.contig, r.settled, r.answer] for r in m.reports]
        body = [
            VERSION,
            _ACK,
            m.stream,
            m.sender,
            m.epoch,
            m.floor,
            m.origin_last,
            m.head_seq,
            m.head_digest,
            m.verified_seq,
            reports,
            m.marked_seq,
            m.readable_seq,
            m.marked_digest,
            m.promise,
        ]
        return topic(Channel.ACK, m.stream), _encode(body)
    if isinstance(m, Heartbeat):
        body = [
            VERSION,
            _HEARTBEAT,
            m.sender,
            m.epoch,
            m.floor,
            [list(x) for x in m.origin_last],
            [list(x) for x in m.accepts],
            m.leaving,
            [list(x) for x in m.epochs],
            [list(x) for x in m.shared],
        ]
        return topic(Channel.HEARTBEAT), _encode(body)
    if isinstance(m, RepairRequest):
        body = [
            VERSION,
            _REPAIR_REQUEST,
            m.stream,
            m.requester,
            m.origin,
            m.origin_epoch,
            m.after_seq,
            m.upto_seq,
        ]
        return topic(Channel.REPAIR, m.stream), _encode(body)
    if isinstance(m, SyncRequest):
        body = [VERSION, _SYNC_REQUEST, m.stream, m.requester, m.after_seq]
        return topic(Channel.REPAIR, m.stream), _encode(body)
    if isinstance(m, SyncData):
        body = [
            VERSION,
            _SYNC_DATA,
            m.stream,
            m.sender,
            m.requester,
            m.base_seq,
            m.base_digest,
            m.txs,
            m.digests,
            m.dedup,
        ]
        return topic(Channel.REPAIR, m.stream), _encode(body)
    body = [
        VERSION,
        _REPAIR_DATA,
        m.stream,
        m.sender,
        m.origin,
        m.origin_epoch,
        m.txs,
        m.after_seq,
        m.complete_upto,
    ]
    return topic(Channel.REPAIR, m.stream), _encode(body)


def decode(body: bytes) -> MeshMessage:
    """The message in a body; ``MalformedFrame`` if it is not one."""
    if len(body) > FRAME_BYTES_MAX:
        raise MalformedFrame(f"frame of {len(body)} bytes exceeds {FRAME_BYTES_MAX}")
    if array_len(body) > FIELDS_MAX:
        raise MalformedFrame(f"not a relay mesh frame: more than {FIELDS_MAX} fields")
    try:
        raw = _ENVELOPE.decode(body)
        head = [_ANY.decode(r) for r in raw[:2]]
        if len(head) < 2 or head[0] != VERSION:
            raise MalformedFrame(f"not a relay mesh frame of version {VERSION}")
        kind = head[1]
        rows_at = _ROWS_AT.get(kind) if type(kind) is int else None
        f: list[Any] = [r if i == rows_at else _ANY.decode(r) for i, r in enumerate(raw)]
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"not msgpack: {exc}") from None
    try:
        if kind == _REPLICATE:
            _, _, stream, origin, epoch, floor, rows = _shape(f, 7)
            return Replicate(
                as_str(stream), as_int(origin), as_int(epoch), as_int(floor), _txs(rows)
            )
        if kind == _ACK:
            _, _, stream, sender, epoch, floor, last, head, digest, verified, reports, *marks = (
                _shape(f, 15)
            )
            return StreamAck(
                as_str(stream),
                as_int(sender),
                as_int(epoch),
                as_int(floor),
                as_int(last),
                as_int(head),
                as_bytes(digest),
                as_int(verified),
                tuple(
                    OriginReport(as_int(o), as_int(e), as_int(c), bool(s), bool(a))
                    for o, e, c, s, a in as_rows(reports, 5)
                ),
                marked_seq=as_int(marks[0]),
                readable_seq=as_int(marks[1]),
                marked_digest=as_bytes(marks[2]),
                promise=as_int(marks[3]),
            )
        if kind == _HEARTBEAT:
            _, _, sender, epoch, floor, lasts, accepts, leaving, epochs, shared = _shape(f, 10)
            return Heartbeat(
                as_int(sender),
                as_int(epoch),
                as_int(floor),
                tuple((as_str(s), as_int(q)) for s, q in as_rows(lasts, 2)),
                tuple((as_int(n), as_int(e)) for n, e in as_rows(accepts, 2)),
                bool(leaving),
                tuple((as_int(n), as_int(e)) for n, e in as_rows(epochs, 2)),
                tuple((as_int(n), as_int(d)) for n, d in as_rows(shared, 2)),
            )
        if kind == _REPAIR_REQUEST:
            _, _, stream, requester, origin, epoch, after, upto = _shape(f, 8)
            return RepairRequest(
                as_str(stream),
                as_int(requester),
                as_int(origin),
                as_int(epoch),
                as_int(after),
                as_int(upto),
            )
        if kind == _SYNC_REQUEST:
            _, _, stream, requester, after = _shape(f, 5)
            return SyncRequest(as_str(stream), as_int(requester), as_int(after))
        if kind == _SYNC_DATA:
            _, _, stream, sender, requester, base, base_digest, rows, digests, dedup = _shape(f, 10)
            txs = _txs(rows)
            found = tuple(as_bytes(d) for d in as_list(digests))
            if len(found) != len(txs):
                raise ValueError("a sync slice needs one digest per tx")
            keys = tuple(
                (as_str(p), as_int(m), as_int(s), as_bytes(d), as_int(t))
                for p, m, s, d, t in as_rows(dedup, 5)
            )
            return SyncData(
                as_str(stream),
                as_int(sender),
                as_int(requester),
                as_int(base),
                as_bytes(base_digest),
                txs,
                found,
                keys,
            )
        if kind == _REPAIR_DATA:
            _, _, stream, sender, origin, epoch, rows, after, complete = _shape(f, 9)
            return RepairData(
                as_str(stream),
                as_int(sender),
                as_int(origin),
                as_int(epoch),
                _txs(rows),
                as_int(after),
                as_int(complete),
            )
    except (TypeError, ValueError) as exc:
        raise MalformedFrame(f"bad field in mesh frame of kind {kind}: {exc}") from None
    raise MalformedFrame(f"unknown mesh frame kind {kind!r}")


def _shape(f: list[Any], n: int) -> list[Any]:
    if len(f) != n:
        raise ValueError(f"expected {n} fields, got {len(f)}")
    return f


def _txs(rows: Any) -> tuple[Tx, ...]:
    """Tx rows still encoded (``msgspec.Raw``), decoded into typed, range-checked txs."""
    if type(rows) is not msgspec.Raw:
        raise ValueError("tx rows out of place")
    try:
        return checked_txs(_TXS.decode(rows))
    except msgspec.DecodeError as exc:
        raise ValueError(f"bad tx rows: {exc}") from None
