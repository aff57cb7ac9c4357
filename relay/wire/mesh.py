"""Mesh frames: a topic frame (channel and stream, for ZeroMQ's prefix filtering) and a
msgpack body ``[version, kind, ...fields]``.

Decoding checks every field's type, so a malformed frame from the network raises
``MalformedFrame`` here and never reaches the core.
"""

from __future__ import annotations

from typing import Any

import msgpack

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

VERSION = 1
FRAME_BYTES_MAX = 64 << 20

_REPLICATE, _ACK, _HEARTBEAT, _REPAIR_REQUEST, _REPAIR_DATA, _SYNC_REQUEST, _SYNC_DATA = range(1, 8)


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
        return topic(Channel.TX, m.stream), msgpack.packb(body)
    if isinstance(m, StreamAck):
        reports = [[r.origin, r.epoch, r.contig, r.settled] for r in m.reports]
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
        ]
        return topic(Channel.ACK, m.stream), msgpack.packb(body)
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
        ]
        return topic(Channel.HEARTBEAT), msgpack.packb(body)
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
        return topic(Channel.REPAIR, m.stream), msgpack.packb(body)
    if isinstance(m, SyncRequest):
        body = [VERSION, _SYNC_REQUEST, m.stream, m.requester, m.after_seq]
        return topic(Channel.REPAIR, m.stream), msgpack.packb(body)
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
        return topic(Channel.REPAIR, m.stream), msgpack.packb(body)
    body = [
        VERSION,
        _REPAIR_DATA,
        m.stream,
        m.sender,
        m.origin,
        m.origin_epoch,
        m.txs,
    ]
    return topic(Channel.REPAIR, m.stream), msgpack.packb(body)


def decode(body: bytes) -> MeshMessage:
    """The message in a body; ``MalformedFrame`` if it is not one."""
    if len(body) > FRAME_BYTES_MAX:
        raise MalformedFrame(f"frame of {len(body)} bytes exceeds {FRAME_BYTES_MAX}")
    try:
        f = msgpack.unpackb(body, use_list=True, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise MalformedFrame(f"not msgpack: {exc}") from None
    if not isinstance(f, list) or len(f) < 2 or f[0] != VERSION:
        raise MalformedFrame("not a relay mesh frame of version 1")
    kind = f[1]
    try:
        if kind == _REPLICATE:
            _, _, stream, origin, epoch, floor, rows = _shape(f, 7)
            return Replicate(_str(stream), _int(origin), _int(epoch), _int(floor), _txs(rows))
        if kind == _ACK:
            _, _, stream, sender, epoch, floor, last, head, digest, verified, reports = _shape(
                f, 11
            )
            return StreamAck(
                _str(stream),
                _int(sender),
                _int(epoch),
                _int(floor),
                _int(last),
                _int(head),
                _bytes(digest),
                _int(verified),
                tuple(
                    OriginReport(_int(o), _int(e), _int(c), bool(s))
                    for o, e, c, s in _list(reports)
                ),
            )
        if kind == _HEARTBEAT:
            _, _, sender, epoch, floor, lasts, accepts, leaving = _shape(f, 8)
            return Heartbeat(
                _int(sender),
                _int(epoch),
                _int(floor),
                tuple((_str(s), _int(q)) for s, q in _list(lasts)),
                tuple((_int(n), _int(e)) for n, e in _list(accepts)),
                bool(leaving),
            )
        if kind == _REPAIR_REQUEST:
            _, _, stream, requester, origin, epoch, after, upto = _shape(f, 8)
            return RepairRequest(
                _str(stream), _int(requester), _int(origin), _int(epoch), _int(after), _int(upto)
            )
        if kind == _SYNC_REQUEST:
            _, _, stream, requester, after = _shape(f, 5)
            return SyncRequest(_str(stream), _int(requester), _int(after))
        if kind == _SYNC_DATA:
            _, _, stream, sender, requester, base, base_digest, rows, digests, dedup = _shape(f, 10)
            txs = _txs(rows)
            found = tuple(_bytes(d) for d in _list(digests))
            if len(found) != len(txs):
                raise ValueError("a sync slice needs one digest per tx")
            keys = tuple((_str(p), _int(m), _int(s)) for p, m, s in _list(dedup))
            return SyncData(
                _str(stream),
                _int(sender),
                _int(requester),
                _int(base),
                _bytes(base_digest),
                txs,
                found,
                keys,
            )
        if kind == _REPAIR_DATA:
            _, _, stream, sender, origin, epoch, rows = _shape(f, 7)
            return RepairData(_str(stream), _int(sender), _int(origin), _int(epoch), _txs(rows))
    except (TypeError, ValueError) as exc:
        raise MalformedFrame(f"bad field in mesh frame of kind {kind}: {exc}") from None
    raise MalformedFrame(f"unknown mesh frame kind {kind!r}")


def _shape(f: list[Any], n: int) -> list[Any]:
    if len(f) != n:
        raise ValueError(f"expected {n} fields, got {len(f)}")
    return f


def _txs(rows: Any) -> tuple[Tx, ...]:
    out = []
    for row in _list(rows):
        if type(row) is not list or len(row) != 7:
            raise ValueError("a tx row has 7 fields")
        seq, prev, origin, epoch, pid, mid, payload = row
        if not (
            type(seq) is int
            and type(prev) is int
            and type(origin) is int
            and type(epoch) is int
            and type(mid) is int
            and type(pid) is str
            and type(payload) is bytes
            and seq > prev >= 0
            and 0 <= origin <= 1023
            and epoch >= 0
            and mid >= 0
        ):
            raise ValueError(f"bad tx row {row!r:.80}")
        out.append(Tx(seq, prev, origin, epoch, pid, mid, payload))
    return tuple(out)


def _int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r:.40}")
    return v


def _str(v: Any) -> str:
    if type(v) is not str:
        raise ValueError(f"expected a string, got {v!r:.40}")
    return v


def _bytes(v: Any) -> bytes:
    if type(v) is not bytes:
        raise ValueError(f"expected bytes, got {type(v).__name__}")
    return v


def _list(v: Any) -> list[Any]:
    if type(v) is not list:
        raise ValueError(f"expected a list, got {type(v).__name__}")
    return v
