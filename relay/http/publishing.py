"""``POST /streams/{stream}/messages``: publish, answered once a quorum acknowledged.

The body is one message's payload, as it is, or (``Content-Type: application/x-ndjson``) many
messages as JSON lines: ``{"payload": ..., "key": ..., "headers": ..., "id": ...}``, where
``payload`` is a string (its UTF-8 bytes) or any other JSON value (its compact text), or
``payload_b64`` is base64; ``key`` or ``key_b64``; ``headers`` an object of names to strings or
a list of ``{"name", "value" | "value_b64"}`` (as ``relay consume --json`` writes them). For one
message, ``?key=`` and repeated ``?header=name:value`` say the rest.

A retry never duplicates when the client names itself: ``Relay-Producer-Id`` (a string of its
choice) and each message's id (``Relay-Message-Id`` for one message, ``"id"`` in each line); the
cluster answers a retry with the original seq, as it does a Producer's. Without them the node's
HTTP API numbers the messages itself, and a retry is a new message. A batch the node took nothing
of for a passing reason (fenced a moment, busy) is sent again, with the same ids, for up to 5 s.

The answer lists each message's seq (a string) and digest, in order; 200 if every one was
acknowledged, else the status of the first refusal, with every row (some may be acknowledged).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from relay import errors
from relay.http.context import CONTEXT, HttpContext
from relay.http.link import RETRY_PAUSE_S, RETRY_S, Channel, transient
from relay.http.params import decimal, encodable, text
from relay.http.problems import RETRY_AFTER_S, TOO_LARGE, Problem
from relay.wire.client import publish_request
from relay.wire.replies import AckRow, AcksReply, ErrorReply, ErrorRow, RedirectReply, Reply

JSON_LINES = frozenset(
    {"application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines"}
)
PRODUCER_HEADER = "Relay-Producer-Id"
MESSAGE_HEADER = "Relay-Message-Id"
PRODUCER_ID_CHARS_MAX = 200
BATCH_MAX = 512  # messages per request to the node
BATCH_BYTES = 4 << 20  # and their payload bytes
LINE_KEYS = frozenset({"payload", "payload_b64", "key", "key_b64", "headers", "id"})
MSG_ID_MAX = (1 << 64) - 1
Row = list[Any]  # [msg id, payload, key, headers] as the wire carries a message


async def publish(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    stream = request.match_info["stream"]
    api.gate.admit(request).check_publish(stream)
    most = api.config.http.http_body_bytes_max
    if request.content_length is not None and request.content_length > most:
        raise _too_large(most)
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(most) from None
    producer = request.headers.get(PRODUCER_HEADER)
    if producer is not None:
        text(producer, PRODUCER_HEADER, PRODUCER_ID_CHARS_MAX)
    if request.content_type in JSON_LINES:
        rows = _lines(body, producer is not None)
    else:
        rows = [_single(request, body, producer is not None)]
    if producer is None:
        producer = api.producer_id
        for row in rows:
            row[0] = next(api.msg_ids)
    batches = _batches(rows)
    async with api.link.channel() as channel:
        replies = await _publish_all(channel, stream, producer, batches, api.publish_s)
    if not isinstance(replies[0], AcksReply | ErrorReply):  # a redirect: before anything stored
        api.answers.expect(replies[0], AcksReply, request)
    results: list[AckRow | ErrorRow] = []
    for batch, reply in zip(batches, replies, strict=True):
        if isinstance(reply, AcksReply) and len(reply.rows) == len(batch):
            results += reply.rows
        else:  # this batch alone was refused: the others' rows still say what was stored
            results += [_refusal(reply)] * len(batch)
    return _answer(api, results)


async def _publish_all(
    channel: Channel, stream: str, producer: str, batches: list[list[Row]], timeout_s: float
) -> list[Reply]:
    """Each batch's reply; a batch the node took nothing of for a passing reason (fenced a
    moment, busy) is sent again, with the same ids, for up to ``RETRY_S``."""
    loop = asyncio.get_running_loop()
    gives_up = loop.time() + RETRY_S
    replies: list[Reply | None] = [None] * len(batches)
    pending = list(range(len(batches)))
    while pending:
        got = await channel.ask_all(
            [_publish(stream, producer, batches[i]) for i in pending], timeout_s
        )
        for i, reply in zip(pending, got, strict=True):
            replies[i] = reply
        pending = [i for i, reply in zip(pending, got, strict=True) if transient(reply)]
        if pending and loop.time() >= gives_up:
            break
        if pending:
            await asyncio.sleep(RETRY_PAUSE_S)
    return [reply for reply in replies if reply is not None]


def _refusal(reply: Reply) -> ErrorRow:
    if isinstance(reply, ErrorReply):
        return ErrorRow(reply.code, reply.message)
    if isinstance(reply, RedirectReply):
        return ErrorRow(errors.UNAVAILABLE, "the node stopped replicating the stream; retry")
    return ErrorRow(errors.PROTOCOL, f"the node answered {type(reply).__name__}")


def _answer(api: HttpContext, rows: list[AckRow | ErrorRow]) -> web.Response:
    results: list[dict[str, object]] = []
    status = 200
    for row in rows:
        if isinstance(row, AckRow):
            results.append({"seq": str(row.seq), "digest": row.digest.hex()})
        else:
            results.append({"error": {"code": row.code, "message": row.message}})
            if status == 200:
                status = Problem(row.code, row.message).status_code
    api.metrics.published_txs.inc(sum(isinstance(r, AckRow) for r in rows))
    wait = RETRY_AFTER_S.get(status)
    headers = {"Retry-After": str(wait)} if wait else None
    return web.json_response({"results": results}, status=status, headers=headers)


def _too_large(most: int) -> Problem:
    return Problem(
        TOO_LARGE, f"the body is over {most} bytes (cluster.http_body_bytes_max); send less"
    )


def _publish(stream: str, producer: str, batch: list[Row]) -> Callable[[int], bytes]:
    return lambda req_id: publish_request(req_id, stream, producer, batch)


def _batches(rows: list[Row]) -> list[list[Row]]:
    batches: list[list[Row]] = [[]]
    size = 0
    for row in rows:
        if batches[-1] and (size + len(row[1]) > BATCH_BYTES or len(batches[-1]) >= BATCH_MAX):
            batches.append([])
            size = 0
        batches[-1].append(row)
        size += len(row[1])
    return batches


def _single(request: web.Request, body: bytes, named: bool) -> Row:
    msg_id = 0
    if named:
        found = decimal(request.headers.get(MESSAGE_HEADER))
        if found is None or found > MSG_ID_MAX:
            raise Problem(
                errors.BAD_REQUEST,
                f"with {PRODUCER_HEADER}, {MESSAGE_HEADER} is the message's id (0 to 2^64-1)",
            )
        msg_id = found
    key = request.query.get("key")
    headers = []
    for header in request.query.getall("header", []):
        name, sep, value = header.partition(":")
        if not sep or not name or not encodable(header):
            raise Problem(errors.BAD_REQUEST, f"header is name:value, not {header!r:.60}")
        headers.append([name, value.encode()])
    if key is not None:
        text(key, "key", 1 << 16)
    return [msg_id, body, None if key is None else key.encode(), headers]


def _lines(body: bytes, named: bool) -> list[Row]:
    rows = []
    for number, line in enumerate(body.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise Problem(errors.BAD_REQUEST, f"line {number} is not JSON: {exc}") from None
        rows.append(_line(obj, number, named))
    if not rows:
        raise Problem(errors.BAD_REQUEST, "the body holds no message (one JSON object per line)")
    return rows


def _line(obj: object, number: int, named: bool) -> Row:
    where = f"line {number}"
    if not isinstance(obj, dict):
        raise Problem(errors.BAD_REQUEST, f"{where} is not a JSON object")
    unknown = set(obj) - LINE_KEYS
    if unknown:
        raise Problem(
            errors.BAD_REQUEST,
            f"{where} has an unknown key {sorted(unknown)[0]!r:.40}; known: {sorted(LINE_KEYS)}",
        )
    msg_id = obj.get("id", 0)
    if named and (type(msg_id) is not int or not 0 <= msg_id <= MSG_ID_MAX or "id" not in obj):
        raise Problem(
            errors.BAD_REQUEST, f"{where}: with {PRODUCER_HEADER}, each message has an 'id' (u64)"
        )
    payload = _bytes(obj, "payload", where, any_json=True)
    if payload is None:
        raise Problem(errors.BAD_REQUEST, f"{where} has no 'payload' (or 'payload_b64')")
    return [msg_id, payload, _bytes(obj, "key", where), _headers(obj.get("headers"), where)]


def _bytes(obj: dict[str, Any], name: str, where: str, any_json: bool = False) -> bytes | None:
    """``obj[name]`` as bytes (a string's UTF-8, other JSON's text), or ``obj[name_b64]``."""
    if name in obj and f"{name}_b64" in obj:
        raise Problem(errors.BAD_REQUEST, f"{where} has both {name!r} and '{name}_b64'")
    if f"{name}_b64" in obj:
        return _b64(obj[f"{name}_b64"], f"{where}: '{name}_b64'")
    if name not in obj:
        return None
    value = obj[name]
    if not isinstance(value, str) and not any_json:
        raise Problem(errors.BAD_REQUEST, f"{where}: {name!r} must be a string")
    try:
        found = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return found.encode()
    except (UnicodeEncodeError, ValueError, RecursionError):
        raise Problem(errors.BAD_REQUEST, f"{where}: {name!r} is not valid UTF-8 text") from None


def _b64(value: object, where: str) -> bytes:
    if not isinstance(value, str):
        raise Problem(errors.BAD_REQUEST, f"{where} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Problem(errors.BAD_REQUEST, f"{where} is not base64") from None


def _headers(raw: object, where: str) -> list[list[object]]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        pairs = list(raw.items())
        if not all(isinstance(v, str) and encodable(n + v) for n, v in pairs):
            raise Problem(errors.BAD_REQUEST, f"{where}: each header's value is a string")
        return [[name, value.encode()] for name, value in pairs]
    if not isinstance(raw, list):
        raise Problem(errors.BAD_REQUEST, f"{where}: 'headers' is an object or a list")
    headers: list[list[object]] = []
    for item in raw:
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(name, str) or not encodable(name):
            raise Problem(errors.BAD_REQUEST, f"{where}: each header is {{'name', 'value'}}")
        value = _bytes(item, "value", where)
        headers.append([item["name"], value if value is not None else b""])
    return headers
