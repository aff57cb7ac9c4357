"""A node's HTTP API and console: an aiohttp application in a thread of the node's process.

How this works: the thread runs its own asyncio loop; every request that needs the node asks it
through ``NodeLink`` (its client port, in process), so the HTTP API decides nothing the client
port does not. ``guard`` bounds the requests served at once (``http_requests_max``: more are
answered 503), turns a node that does not answer into 504, refuses a browser's request from a
page that is not one of the cluster's nodes (``Origin``: no other site can make a visitor's
browser publish), and counts every request by route and status. aiohttp parses HTTP, bounds
request lines and headers (8 KiB each) and bodies (``http_body_bytes_max``, 413), and cancels a
handler whose client went away.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio
from aiohttp import web
from prometheus_client import CollectorRegistry

from relay import errors
from relay.auth.keys import KeyPair
from relay.config import ClusterConfig
from relay.http import groups, publishing, reading, views
from relay.http.access import Gate, StreamSlots
from relay.http.context import CONTEXT, HttpContext
from relay.http.link import LinkTimeout, NodeLink, Unsendable
from relay.http.metrics import HttpMetrics
from relay.http.problems import Problem
from relay.http.replies import Answers

log = logging.getLogger("relay.http")
CONSOLE = Path(__file__).parent / "console"
START_S = 10.0
STOP_S = 5.0
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    api = request.app[CONTEXT]
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    started = time.monotonic()
    status = 500
    origin = request.headers.get("Origin")
    if origin is not None and origin not in api.origins and origin != _own(request):
        status = 403
        api.metrics.requests.labels(route, str(status)).inc()
        raise Problem(
            errors.FORBIDDEN,
            f"a request from a page of {origin:.100} (only the cluster's own nodes' pages may "
            "call this API from a browser)",
        )
    if origin is not None and request.method == "OPTIONS":  # a preflight, from a node's page
        return web.Response(status=204, headers={**_cors(origin), **PREFLIGHT})
    if api.active >= api.config.http.http_requests_max:
        status = 503
        api.metrics.requests.labels(route, str(status)).inc()
        raise Problem(
            errors.UNAVAILABLE,
            f"the node serves {api.active} HTTP requests already (cluster.http_requests_max)",
        )
    api.active += 1
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except LinkTimeout as exc:
        status = 504
        raise Problem(errors.TIMEOUT, str(exc)) from None
    except Unsendable as exc:
        status = 400
        raise Problem(errors.BAD_REQUEST, str(exc)) from None
    except errors.RelayError as exc:
        problem = Problem(exc.code, exc.message)
        status = problem.status
        raise problem from None
    except asyncio.CancelledError:
        status = 499  # the client went away
        raise
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path)
        raise Problem("internal", "the node failed to answer this request; see its log") from None
    finally:
        api.active -= 1
        api.metrics.requests.labels(route, str(status)).inc()
        api.metrics.seconds.labels(route).observe(time.monotonic() - started)


PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, POST, PUT",
    "Access-Control-Allow-Headers": (
        "Authorization, Content-Type, Last-Event-ID, Relay-Producer-Id, Relay-Message-Id"
    ),
    "Access-Control-Max-Age": "600",
}


def _own(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def _cors(origin: str) -> dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}


async def allow_nodes(request: web.Request, response: web.StreamResponse) -> None:
    """A page of another node of the cluster (the console, following a stream to its replica)
    may read the answer: cross-origin reads are allowed to the cluster's own origins."""
    origin = request.headers.get("Origin")
    if origin is not None and origin in request.app[CONTEXT].origins:
        response.headers.update(_cors(origin))


async def console(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(CONSOLE / "index.html", headers={"Cache-Control": "no-cache"})


def make_app(context: HttpContext) -> web.Application:
    app = web.Application(
        middlewares=[guard], client_max_size=context.config.http.http_body_bytes_max
    )
    app[CONTEXT] = context
    app.on_response_prepare.append(allow_nodes)
    r = app.router
    r.add_get("/", console)
    r.add_static("/console", CONSOLE)
    r.add_get("/health", views.health)
    r.add_get("/ready", views.ready)
    r.add_get("/cluster", views.cluster)
    r.add_get("/chaos/report.png", views.chaos_picture)
    r.add_get("/streams", views.list_streams)
    r.add_get("/streams/{stream}", views.describe_stream)
    r.add_get("/streams/{stream}/messages", reading.read_messages)
    r.add_post("/streams/{stream}/messages", publishing.publish)
    r.add_get("/streams/{stream}/groups", groups.list_groups)
    r.add_get("/streams/{stream}/groups/{group}", groups.describe_group)
    r.add_get("/streams/{stream}/groups/{group}/messages", groups.read_group)
    r.add_post("/streams/{stream}/groups/{group}/commit", groups.commit_group)
    r.add_get("/streams/{stream}/queues", groups.list_queues)
    r.add_get("/streams/{stream}/queues/{group}", groups.describe_queue)
    r.add_put("/streams/{stream}/queues/{group}", groups.configure_queue)
    r.add_post("/streams/{stream}/queues/{group}/claim", groups.claim)
    r.add_post("/streams/{stream}/queues/{group}/{action}", groups.settle)
    return app


class HttpServer:
    """The HTTP API of node ``node_id`` on ``host``:``port``, started by ``start`` (which
    raises ``OSError`` if it cannot bind) and stopped by ``close``."""

    def __init__(
        self,
        ctx: zmq.Context[Any],
        config: ClusterConfig,
        node_id: int,
        pair: KeyPair | None,
        registry: CollectorRegistry,
    ) -> None:
        self.ctx = ctx
        self.config = config
        self.node_id = node_id
        self.pair = pair
        self.metrics = HttpMetrics(registry)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self.thread: threading.Thread | None = None

    def start(self, host: str, port: int) -> None:
        started: list[BaseException | None] = []
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self._serve(host, port, started, ready))
            except BaseException as exc:  # before it served: start raises it
                if not ready.is_set():
                    started.append(exc)
                    ready.set()
                raise
            finally:
                loop.close()

        self.thread = threading.Thread(target=run, name="http", daemon=True)
        self.thread.start()
        if not ready.wait(START_S):
            raise OSError(f"the HTTP server did not start in {START_S:.0f} s")
        if started[0] is not None:
            raise started[0]

    async def _serve(
        self, host: str, port: int, started: list[BaseException | None], ready: threading.Event
    ) -> None:
        self.stopping = asyncio.Event()
        link = NodeLink(zmq.asyncio.Context.shadow(self.ctx.underlying))
        config = self.config
        folders = (config.path.parent,) if config.path is not None else ()
        context = HttpContext(
            config,
            self.node_id,
            self.pair,
            link,
            self.metrics,
            Gate(config),
            Answers(config),
            StreamSlots(config.http.http_streams_per_client_max),
            folders,
        )
        runner = web.AppRunner(
            make_app(context),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=1.0,
            handler_cancellation=True,
        )
        await runner.setup()
        try:
            await web.TCPSite(runner, host or None, port).start()
        except OSError as exc:
            started.append(exc)
            ready.set()
            await runner.cleanup()
            link.close()
            return
        started.append(None)
        ready.set()
        await self.stopping.wait()
        await runner.cleanup()
        link.close()

    def close(self) -> None:
        loop, stopping, thread = self.loop, self.stopping, self.thread
        if loop is None or stopping is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(stopping.set)
        thread.join(STOP_S)
