"""``GET /streams/{stream}/messages``: a stream's verified transactions as a chunked response
that follows the stream while the connection stays open, as JSON lines, raw payloads or
server-sent events.

Parameters: ``from`` (``earliest``, ``latest``, a seq or an ISO 8601 time; the default is
``earliest``), ``after`` (a seq: start after it; what a reader that was cut off sends with its
last seq), ``from_index`` (a dense index; negative: the last N), ``to`` (a seq, inclusive, or a
time, exclusive), ``limit`` (how many), ``follow`` (``false``: end at the verified head),
``format`` (``json``, ``raw`` or ``sse``; ``Accept: text/event-stream`` also means ``sse``) and
``separator`` (after each raw payload; a newline unless given, empty for one message's bytes).
An ``EventSource`` that reconnects sends ``Last-Event-ID``, the last seq it got, and resumes
after it. Seqs are strings in JSON: flake seqs are above 2^53.

How this works: the first fetch is answered before the response starts, so a redirect, a
refusal or a seq already deleted is an HTTP status; after that a refusal is the response's last
line. A transient refusal (the node catching up with a stream it just took, or busy) is waited
out for up to ``link.RETRY_S`` first. Each fetch waits up to ``WAIT_MS`` for new transactions;
between fetches the handler checks that its client is still there, and a write that the client
does not take within ``http_write_ms_max`` cuts it, so a slow reader holds one fetch of memory at
most.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple

from aiohttp import web

from relay import errors
from relay.client.tx_json import as_json
from relay.core.digest import Headers
from relay.core.flake import SEQ_MAX, make_seq, seq_unix_ms
from relay.http.access import Access
from relay.http.context import ASK_S, CONTEXT
from relay.http.link import Channel, LinkTimeout
from relay.http.params import bounded, decimal, encodable
from relay.http.problems import DATA_LOSS, Problem, error_line
from relay.wire.client import fetch_request
from relay.wire.replies import ErrorReply, RedirectReply, TxsReply

FETCH_MAX = 1000  # transactions per fetch
WAIT_MS = 1000  # how long a followed read's fetch waits for new transactions
KEEPALIVE_S = 15  # a comment line on an idle event stream (proxies, and to find a gone client)
FORMATS = ("json", "raw", "sse")


@dataclass(frozen=True, slots=True)
class Delivered:
    """One transaction as the JSON writer reads it (``relay.client.tx_json.Row``)."""

    stream: str
    seq: int
    origin: int
    payload: bytes
    digest: bytes
    key: bytes | None
    headers: Headers
    index: int

    @property
    def timestamp_ms(self) -> int:
        return seq_unix_ms(self.seq)


class Reading(NamedTuple):
    after: int | None  # None: after the verified head when the read starts (latest)
    from_index: int | None
    since_time: bool  # ``from`` was a time: before what is retained means the oldest
    to_seq: int
    limit: int | None
    format: str
    follow: bool
    separator: bytes


def parse(request: web.Request) -> Reading:
    """What the query asks; ``Problem`` 400 naming a bad parameter."""
    q = request.query
    after: int | None = 0
    since_time = False
    start = q.get("from", "earliest")
    if start == "latest":
        after = None
    elif start != "earliest":
        point, since_time = _point(start, "from")
        after = max(0, point - 1)
    if "after" in q:
        after = _seq(q["after"], "after")
    last_event = request.headers.get("Last-Event-ID")
    if last_event:
        after = _seq(last_event, "Last-Event-ID")
    from_index = _integer(q["from_index"], "from_index", -(1 << 62)) if "from_index" in q else None
    to_seq = SEQ_MAX
    if "to" in q:
        point, is_time = _point(q["to"], "to")
        to_seq = point - 1 if is_time else point
    limit = _integer(q["limit"], "limit", 1) if "limit" in q else None
    fmt = q.get("format", "")
    if not fmt:
        fmt = "sse" if "text/event-stream" in request.headers.get("Accept", "") else "json"
    if fmt not in FORMATS:
        raise Problem(errors.BAD_REQUEST, f"format is one of {', '.join(FORMATS)}, not {fmt!r:.40}")
    follow = q.get("follow", "true")
    if follow not in ("true", "false", "1", "0"):
        raise Problem(errors.BAD_REQUEST, f"follow is true or false, not {follow!r:.40}")
    separator = q.get("separator", "\n")
    if len(separator) > 16 or not encodable(separator):
        raise Problem(errors.BAD_REQUEST, "separator is at most 16 bytes")
    return Reading(
        after,
        from_index,
        since_time,
        to_seq,
        limit,
        fmt,
        follow in ("true", "1"),
        separator.encode(),
    )


def _point(text: str, name: str) -> tuple[int, bool]:
    """A seq, or the first seq stamped at an ISO 8601 time (and True)."""
    if decimal(text) is not None:
        return _seq(text, name), False
    try:
        when = datetime.fromisoformat(text)
    except (ValueError, UnicodeError):
        raise Problem(
            errors.BAD_REQUEST, f"{name} is earliest, latest, a seq or an ISO 8601 time"
        ) from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    try:
        return min(make_seq(int(when.timestamp() * 1000), 0, 0), SEQ_MAX), True
    except (ValueError, OverflowError):
        raise Problem(errors.BAD_REQUEST, f"{name} {text!r:.40} is before 2026") from None


def _seq(text: str, name: str) -> int:
    return bounded(text, name, 0, SEQ_MAX)


def _integer(text: str, name: str, least: int) -> int:
    """A possibly negative integer (``from_index``, ``limit``) of at most 19 digits."""
    value = decimal(text.removeprefix("-"), 19)
    if value is None or not least <= (-value if text.startswith("-") else value):
        raise Problem(errors.BAD_REQUEST, f"{name} is an integer from {least}, not {text!r:.40}")
    return -value if text.startswith("-") else value


class Writer:
    """Turns delivered rows into the response's bytes, in the reading's format."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading

    @property
    def content_type(self) -> str:
        return {
            "json": "application/x-ndjson",
            "raw": "application/octet-stream",
            "sse": "text/event-stream",
        }[self.reading.format]

    def rows(self, rows: list[Delivered]) -> bytes:
        fmt = self.reading.format
        if fmt == "raw":
            sep = self.reading.separator
            return b"".join(r.payload + sep for r in rows)
        lines = [json.dumps(as_json(r)) for r in rows]
        if fmt == "json":
            return ("\n".join(lines) + "\n").encode()
        return "".join(
            f"id: {r.seq}\nevent: message\ndata: {line}\n\n"
            for r, line in zip(rows, lines, strict=True)
        ).encode()

    def error(self, code: str, message: str) -> bytes:
        if self.reading.format == "sse":
            data = json.dumps({"code": code, "message": message})
            return f"event: error\ndata: {data}\n\n".encode()
        return error_line(code, message) if self.reading.format == "json" else b""


def delivered(stream: str, reply: TxsReply) -> list[Delivered]:
    """The reply's rows, each with its dense index (a compacted range's rows carry theirs)."""
    indexes = reply.indexes or range(reply.first_index, reply.first_index + len(reply.rows))
    return [
        Delivered(stream, r.seq, r.origin, r.payload, r.digest, r.key, r.headers, i)
        for r, i in zip(reply.rows, indexes, strict=False)
    ]


def fetch(
    stream: str, after: int, limit: int, wait_ms: int, from_index: int | None
) -> Callable[[int], bytes]:
    """The request maker for one fetch (``Channel.ask`` numbers it)."""
    return lambda req_id: fetch_request(req_id, stream, after, limit, wait_ms, from_index)


def lost(stream: str, after: int, reply: TxsReply) -> Problem:
    return Problem(
        DATA_LOSS,
        f"{stream!r}: the transactions after seq {after} were deleted (retention); the "
        f"earliest held is {reply.earliest_seq}. Read from earliest, or from a later seq",
    )


async def write_within(
    request: web.Request, response: web.StreamResponse, data: bytes, timeout_s: float
) -> bool:
    """Write ``data``; False, and the connection dropped with what it buffered, if the client
    is gone or took nothing for ``timeout_s``."""
    try:
        await asyncio.wait_for(response.write(data), timeout_s)
    except (TimeoutError, ConnectionError, RuntimeError):
        if request.transport is not None:
            request.transport.abort()
        return False
    return True


def _keepalive(request: web.Request) -> None:
    """TCP keepalive probes after 30 s of quiet: a reader whose host vanished (no FIN) is found
    within about a minute, not after ``http_follow_ms_max``."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (
        (socket.TCP_KEEPIDLE, 30),
        (socket.TCP_KEEPINTVL, 10),
        (socket.TCP_KEEPCNT, 3),
    ):
        sock.setsockopt(socket.IPPROTO_TCP, option, value)


def _gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


async def read_messages(request: web.Request) -> web.StreamResponse:
    """``GET /streams/{stream}/messages``."""
    api = request.app[CONTEXT]
    stream = request.match_info["stream"]
    access = api.gate.admit(request)
    access.check_consume(stream)
    reading = parse(request)
    return await follow(request, stream, reading, access)


Finish = Callable[[Delivered], Awaitable[None]]


async def follow(
    request: web.Request,
    stream: str,
    reading: Reading,
    access: Access,
    finish: Finish | None = None,
) -> web.StreamResponse:
    """The response for ``reading`` of ``stream``; ``finish`` is called with the last
    transaction written, if any, before the response ends (a refusal it raises is the
    response's last line)."""
    api = request.app[CONTEXT]
    if reading.follow:
        _keepalive(request)
    held = api.slots.hold(access) if reading.follow else nullcontext()
    with held:
        api.metrics.following.set(api.slots.total)
        try:
            async with api.link.channel() as channel:
                return await _follow(request, channel, stream, reading, finish)
        finally:
            api.metrics.following.set(api.slots.total - (1 if reading.follow else 0))


async def _follow(
    request: web.Request,
    channel: Channel,
    stream: str,
    reading: Reading,
    finish: Finish | None,
) -> web.StreamResponse:
    api = request.app[CONTEXT]
    loop = asyncio.get_running_loop()
    after = reading.after
    if after is None:
        head = await channel.ask_patiently(fetch(stream, 0, 0, 0, None), ASK_S)
        after = api.answers.expect(head, TxsReply, request).verified_seq
    from_index = reading.from_index
    writer = Writer(reading)
    response: web.StreamResponse | None = None
    last: Delivered | None = None
    sent = 0
    ends_at = loop.time() + api.config.http.http_follow_ms_max / 1000
    quiet_since = loop.time()
    since_time = reading.since_time
    while True:
        want = FETCH_MAX if reading.limit is None else min(FETCH_MAX, reading.limit - sent)
        wait = WAIT_MS if response is not None and reading.follow else 0
        try:
            asked = fetch(stream, after, want, wait, from_index)
            reply = await channel.ask_patiently(asked, ASK_S + wait / 1000)
        except LinkTimeout as exc:
            if response is None:
                raise
            await write_within(
                request, response, writer.error(errors.TIMEOUT, str(exc)), api.write_s
            )
            break
        if response is None:
            txs = api.answers.expect(reply, TxsReply, request)
        elif isinstance(reply, TxsReply):
            txs = reply
        else:
            code, message = _refusal(reply)
            await write_within(request, response, writer.error(code, message), api.write_s)
            break
        if txs.lost and since_time:  # a time before what is retained: from the oldest
            after, since_time = 0, False
            continue
        if txs.lost:
            problem = lost(stream, after, txs)
            if response is None:
                raise problem
            await write_within(
                request, response, writer.error(problem.code, problem.message), api.write_s
            )
            break
        rows = [r for r in delivered(stream, txs) if r.seq <= reading.to_seq]
        reached_to = len(rows) < len(txs.rows)
        if rows:
            after, last = rows[-1].seq, rows[-1]
        if txs.through_seq and not reached_to:
            after = max(after, min(txs.through_seq, reading.to_seq))
        from_index = None
        sent += len(rows)
        if response is None:
            response = web.StreamResponse(
                headers={"Content-Type": writer.content_type, "Cache-Control": "no-cache"}
            )
            response.enable_chunked_encoding()
            await response.prepare(request)
        if rows:
            api.metrics.sent_txs.inc(len(rows))
            if not await write_within(request, response, writer.rows(rows), api.write_s):
                break
            quiet_since = loop.time()
        elif reading.format == "sse" and loop.time() - quiet_since > KEEPALIVE_S:
            if not await write_within(request, response, b": keepalive\n\n", api.write_s):
                break
            quiet_since = loop.time()
        if reached_to or after >= reading.to_seq or sent == reading.limit:
            break
        if not reading.follow and (after >= txs.verified_seq or not (txs.rows or txs.through_seq)):
            break
        if loop.time() >= ends_at or _gone(request):
            break
    assert response is not None
    if _gone(request):
        return response
    if finish is not None and last is not None:
        try:
            await finish(last)
        except (web.HTTPException, LinkTimeout, errors.RelayError) as exc:
            code, message = _failure(exc)
            await write_within(request, response, writer.error(code, message), api.write_s)
    try:
        await asyncio.wait_for(response.write_eof(), api.write_s)
    except (TimeoutError, ConnectionError, RuntimeError):
        if request.transport is not None:
            request.transport.abort()
    return response


def _failure(exc: Exception) -> tuple[str, str]:
    if isinstance(exc, Problem | errors.RelayError):
        return exc.code, exc.message
    if isinstance(exc, LinkTimeout):
        return errors.TIMEOUT, str(exc)
    return errors.UNAVAILABLE, f"the node answered {exc.__class__.__name__}"


def _refusal(reply: object) -> tuple[str, str]:
    if isinstance(reply, ErrorReply):
        return reply.code, reply.message
    if isinstance(reply, RedirectReply):
        return errors.UNAVAILABLE, "this node no longer replicates the stream; read elsewhere"
    return errors.PROTOCOL, f"the node answered with {type(reply).__name__}"
