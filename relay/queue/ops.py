"""What a work group's control stream holds: the operations that decide its jobs' fate.

How this works: a group ``G`` working stream ``S`` keeps its decisions in the stream
``S.__queue.G``, which the replicas of ``S`` replicate. Only nodes write there (a client's
publish to such a name is refused); each transaction is one operation, msgpack
``[1, kind, ...]``: a claim (a member asks for up to ``count`` ready jobs with a lease, looking
at jobs up to ``upto``), a settlement of jobs it holds (ack, nak with a delay, reject, renew),
a tick (a node's wall clock, so the group's clock can move on), the group's settings, and how
far its dead jobs were moved into the dead-letter stream. The
operation's result is not written: every replica folds the same operations in the same
verified order over the same jobs and computes it. An operation that does not decode (a hostile
peer's) is skipped by every replica alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from relay.core.routing import QUEUE_SUFFIX

VERSION = 1
MEMBER_BYTES_MAX = 128
CLAIM_COUNT_MAX = 1000  # jobs one claim may take
SETTLE_ITEMS_MAX = 1000  # jobs one settlement may name
LEASE_MS_MIN = 100
LEASE_MS_MAX = 12 * 3600_000
DELAY_MS_MAX = 30 * 86400_000
DELIVERIES_MAX = 1000
SEQ_MAX = (1 << 63) - 1
WALL_MS_MAX = 1 << 53

ACK, NAK, REJECT, RENEW = "ack", "nak", "reject", "renew"
ACTIONS = (ACK, NAK, REJECT, RENEW)


@dataclass(frozen=True, slots=True)
class Settings:
    """How a group works its stream; the first operation of a group fixes ``start_after``."""

    lease_ms: int = 30_000
    max_deliveries: int = 5
    coalesce: bool = False  # a new job for a resource with a job waiting replaces it
    exclusive: bool = False  # at most one job per resource is claimed at a time
    start_after: int = 0  # jobs with a higher seq are the group's


@dataclass(frozen=True, slots=True)
class Configure:
    settings: Settings
    wall_ms: int


@dataclass(frozen=True, slots=True)
class Claim:
    member: str
    count: int
    lease_ms: int
    upto: int  # the job stream's verified seq the proposing node had
    wall_ms: int


@dataclass(frozen=True, slots=True)
class SettleItem:
    seq: int
    delivery: int  # which delivery of the job is settled: a stale one is not applied
    action: str
    delay_ms: int = 0  # a nak's: not before this long after the settlement


@dataclass(frozen=True, slots=True)
class Settle:
    member: str
    items: tuple[SettleItem, ...]
    wall_ms: int


@dataclass(frozen=True, slots=True)
class Tick:
    """A node's wall clock (for not-before times) and, with ``op_seq``, its word that it
    applied that operation at least ``age_ms`` ago by its elapsed-time clock (for leases)."""

    wall_ms: int
    op_seq: int = 0
    age_ms: int = 0


@dataclass(frozen=True, slots=True)
class Moved:
    """The group's dead jobs up to ``ordinal`` are in the dead-letter stream."""

    ordinal: int
    wall_ms: int


Op = Configure | Claim | Settle | Tick | Moved


class OpError(ValueError):
    """An operation that does not decode; the message names the field."""


def queue_stream(stream: str, group: str) -> str:
    if not group or any(c in group for c in "*?[] \t\r\n\0.") or len(group.encode()) > 64:
        raise ValueError(
            f"a group name is 1-64 bytes without dots, spaces or glob characters: {group!r}"
        )
    return f"{stream}{QUEUE_SUFFIX}{group}"


def parse_queue_stream(name: str) -> tuple[str, str] | None:
    """(job stream, group) of a control stream's name, or None for another stream."""
    stream, sep, group = name.rpartition(QUEUE_SUFFIX)
    return (stream, group) if sep and stream and group and "." not in group else None


def encode(op: Op) -> bytes:
    body: list[Any]
    if isinstance(op, Claim):
        body = ["claim", op.member, op.count, op.lease_ms, op.upto, op.wall_ms]
    elif isinstance(op, Settle):
        items = [[i.seq, i.delivery, i.action, i.delay_ms] for i in op.items]
        body = ["settle", op.member, items, op.wall_ms]
    elif isinstance(op, Tick):
        body = ["tick", op.wall_ms, op.op_seq, op.age_ms]
    elif isinstance(op, Moved):
        body = ["moved", op.ordinal, op.wall_ms]
    else:
        s = op.settings
        body = ["configure", s.lease_ms, s.max_deliveries, s.coalesce, s.exclusive]
        body += [s.start_after, op.wall_ms]
    packed: bytes = msgpack.packb([VERSION, *body], use_bin_type=True)
    return packed


def decode(payload: bytes) -> Op:
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=True, max_bin_len=0)
    except Exception as exc:
        raise OpError(f"not msgpack: {exc}") from None
    if not isinstance(raw, list) or len(raw) < 2 or raw[0] != VERSION:
        raise OpError(f"not an operation of version {VERSION}")
    kind, fields = raw[1], raw[2:]
    if kind == "claim" and len(fields) == 5:
        member, count, lease, upto, wall = fields
        return Claim(
            member_name(member),
            _int("count", count, 1, CLAIM_COUNT_MAX),
            _int("lease_ms", lease, LEASE_MS_MIN, LEASE_MS_MAX),
            _int("upto", upto, 0, SEQ_MAX),
            _int("wall_ms", wall, 0, WALL_MS_MAX),
        )
    if kind == "settle" and len(fields) == 3:
        member, items, wall = fields
        if not isinstance(items, list) or not 1 <= len(items) <= SETTLE_ITEMS_MAX:
            raise OpError(f"items: 1-{SETTLE_ITEMS_MAX} settlements")
        return Settle(
            member_name(member),
            tuple(settle_item(i) for i in items),
            _int("wall_ms", wall, 0, WALL_MS_MAX),
        )
    if kind == "tick" and len(fields) == 3:
        wall, op_seq, age = fields
        return Tick(
            _int("wall_ms", wall, 0, WALL_MS_MAX),
            _int("op_seq", op_seq, 0, SEQ_MAX),
            _int("age_ms", age, 0, WALL_MS_MAX),
        )
    if kind == "moved" and len(fields) == 2:
        ordinal, wall = fields
        return Moved(_int("ordinal", ordinal, 1, SEQ_MAX), _int("wall_ms", wall, 0, WALL_MS_MAX))
    if kind == "configure" and len(fields) == 6:
        lease, deliveries, coalesce, exclusive, start_after, wall = fields
        if not isinstance(coalesce, bool) or not isinstance(exclusive, bool):
            raise OpError("coalesce and exclusive are booleans")
        settings = Settings(
            _int("lease_ms", lease, LEASE_MS_MIN, LEASE_MS_MAX),
            _int("max_deliveries", deliveries, 1, DELIVERIES_MAX),
            coalesce,
            exclusive,
            _int("start_after", start_after, 0, SEQ_MAX),
        )
        return Configure(settings, _int("wall_ms", wall, 0, WALL_MS_MAX))
    raise OpError(f"unknown operation {str(kind)[:20]!r} with {len(fields)} fields")


def settle_item(raw: Any) -> SettleItem:
    if not isinstance(raw, list) or len(raw) != 4:
        raise OpError("a settlement is [seq, delivery, action, delay_ms]")
    seq, delivery, action, delay = raw
    if action not in ACTIONS:
        raise OpError(f"action: one of {', '.join(ACTIONS)}")
    return SettleItem(
        _int("seq", seq, 1, SEQ_MAX),
        _int("delivery", delivery, 1, DELIVERIES_MAX),
        action,
        _int("delay_ms", delay, 0, DELAY_MS_MAX),
    )


def member_name(raw: Any) -> str:
    if not isinstance(raw, str) or not raw or len(raw.encode()) > MEMBER_BYTES_MAX:
        raise OpError(f"member: a name of 1-{MEMBER_BYTES_MAX} bytes")
    return raw


def _int(name: str, raw: Any, least: int, most: int) -> int:
    if type(raw) is not int or not least <= raw <= most:
        raise OpError(f"{name}: an integer in [{least}, {most}]")
    return raw
