"""The client protocol on a node's client port (ZeroMQ ROUTER; clients use DEALER).

Every frame is msgpack ``[version, kind, req_id, ...]``. Requests: ``pub``, ``fetch``,
``span`` (plan a range read: where to cut it and the digests there), ``status``, ``sinfo`` (a
stream's settings in force), and a work
group member's ``claim``, ``settle``, ``qinfo`` (the group's counts, and with a count, its next
ready jobs) and ``qconf``. Replies: ``acks``, ``txs``, ``span``,
``status``, ``sinfo``, ``jobs``, ``settled``, ``qinfo``, ``redirect``, ``error``, and
``kept`` (a read of a compacted range: each row with the digest before it). A node answers
a malformed request with an ``error`` reply (code ``bad_request``) when it can read a req_id,
and with req_id 0 when it cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import msgspec

from relay.core.messages import Item
from relay.queue.ops import (
    CLAIM_COUNT_MAX,
    DELIVERIES_MAX,
    LEASE_MS_MAX,
    LEASE_MS_MIN,
    SETTLE_ITEMS_MAX,
    Settings,
    SettleItem,
    member_name,
    settle_item,
)
from relay.wire.fields import U64, HeaderRows, array_len, as_int, as_str
from relay.wire.mesh import MalformedFrame

VERSION = 4  # every frame's first field: either side refuses a frame of another version
REQUEST_BYTES_MAX = 64 << 20
PEEK_MAX = 100  # ready jobs a ``qinfo`` may list


@dataclass(frozen=True, slots=True)
class PublishFrame:
    req_id: int
    stream: str
    producer_id: str
    items: tuple[Item, ...]


@dataclass(frozen=True, slots=True)
class FetchFrame:
    req_id: int
    stream: str
    after_seq: int
    limit: int
    wait_ms: int
    from_index: int | None = None  # instead of after_seq: from the entry of this dense index
    # (negative: -N, the last N readable entries)


@dataclass(frozen=True, slots=True)
class SpanFrame:
    req_id: int
    stream: str
    after_seq: int
    upto_seq: int
    max_txs: int
    parts: int


@dataclass(frozen=True, slots=True)
class StatusFrame:
    req_id: int
    brief: bool = False  # the node's state and peers, no stream: what a readiness check needs


@dataclass(frozen=True, slots=True)
class StreamInfoFrame:
    req_id: int
    stream: str  # the settings in force for it (its [[stream]] block's, or the defaults)


@dataclass(frozen=True, slots=True)
class ClaimFrame:
    req_id: int
    stream: str
    group: str
    member: str
    count: int
    lease_ms: int
    wait_ms: int


@dataclass(frozen=True, slots=True)
class SettleFrame:
    req_id: int
    stream: str
    group: str
    member: str
    items: tuple[SettleItem, ...]


@dataclass(frozen=True, slots=True)
class QueueConfigFrame:
    req_id: int
    stream: str
    group: str
    settings: Settings
    start_latest: bool


@dataclass(frozen=True, slots=True)
class QueueInfoFrame:
    req_id: int
    stream: str
    group: str
    peek: int = 0  # how many of the next ready jobs to list, in claim order


Request = (
    PublishFrame
    | FetchFrame
    | SpanFrame
    | StatusFrame
    | StreamInfoFrame
    | ClaimFrame
    | SettleFrame
    | QueueInfoFrame
    | QueueConfigFrame
)


_encode = msgspec.msgpack.Encoder().encode
_ENVELOPE = msgspec.msgpack.Decoder(list[msgspec.Raw])  # the fields, each still encoded
_ANY = msgspec.msgpack.Decoder()
# A message as a typed decoder reads it: [msg id, payload, key, headers], exactly.
_ITEMS = msgspec.msgpack.Decoder(tuple[tuple[U64, bytes, bytes | None, HeaderRows], ...])
FIELDS_MAX = 9  # the most fields a request has (a claim)
_ITEMS_AT = 5  # the field of a ``pub`` request that holds its messages


class BadRequest(MalformedFrame):
    def __init__(self, req_id: int, message: str) -> None:
        super().__init__(message)
        self.req_id = req_id


def pack(*fields: Any) -> bytes:
    return _encode([VERSION, *fields])


def unpack(body: bytes) -> list[Any]:
    """The fields of a frame, each decoded, except a ``pub`` request's messages, left
    encoded (``msgspec.Raw``) for ``_items``."""
    if array_len(body) > FIELDS_MAX:
        raise BadRequest(0, f"frame is not a relay request: more than {FIELDS_MAX} fields")
    try:
        raw = _ENVELOPE.decode(body)
        f: list[Any] = [_ANY.decode(r) for r in raw[:3]]
        if len(f) == 3 and f[0] == VERSION:
            keep = _ITEMS_AT if f[1] == "pub" else -1
            f += [r if i == keep else _ANY.decode(r) for i, r in enumerate(raw[3:], 3)]
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise BadRequest(0, f"frame is not msgpack ({exc})") from None
    if len(f) < 3 or f[0] != VERSION:
        shape = f"[{VERSION}, kind, req_id, ...]"
        raise BadRequest(0, f"frame is not {shape} (relay client protocol v{VERSION})")
    return f


def decode_request(body: bytes) -> Request:
    if len(body) > REQUEST_BYTES_MAX:
        raise BadRequest(0, f"request of {len(body)} bytes exceeds {REQUEST_BYTES_MAX}")
    f = unpack(body)
    kind = f[1]
    req_id = f[2] if type(f[2]) is int and f[2] >= 0 else 0
    try:
        if kind == "pub" and len(f) == 6:
            return PublishFrame(req_id, as_str(f[3]), as_str(f[4]), _items(f[5]))
        if kind == "fetch" and len(f) in (7, 8):
            index = _signed(f[7]) if len(f) == 8 else None
            after, limit, wait = as_int(f[4]), as_int(f[5]), as_int(f[6])
            return FetchFrame(req_id, as_str(f[3]), after, limit, wait, index)
        if kind == "span" and len(f) == 8:
            after, upto, max_txs, parts = (as_int(v) for v in f[4:8])
            if parts < 1:
                raise ValueError("parts must be at least 1")
            return SpanFrame(req_id, as_str(f[3]), after, upto, max_txs, parts)
        if kind == "status" and len(f) in (3, 4):
            return StatusFrame(req_id, len(f) == 4 and bool(f[3]))
        if kind == "sinfo" and len(f) == 4:
            return StreamInfoFrame(req_id, as_str(f[3]))
        if kind == "claim" and len(f) == 9:
            count, lease, wait = (as_int(v) for v in f[6:9])
            if not 1 <= count <= CLAIM_COUNT_MAX or not LEASE_MS_MIN <= lease <= LEASE_MS_MAX:
                raise ValueError(
                    f"count is 1-{CLAIM_COUNT_MAX}, lease_ms {LEASE_MS_MIN}-{LEASE_MS_MAX}"
                )
            group, member = as_str(f[4]), member_name(f[5])
            return ClaimFrame(req_id, as_str(f[3]), group, member, count, lease, wait)
        if kind == "settle" and len(f) == 7:
            rows = f[6]
            if not isinstance(rows, list) or not 1 <= len(rows) <= SETTLE_ITEMS_MAX:
                raise ValueError(f"items: 1-{SETTLE_ITEMS_MAX} settlements")
            items = tuple(settle_item(row) for row in rows)
            return SettleFrame(req_id, as_str(f[3]), as_str(f[4]), member_name(f[5]), items)
        if kind == "qinfo" and len(f) in (5, 6):
            peek = as_int(f[5]) if len(f) == 6 else 0
            if not 0 <= peek <= PEEK_MAX:
                raise ValueError(f"peek is 0-{PEEK_MAX} jobs")
            return QueueInfoFrame(req_id, as_str(f[3]), as_str(f[4]), peek)
        if kind == "qconf" and len(f) == 6:
            settings, latest = queue_settings(f[5])
            return QueueConfigFrame(req_id, as_str(f[3]), as_str(f[4]), settings, latest)
    except (TypeError, ValueError) as exc:
        raise BadRequest(req_id, f"bad field in {kind!r} request: {exc}") from None
    raise BadRequest(req_id, f"unknown request kind {kind!r} with {len(f)} fields")


def queue_settings(raw: Any) -> tuple[Settings, bool]:
    """A work group's settings as a ``qconf`` request carries them (a map; keys left out keep
    their defaults), and whether a new group starts at the stream's end (``start``)."""
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise ValueError("settings: a map with string keys")
    unknown = set(raw) - {"lease_ms", "max_deliveries", "coalesce", "exclusive", "start"}
    if unknown:
        raise ValueError(f"settings: unknown key {sorted(unknown)[0]!r:.40}")
    base = Settings()
    lease, deliveries = raw.get("lease_ms", base.lease_ms), raw.get("max_deliveries", 5)
    if type(lease) is not int or not LEASE_MS_MIN <= lease <= LEASE_MS_MAX:
        raise ValueError(f"lease_ms: {LEASE_MS_MIN}-{LEASE_MS_MAX}")
    if type(deliveries) is not int or not 1 <= deliveries <= DELIVERIES_MAX:
        raise ValueError(f"max_deliveries: 1-{DELIVERIES_MAX}")
    flags = (raw.get("coalesce", False), raw.get("exclusive", False))
    if not all(isinstance(flag, bool) for flag in flags):
        raise ValueError("coalesce and exclusive: true or false")
    start = raw.get("start", "earliest")
    if start not in ("earliest", "latest"):
        raise ValueError("start: earliest or latest")
    return Settings(lease, deliveries, flags[0], flags[1]), start == "latest"


def _items(raw: Any) -> tuple[Item, ...]:
    """A ``pub`` request's messages, decoded straight into typed rows and checked."""
    try:
        return tuple(map(tuple.__new__, repeat(Item), _ITEMS.decode(raw)))
    except msgspec.DecodeError as exc:
        raise ValueError(
            f"a message is [msg id (u64), payload, key, headers (non-empty names)]: {exc}"
        ) from None


# --- requests, as clients build them -----------------------------------------------------


def publish_request(
    req_id: int, stream: str, producer_id: str, items: Sequence[Sequence[Any]]
) -> bytes:
    return pack("pub", req_id, stream, producer_id, items)


def fetch_request(
    req_id: int,
    stream: str,
    after_seq: int,
    limit: int,
    wait_ms: int,
    from_index: int | None = None,
) -> bytes:
    """A fetch after ``after_seq``, or (``from_index`` not None) from the entry of that dense
    index (negative: -N, the last N)."""
    if from_index is None:
        return pack("fetch", req_id, stream, after_seq, limit, wait_ms)
    return pack("fetch", req_id, stream, 0, limit, wait_ms, from_index)


def _signed(v: Any) -> int:
    if type(v) is not int or not -(1 << 62) <= v < 1 << 62:
        raise ValueError(f"from_index: expected an integer, got {v!r:.40}")
    return v


def span_request(
    req_id: int, stream: str, after_seq: int, upto_seq: int, max_txs: int, parts: int
) -> bytes:
    return pack("span", req_id, stream, after_seq, upto_seq, max_txs, parts)


def status_request(req_id: int, brief: bool = False) -> bytes:
    return pack("status", req_id, True) if brief else pack("status", req_id)


def stream_info_request(req_id: int, stream: str) -> bytes:
    return pack("sinfo", req_id, stream)


def claim_request(
    req_id: int, stream: str, group: str, member: str, count: int, lease_ms: int, wait_ms: int
) -> bytes:
    return pack("claim", req_id, stream, group, member, count, lease_ms, wait_ms)


def settle_request(
    req_id: int, stream: str, group: str, member: str, items: Sequence[SettleItem]
) -> bytes:
    rows = [[i.seq, i.delivery, i.action, i.delay_ms] for i in items]
    return pack("settle", req_id, stream, group, member, rows)


def queue_info_request(req_id: int, stream: str, group: str, peek: int = 0) -> bytes:
    if peek:
        return pack("qinfo", req_id, stream, group, peek)
    return pack("qinfo", req_id, stream, group)


def queue_config_request(req_id: int, stream: str, group: str, settings: dict[str, Any]) -> bytes:
    return pack("qconf", req_id, stream, group, settings)
