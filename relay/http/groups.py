"""Consumer groups and work groups over HTTP.

Consumer groups (``/streams/{stream}/groups``): a group's committed position is the last commit
in its group stream, as for ``relay.Consumer(group=...)``. ``GET .../groups/{group}/messages``
reads after it (``limit`` defaults to 100, ``follow`` to false) and, with ``commit=true``,
commits the last transaction it wrote before the response ends (at most once: a reader that must
process every transaction commits after processing, with ``POST .../commit`` and the
transaction's seq and digest, which the node checks against the stream).

Work groups (``/streams/{stream}/queues``): ``POST .../claim`` leases ready jobs to a member
(``member``, ``count``, ``lease_ms``, ``wait_ms``), ``POST .../ack``, ``nak``, ``reject`` and
``renew`` settle them (a body ``{"member", "jobs": [{"seq", "delivery"}], "delay_ms"}``), ``GET``
describes the group and ``PUT`` sets its settings, as ``relay.Worker`` does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from relay import errors
from relay.client.groups import CommitError, commit_of, commit_payload, group_stream
from relay.client.tx_json import text_field
from relay.core.flake import SEQ_MAX
from relay.core.routing import GROUP_SUFFIX, QUEUE_SUFFIX
from relay.http.access import Access
from relay.http.context import ASK_S, CONTEXT, HttpContext
from relay.http.link import Channel
from relay.http.params import bounded, text
from relay.http.problems import TOO_LARGE, Problem
from relay.http.reading import Delivered, Reading, fetch, follow, parse
from relay.queue.ops import ACTIONS, SettleItem
from relay.wire.client import (
    claim_request,
    publish_request,
    queue_config_request,
    queue_info_request,
    settle_request,
    status_request,
)
from relay.wire.replies import (
    AcksReply,
    ErrorRow,
    JobsReply,
    QueueInfoReply,
    SettledReply,
    StatusReply,
    TxsReply,
)

GROUP_READ_LIMIT = 100
U32_MAX = (1 << 32) - 1
CLAIM_MAX = 1000
WAIT_MS_MAX = 30_000
LEASE_MS_DEFAULT = 30_000
BODY_BYTES_MAX = 1 << 20  # a settle's or a commit's JSON body


def _stream(request: web.Request, access: Access) -> str:
    stream = request.match_info["stream"]
    access.check_consume(stream)
    return stream


def _group(request: web.Request, stream: str) -> str:
    try:
        group_stream(stream, request.match_info["group"])
    except ValueError as exc:
        raise Problem(errors.BAD_REQUEST, str(exc)) from None
    return request.match_info["group"]


async def _held(api: HttpContext, channel: Channel, request: web.Request, suffix: str) -> list[str]:
    """The groups (by ``suffix``: consumer or work) of the path's stream that this node holds;
    a redirect if it does not replicate the stream."""
    stream = request.match_info["stream"]
    replicas = api.config.routing().replicas_of(stream)
    if api.node_id not in replicas:
        raise api.answers.redirect(list(replicas), stream, request)
    reply = await channel.ask(lambda i: status_request(i), ASK_S)
    status = api.answers.expect(reply, StatusReply, request).status
    prefix = stream + suffix
    return sorted(s.name[len(prefix) :] for s in status.streams if s.name.startswith(prefix))


# --- consumer groups ---------------------------------------------------------------------


async def list_groups(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    stream = _stream(request, api.gate.admit(request))
    async with api.link.channel() as channel:
        names = await _held(api, channel, request, GROUP_SUFFIX)
        groups = [await _position(api, channel, request, stream, g) for g in names]
    return web.json_response({"stream": stream, "groups": groups})


async def describe_group(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    stream = _stream(request, api.gate.admit(request))
    group = _group(request, stream)
    async with api.link.channel() as channel:
        return web.json_response(await _position(api, channel, request, stream, group))


async def _position(
    api: HttpContext, channel: Channel, request: web.Request, stream: str, group: str
) -> dict[str, object]:
    """The group's committed position and how many transactions of the stream follow it."""
    committed = await _committed(api, channel, request, stream, group)
    last = api.answers.expect(
        await channel.ask_patiently(fetch(stream, 0, 1, 0, -1), ASK_S), TxsReply, request
    )
    count = last.first_index + 1 if last.rows else 0
    position: dict[str, object] = {"stream": stream, "group": group, "committed": None}
    lag = count
    if committed is not None:
        seq, digest = committed
        position["committed"] = {"seq": str(seq), "digest": digest.hex()}
        after = api.answers.expect(
            await channel.ask_patiently(fetch(stream, seq, 1, 0, None), ASK_S), TxsReply, request
        )
        lag = count - after.first_index if after.rows else 0
    position["lag"] = lag
    return position


async def _committed(
    api: HttpContext, channel: Channel, request: web.Request, stream: str, group: str
) -> tuple[int, bytes] | None:
    name = group_stream(stream, group)
    reply = await channel.ask_patiently(fetch(name, 0, 1, 0, -1), ASK_S)
    last = api.answers.expect(reply, TxsReply, request)
    if not last.rows:
        return None
    try:
        commit = commit_of(name, last.rows[0].seq, last.rows[0].payload)
    except CommitError as exc:
        raise Problem(errors.CONFLICT, exc.message) from None
    return commit.seq, commit.digest


async def read_group(request: web.Request) -> web.StreamResponse:
    api = request.app[CONTEXT]
    access = api.gate.admit(request)
    stream = _stream(request, access)
    group = _group(request, stream)
    commit = request.query.get("commit", "false")
    if commit not in ("true", "false"):
        raise Problem(errors.BAD_REQUEST, f"commit is true or false, not {commit!r:.40}")
    if commit == "true":  # a commit is a publish to the group's stream
        access.check_publish(group_stream(stream, group))
    reading = parse(request)
    async with api.link.channel() as channel:
        committed = await _committed(api, channel, request, stream, group)
    reading = Reading(
        committed[0] if committed is not None else reading.after,
        None if committed is not None else reading.from_index,
        reading.since_time and committed is None,
        reading.to_seq,
        reading.limit or GROUP_READ_LIMIT,
        reading.format,
        request.query.get("follow", "false") in ("true", "1"),
        reading.separator,
    )

    async def commit_last(last: Delivered) -> None:
        await _commit(api, request, stream, group, last.seq, last.digest)

    return await follow(request, stream, reading, access, commit_last if commit == "true" else None)


async def commit_group(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    access = api.gate.admit(request)
    stream = _stream(request, access)
    group = _group(request, stream)
    access.check_publish(group_stream(stream, group))
    body = await _json_body(request)
    seq, digest_text = bounded(body.get("seq"), "'seq'", 1, SEQ_MAX), body.get("digest")
    try:
        digest = bytes.fromhex(digest_text) if isinstance(digest_text, str) else b""
    except ValueError:
        digest = b""
    async with api.link.channel() as channel:
        reply = await channel.ask_patiently(fetch(stream, seq - 1, 1, 0, None), ASK_S)
    at = api.answers.expect(reply, TxsReply, request)
    if not at.rows or at.rows[0].seq != seq or at.rows[0].digest != digest:
        raise Problem(
            errors.BAD_REQUEST,
            f"{stream!r} holds no verified transaction of seq {seq} with that 'digest' (hex)",
        )
    commit_seq = await _commit(api, request, stream, group, seq, digest)
    return web.json_response(
        {"committed": {"seq": str(seq), "digest": digest.hex()}, "commit_seq": str(commit_seq)}
    )


async def _commit(
    api: HttpContext, request: web.Request, stream: str, group: str, seq: int, digest: bytes
) -> int:
    name = group_stream(stream, group)
    row = [next(api.msg_ids), commit_payload(stream, seq, digest), stream.encode(), []]
    async with api.link.channel() as channel:
        reply = await channel.ask_patiently(
            lambda i: publish_request(i, name, api.producer_id, [row]), api.publish_s
        )
    ack = api.answers.expect(reply, AcksReply, request).rows[0]
    if isinstance(ack, ErrorRow):
        raise Problem(ack.code, ack.message)
    return ack.seq


# --- work groups -------------------------------------------------------------------------


async def list_queues(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    stream = _stream(request, api.gate.admit(request))
    queues = []
    async with api.link.channel() as channel:
        for group in await _held(api, channel, request, QUEUE_SUFFIX):
            info = await _queue_info(api, channel, request, stream, group, 0)
            queues.append({"group": group, **info})
    return _json({"stream": stream, "queues": queues})


async def describe_queue(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    stream = _stream(request, api.gate.admit(request))
    group = _group(request, stream)
    peek = _int(request, "peek", 0, 0, 100)
    async with api.link.channel() as channel:
        info = await _queue_info(api, channel, request, stream, group, peek)
    return _json({"stream": stream, "group": group, **info})


async def _queue_info(
    api: HttpContext, channel: Channel, request: web.Request, stream: str, group: str, peek: int
) -> dict[str, Any]:
    reply = await channel.ask_patiently(lambda i: queue_info_request(i, stream, group, peek), ASK_S)
    return api.answers.expect(reply, QueueInfoReply, request).info


async def configure_queue(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    access = api.gate.admit(request)
    stream = _stream(request, access)
    group = _group(request, stream)
    access.check_publish(stream + QUEUE_SUFFIX + group)
    settings = await _json_body(request)
    return await _queue_call(
        request, lambda i: queue_config_request(i, stream, group, settings), QueueInfoReply, 0
    )


async def claim(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    access = api.gate.admit(request)
    stream = _stream(request, access)
    group = _group(request, stream)
    access.check_publish(stream + QUEUE_SUFFIX + group)
    member = text(request.query.get("member"), "member (the claiming worker)")
    count = _int(request, "count", 1, 1, CLAIM_MAX)
    lease = _int(request, "lease_ms", LEASE_MS_DEFAULT, 1, 24 * 3600 * 1000)
    wait = _int(request, "wait_ms", 0, 0, WAIT_MS_MAX)
    return await _queue_call(
        request,
        lambda i: claim_request(i, stream, group, member, count, lease, wait),
        JobsReply,
        wait,
    )


async def settle(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    access = api.gate.admit(request)
    stream = _stream(request, access)
    group = _group(request, stream)
    access.check_publish(stream + QUEUE_SUFFIX + group)
    action = request.match_info["action"]
    if action not in ACTIONS:
        raise Problem(errors.BAD_REQUEST, f"the action is one of {', '.join(ACTIONS)}")
    body = await _json_body(request)
    member = text(body.get("member"), "'member' (the worker that holds the jobs)")
    jobs = body.get("jobs")
    delay = bounded(body.get("delay_ms", 0), "'delay_ms'", 0, 7 * 86_400_000)
    if not isinstance(jobs, list) or not 0 < len(jobs) <= CLAIM_MAX:
        raise Problem(errors.BAD_REQUEST, "'jobs' lists the jobs to settle, as claimed")
    items = [_settle_item(job, action, delay) for job in jobs]
    return await _queue_call(
        request, lambda i: settle_request(i, stream, group, member, items), SettledReply, 0
    )


def _settle_item(job: object, action: str, delay: int) -> SettleItem:
    if not isinstance(job, dict):
        raise Problem(errors.BAD_REQUEST, "each job is {'seq': ..., 'delivery': ...}")
    seq = bounded(job.get("seq"), "a job's 'seq'", 1, SEQ_MAX)
    return SettleItem(
        seq, bounded(job.get("delivery"), "a job's 'delivery'", 1, U32_MAX), action, delay
    )


async def _queue_call(
    request: web.Request, make: Callable[[int], bytes], kind: type[Any], wait_ms: int
) -> web.Response:
    api = request.app[CONTEXT]
    async with api.link.channel() as channel:
        reply = await channel.ask_patiently(make, ASK_S + wait_ms / 1000)
    answer: Any = api.answers.expect(reply, kind, request)
    if isinstance(answer, JobsReply):
        jobs = [_job(row) for row in answer.rows]
        return _json({"jobs": jobs, "next_ready_ms": answer.next_ready_ms})
    if isinstance(answer, SettledReply):
        return _json({"results": list(answer.results)})
    return _json(answer.info)


def _job(row: Any) -> dict[str, object]:
    job: dict[str, object] = {
        "seq": str(row.seq),
        "delivery": row.delivery,
        "priority": row.priority,
        "not_before": row.not_before,
        "lease_ms": row.lease_ms,
        "headers": [{"name": n, **text_field("value", v)} for n, v in row.headers],
        **text_field("payload", row.payload),
    }
    if row.key is not None:
        job.update(text_field("key", row.key))
    return job


def _json(body: object) -> web.Response:
    """A JSON answer; bytes (a job's key in a peek) as text, or base64."""

    def encode(value: object) -> object:
        if isinstance(value, bytes):
            return next(iter(text_field("", value).values()))
        raise TypeError(f"{type(value).__name__} is not JSON")

    return web.json_response(body, dumps=lambda v: json.dumps(v, default=encode))


async def _json_body(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > BODY_BYTES_MAX:
        raise Problem(TOO_LARGE, f"this body is at most {BODY_BYTES_MAX} bytes")
    try:
        raw = await request.content.read(BODY_BYTES_MAX + 1)
        body = json.loads(raw) if len(raw) <= BODY_BYTES_MAX else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise Problem(errors.BAD_REQUEST, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Problem(
            errors.BAD_REQUEST, f"the body is a JSON object of at most {BODY_BYTES_MAX} bytes"
        )
    return body


def _int(request: web.Request, name: str, default: int, least: int, most: int) -> int:
    found = request.query.get(name)
    return default if found is None else bounded(found, name, least, most)
