"""What the HTTP API shows of the cluster: ``/health``, ``/ready``, ``/cluster``, ``/streams``,
``/streams/{stream}`` and the newest chaos report's picture.

``/health`` answers 200 while the node's loop answers (a liveness probe), ``/ready`` 200 while
the node serves (not fenced, not joining, its disk taking writes), else 503 with the reason (a
readiness probe). Both need no token. ``/cluster`` and ``/streams`` ask every node's client port
for its status (with this node's own key, which each node admits), as ``relay cluster status``
and ``relay stream ls`` do; a node that does not answer in time is listed as down.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from relay import errors
from relay.auth.keys import generate
from relay.client.directory import NodeAddress
from relay.client.status import statuses
from relay.client.stream_views import held_by_node, seq_time, stream_json
from relay.core.status import NodeStatus
from relay.http.context import CONTEXT, HttpContext
from relay.http.link import LinkTimeout
from relay.http.problems import NOT_FOUND, Problem
from relay.wire.client import status_request, stream_info_request
from relay.wire.replies import StatusReply, StreamInfoReply

PROBE_S = 2.0
PEERS_MS = 1000  # how long a node's status may take
REPORTS_MAX = 1000  # chaos run folders looked at for the newest picture


async def _own_status(request: web.Request, brief: bool) -> NodeStatus:
    api = request.app[CONTEXT]
    async with api.link.channel() as channel:
        reply = await channel.ask(lambda i: status_request(i, brief), PROBE_S)
    return api.answers.expect(reply, StatusReply, request).status


async def health(request: web.Request) -> web.Response:
    try:
        status = await _own_status(request, brief=True)
    except LinkTimeout:
        raise Problem(errors.UNAVAILABLE, "the node's loop did not answer in 2 s") from None
    return web.json_response({"status": "ok", "node": status.node, "state": status.state})


async def ready(request: web.Request) -> web.Response:
    try:
        status = await _own_status(request, brief=True)
    except LinkTimeout:
        raise Problem(errors.UNAVAILABLE, "the node's loop did not answer in 2 s") from None
    if status.storage:
        raise Problem(errors.UNAVAILABLE, f"the node's disk refuses writes: {status.storage}")
    if status.state != "serving":
        raise Problem(errors.UNAVAILABLE, f"the node is {status.state}, not serving")
    return web.json_response({"status": "ready", "node": status.node, "state": status.state})


async def _everyone(api: HttpContext) -> dict[int, NodeStatus | None]:
    """Every node's status (None: it did not answer), asked at once, off the event loop."""
    addresses = [NodeAddress(n.id, n.host, n.client_port, n.public_key) for n in api.config.nodes]
    found = await asyncio.to_thread(statuses, addresses, api.pair or generate(), PEERS_MS)
    return {a.node_id or 0: s for a, s in found.items()}


async def cluster(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    api.gate.admit(request)
    nodes = []
    for spec in api.config.nodes:
        nodes.append({"node": spec.id, "host": spec.host, "http": spec.http_address})
    found = await _everyone(api)
    for row in nodes:
        status = found.get(int(str(row["node"])))
        if status is None:
            row.update(state="down")
            continue
        row.update(
            state=status.state,
            epoch=status.epoch,
            peers_up=list(status.peers_up),
            peers_down=list(status.peers_down),
            storage=status.storage or "ok",
            streams=len(status.streams),
            unverified_txs=sum(s.unverified_txs for s in status.streams),
            log_bytes=sum(s.log_bytes for s in status.streams),
        )
    return web.json_response({"cluster": api.config.name, "node": api.node_id, "nodes": nodes})


async def list_streams(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    access = api.gate.admit(request)
    show_all = request.query.get("all", "false") in ("true", "1")
    held = held_by_node([s for s in (await _everyone(api)).values() if s is not None])
    rows = []
    for name in sorted(held):
        if ("__" in name and not show_all) or (
            access.grant is not None and not access.grant.may_consume(name)
        ):
            continue
        copies = held[name]
        best = max(copies.values(), key=lambda s: s.verified_seq)
        rows.append(
            {
                "stream": name,
                "replicas": list(best.replicas),
                "txs": max(s.log_txs for s in copies.values()),
                "bytes": max(s.log_bytes for s in copies.values()),
                "last_seq": str(best.verified_seq),
                "last_time": seq_time(best.verified_seq),
                "heads": {str(n): str(s.verified_seq) for n, s in sorted(copies.items())},
            }
        )
    return web.json_response({"streams": rows})


async def describe_stream(request: web.Request) -> web.Response:
    api = request.app[CONTEXT]
    stream = request.match_info["stream"]
    api.gate.admit(request).check_consume(stream)
    async with api.link.channel() as channel:
        reply = await channel.ask(lambda i: stream_info_request(i, stream), PROBE_S)
    settings = api.answers.expect(reply, StreamInfoReply, request).info
    copies = held_by_node([s for s in (await _everyone(api)).values() if s is not None])
    nodes = {str(n): stream_json(s) for n, s in sorted(copies.get(stream, {}).items())}
    return web.json_response({"stream": stream, "settings": settings, "nodes": nodes})


async def chaos_picture(request: web.Request) -> web.FileResponse:
    api = request.app[CONTEXT]
    api.gate.admit(request)
    found = await asyncio.to_thread(newest_report, api.chaos_dirs)
    if found is None:
        raise Problem(NOT_FOUND, "no chaos report here (chaos-runs/*/report.png)")
    return web.FileResponse(found, headers={"Cache-Control": "no-cache"})


def newest_report(folders: tuple[Path, ...]) -> Path | None:
    """The newest ``report.png`` in ``folders`` or their ``chaos-runs/*`` subfolders."""
    candidates = []
    for folder in folders:
        candidates.append(folder / "report.png")
        runs = folder / "chaos-runs"
        if runs.is_dir():
            for i, run in enumerate(runs.iterdir()):
                if i >= REPORTS_MAX:
                    break
                candidates.append(run / "report.png")
    dated = []
    for path in candidates:
        try:
            dated.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return max(dated)[1] if dated else None
