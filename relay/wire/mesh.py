"""Mesh frames: one ZeroMQ message, a topic (channel and stream, for ZeroMQ's prefix
filtering), a NUL (which no topic holds: no stream name or node pattern does), then a
msgpack body ``[version, kind, ...fields]``. One part, not two: pyzmq sends and receives a
message of several parts in Python, a part at a time (8.2 us to send a topic and an ack's body
against 2.4 us for one part of both, 2.8 us to receive them against 0.4 us).

A run of consecutive messages about one stream (a coordinator's ``Replicate`` and its ack, say)
travels as one *bundle* frame, ``[version, BUNDLE, [body, body, ...]]``, under the first one's
topic: every node that subscribes to one channel of a stream subscribes to all of them, so the
bundle reaches exactly the nodes its messages would have, in the same order, for one send and
one receive instead of several (``frames``, ``decode_frame``).

Decoding checks every field's type, so a malformed frame from the network raises
``MalformedFrame`` here and never reaches the core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

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
from relay.core.routing import STREAM_NAME_BYTES_MAX
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

VERSION = 12  # every body's first field: a frame of another version is malformed, dropped
FRAME_BYTES_MAX = 64 << 20
# the longest topic: the longest channel, "|", the longest stream name
TOPIC_BYTES_MAX = max(len(c.value) for c in Channel) + 1 + STREAM_NAME_BYTES_MAX
_SEP = b"\0"  # ends the topic
Buffer = bytes | bytearray | memoryview  # a frame, or a body inside one (read without a copy)
BUNDLE_MAX = 32  # messages in one bundle frame
BUNDLE_BYTES_MAX = 1 << 20  # a bundle takes messages while its bodies stay below this

_REPLICATE, _ACK, _HEARTBEAT, _REPAIR_REQUEST, _REPAIR_DATA, _SYNC_REQUEST, _SYNC_DATA = range(1, 8)
_BUNDLE = 8


_ENCODER = msgspec.msgpack.Encoder()
_encode_into = _ENCODER.encode_into
_ENVELOPE = msgspec.msgpack.Decoder(list[msgspec.Raw])  # the fields, each still encoded
_ANY = msgspec.msgpack.Decoder()
_TXS = msgspec.msgpack.Decoder(tuple[TxRow, ...])  # tx rows straight into checked types
_U = Annotated[int, msgspec.Meta(ge=0)]
# an ack, the most frequent frame, read by one typed decode (the types checked in C)
_ACK_ROW = msgspec.msgpack.Decoder(
    tuple[
        int, int, str, _U, _U, _U, _U, _U, bytes, _U,
        list[tuple[_U, _U, _U, bool, bool, bool, bool, _U]], _U, _U, bytes, _U, _U, bool,
    ]
)  # fmt: skip
_BUNDLE_ROW = msgspec.msgpack.Decoder(tuple[int, int, list[msgspec.Raw]])
_ACK_HEAD = bytes([0xDC, 0, 17, VERSION, _ACK])  # an array of 17: the version, then the kind
_BUNDLE_HEAD = bytes([0x93, VERSION, _BUNDLE])
FIELDS_MAX = 17  # the most fields a mesh frame has (an ack)
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


def framed(message: MeshMessage) -> tuple[bytearray, int]:
    """The frame of one message (its topic, a NUL, its body encoded in place) and where its
    body starts."""
    topic_, fields = _fields(message)
    frame = bytearray(topic_)
    frame += _SEP
    _encode_into(fields, frame, -1)
    return frame, len(topic_) + 1


def _fields(message: MeshMessage) -> tuple[bytes, list[Any]]:
    """(topic, the body's fields) for one message."""
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
        return topic(Channel.TX, m.stream), body
    if isinstance(m, StreamAck):
        reports = [
            [r.origin, r.epoch, r.contig, r.settled, r.answer, r.restored, r.waiting, r.held]
            for r in m.reports
        ]
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
            m.retreats,
            m.synced,
        ]
        return topic(Channel.ACK, m.stream), body
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
        return topic(Channel.HEARTBEAT), body
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
        return topic(Channel.REPAIR, m.stream), body
    if isinstance(m, SyncRequest):
        body = [VERSION, _SYNC_REQUEST, m.stream, m.requester, m.after_seq]
        return topic(Channel.REPAIR, m.stream), body
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
            m.base_count,
        ]
        return topic(Channel.REPAIR, m.stream), body
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
    return topic(Channel.REPAIR, m.stream), body


def frames(messages: Sequence[MeshMessage]) -> list[bytearray]:
    """Frames carrying ``messages`` in order, each run of consecutive messages about one
    stream bundled into one frame. Each body is encoded once, into its own frame, and a
    bundle takes its messages' bodies from those frames as they are. A frame handed to a
    socket is never changed: libzmq may still be reading it."""
    found: list[bytearray] = []
    run: list[tuple[bytearray, int]] = []  # frames of one message, and where each body starts
    run_stream, run_bytes = "", 0
    for message in messages:
        frame, start = framed(message)
        size = len(frame) - start
        stream = "" if isinstance(message, Heartbeat) else message.stream
        if (
            run
            and stream
            and stream == run_stream
            and len(run) < BUNDLE_MAX
            and run_bytes + size <= BUNDLE_BYTES_MAX
        ):
            run.append((frame, start))
            run_bytes += size
            continue
        if run:
            found.append(_bundled(run))
        run, run_stream, run_bytes = [(frame, start)], stream, size
    if run:
        found.append(_bundled(run))
    return found


def _bundled(run: list[tuple[bytearray, int]]) -> bytearray:
    """A run of one message: its frame as it is; of several: a bundle under the first one's
    topic."""
    first, start = run[0]
    if len(run) == 1:
        return first
    bundle = first[:start]
    bodies = [msgspec.Raw(memoryview(frame)[at:]) for frame, at in run]
    _encode_into([VERSION, _BUNDLE, bodies], bundle, -1)
    return bundle


def decode_frame(data: bytes | bytearray) -> list[MeshMessage]:
    """The messages in a frame (one, or a bundle's); ``MalformedFrame`` if any is not a
    message (then none of them counts). The topic is not read: a peer's frame says what it
    is about in its body, which the core checks against what this node replicates."""
    end = data.find(_SEP, 0, TOPIC_BYTES_MAX + 1)
    if end < 0:
        raise MalformedFrame(f"no topic of at most {TOPIC_BYTES_MAX} bytes ends the frame's start")
    return decode_body(memoryview(data)[end + 1 :])


def decode_body(body: Buffer) -> list[MeshMessage]:
    """The messages in a frame's body (one, or a bundle's), as ``decode_frame``."""
    if body[:3] != _BUNDLE_HEAD:
        return [decode(body)]
    if len(body) > FRAME_BYTES_MAX:
        raise MalformedFrame(f"frame of {len(body)} bytes exceeds {FRAME_BYTES_MAX}")
    count = array_len(body[3:8])
    if not 2 <= count <= BUNDLE_MAX:
        raise MalformedFrame(f"a bundle holds 2 to {BUNDLE_MAX} messages, not {count}")
    try:
        _, _, bodies = _BUNDLE_ROW.decode(body)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"not a bundle: {exc}") from None
    return [decode(memoryview(inner)) for inner in bodies]  # a bundle inside: unknown kind


def decode(body: Buffer) -> MeshMessage:
    """The message in a body; ``MalformedFrame`` if it is not one."""
    if len(body) > FRAME_BYTES_MAX:
        raise MalformedFrame(f"frame of {len(body)} bytes exceeds {FRAME_BYTES_MAX}")
    if body[:5] == _ACK_HEAD:
        return _ack(body)
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
        if kind == _ACK:  # a well-formed one took the typed path above
            raise ValueError(f"an ack of version {VERSION} has 17 fields, not {len(f)}")
        if kind == _REPLICATE:
            _, _, stream, origin, epoch, floor, rows = _shape(f, 7)
            return Replicate(
                as_str(stream), as_int(origin), as_int(epoch), as_int(floor), _txs(rows)
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
                tuple((as_int(n), as_int(b), as_int(d)) for n, b, d in as_rows(shared, 3)),
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
            shaped = _shape(f, 11)
            _, _, stream, sender, requester, base, base_digest, rows, digests, dedup, count = shaped
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
                as_int(count),
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


def _ack(body: Buffer) -> StreamAck:
    try:
        row = _ACK_ROW.decode(body)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise MalformedFrame(f"bad field in mesh frame of kind {_ACK}: {exc}") from None
    return StreamAck(
        *row[2:10],
        tuple(OriginReport(*report) for report in row[10]),
        marked_seq=row[11],
        readable_seq=row[12],
        marked_digest=row[13],
        promise=row[14],
        retreats=row[15],
        synced=row[16],
    )


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
