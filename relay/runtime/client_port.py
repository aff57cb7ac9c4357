"""The client port: the ROUTER socket producers and consumers talk to, its bounds, its answers.

How this works: each loop turn ``drain`` reads at most ``DRAIN_FRAMES_MAX`` requests, answers
what is malformed or over a connection's share at once, admits each publish and fetch
(``ClientLimits``) and turns it into an event for the core; spans and status are answered on
the spot from the core's state. ``reply`` and ``answer`` encode what the core decided. The
socket bounds what one connection costs: a request's size (``ZMQ_MAXMSGSIZE``), the answers
queued for it (``ZMQ_SNDHWM``), and the connections it holds (``ClientConnections``).

An answer that finds its connection's queue full waits in the node (``ClientOutbox``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from relay import errors
from relay.config import ClusterConfig
from relay.core import reads
from relay.core.events import Acked as AckedResult
from relay.core.events import (
    Event,
    FetchRequested,
    LogSpan,
    PublishReply,
    PublishRequested,
    PublishResults,
    ReadResult,
    Redirect,
    Rejected,
    SpanResult,
)
from relay.core.node import NodeCore
from relay.core.timer import Now
from relay.queue.service import (
    Answer as QueueAnswer,
)
from relay.queue.service import (
    ClaimAnswer,
    ClaimRequest,
    ConfigureRequest,
    InfoAnswer,
    QueueService,
    SettleAnswer,
    SettleRequest,
)
from relay.runtime.client_limits import ClientLimits
from relay.runtime.connections import ClientConnections
from relay.runtime.mesh_sockets import DRAIN_BYTES_MAX, DRAIN_FRAMES_MAX, HWM_FRAMES
from relay.runtime.metrics import NodeMetrics
from relay.runtime.outbox import QUEUED_MAX, ClientOutbox
from relay.storage.node_disk import NodeDisk
from relay.wire import replies
from relay.wire.client import (
    BadRequest,
    ClaimFrame,
    FetchFrame,
    PublishFrame,
    QueueConfigFrame,
    QueueInfoFrame,
    Request,
    SettleFrame,
    SpanFrame,
    StatusFrame,
    StreamInfoFrame,
    decode_request,
)
from relay.wire.drain import holds_more

log = logging.getLogger("relay.node")
QueueRequestFrame = ClaimFrame | SettleFrame | QueueConfigFrame  # answered by the queues


class ClientPort:
    def __init__(
        self, ctx: zmq.Context[Any], config: ClusterConfig, port: int, metrics: NodeMetrics
    ) -> None:
        self.config = config
        self.grants = config.grants  # client key -> what it may do; empty: every key all
        self.metrics = metrics
        self.publishes_ok = metrics.publish_requests.labels("ok")  # found once, not per reply
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 200)
        self.sock.setsockopt(zmq.SNDHWM, QUEUED_MAX)  # per connection
        self.sock.setsockopt(zmq.RCVHWM, HWM_FRAMES)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.MAXMSGSIZE, config.clients.request_bytes_max)
        self.memory = config.memory
        self.limits = ClientLimits(config.clients, config.memory.requests)
        self.outbox = ClientOutbox(
            self.sock,
            self.limits,
            metrics.errors.labels("reply_undeliverable"),
            config.memory.outbox,
        )
        self.specs = {n.id: n for n in config.nodes}
        bounds = config.clients
        self.connections = ClientConnections(
            self.sock,
            port,
            bounds.client_connections_per_address_max,
            bounds.client_connections_max,
        )

    def close(self) -> None:
        self.connections.close()
        self.sock.close()

    # --- input --------------------------------------------------------------------------

    def drain(
        self, events: list[Event], core: NodeCore, disk: NodeDisk, queues: QueueService, now: Now
    ) -> None:
        taken = 0
        for i in range(DRAIN_FRAMES_MAX):
            if taken > DRAIN_BYTES_MAX or (i and not holds_more(self.sock)):
                return
            try:
                if self.grants:  # the frames, to read who sent them (the ZAP user id)
                    parts = self.sock.recv_multipart(zmq.NOBLOCK, copy=False)
                    frames, user = [p.bytes for p in parts], _user_of(parts[-1])
                else:
                    frames, user = self.sock.recv_multipart(zmq.NOBLOCK), ""
            except zmq.Again:
                return
            taken += sum(map(len, frames))
            client = frames[0]
            if len(frames) != 2:
                malformed = Rejected(errors.BAD_REQUEST, "expected one msgpack frame per request")
                self.answer(client, 0, malformed)
                continue
            try:
                request: Request = decode_request(frames[1])
            except BadRequest as exc:
                self.metrics.errors.labels("bad_request").inc()
                self.answer(client, exc.req_id, Rejected(errors.BAD_REQUEST, str(exc)))
                continue
            forbidden = self._forbidden(user, request)
            if forbidden is not None:
                self.metrics.errors.labels(errors.FORBIDDEN).inc()
                self.answer(client, request.req_id, forbidden)
                continue
            untyped = self._untyped(request) if isinstance(request, PublishFrame) else None
            if untyped is not None:
                self.metrics.errors.labels(errors.BAD_REQUEST).inc()
                self.answer(client, request.req_id, Rejected(errors.BAD_REQUEST, untyped))
                continue
            if isinstance(request, PublishFrame | FetchFrame | QueueRequestFrame):
                arrived = time.perf_counter_ns()
                refused = self.limits.admit(client, request.req_id, len(frames[1]), arrived)
                if refused is not None:
                    self.metrics.errors.labels(refused.code).inc()
                    self.answer(client, request.req_id, refused)
                    continue
            if isinstance(request, PublishFrame):
                q = request
                events.append(PublishRequested(client, q.req_id, q.stream, q.producer_id, q.items))
            elif isinstance(request, FetchFrame):
                f = request
                most = self.memory.fetch_bytes(len(self.connections.by_fd), QUEUED_MAX)
                events.append(
                    FetchRequested(
                        client,
                        f.req_id,
                        f.stream,
                        f.after_seq,
                        f.limit,
                        f.wait_ms,
                        most,
                        f.from_index,
                    )
                )
            elif isinstance(request, SpanFrame):
                s = request
                got = core.span(s.stream, s.after_seq, s.upto_seq, s.max_txs, s.parts)
                if isinstance(got, LogSpan):
                    got = disk.span(got, core.ring_entries)
                self.answer(client, s.req_id, got)
            elif isinstance(request, StatusFrame):
                status = disk.status(core.status(streams=not request.brief))
                self.send(client, replies.encode_status(request.req_id, status))
            elif isinstance(request, StreamInfoFrame):
                replicas = core.routing.replicas_of(request.stream)
                info = self.config.streams.describe(request.stream, replicas)
                self.send(client, replies.encode_stream_info(request.req_id, info))
            elif isinstance(request, ClaimFrame):
                c = request
                claim = ClaimRequest(c.stream, c.group, c.member, c.count, c.lease_ms, c.wait_ms)
                queues.request(client, c.req_id, claim, now)
            elif isinstance(request, SettleFrame):
                settle = SettleRequest(request.stream, request.group, request.member, request.items)
                queues.request(client, request.req_id, settle, now)
            elif isinstance(request, QueueInfoFrame):
                self._queue_info(client, request, core, queues)
            elif isinstance(request, QueueConfigFrame):
                r = request
                configure = ConfigureRequest(r.stream, r.group, r.settings, r.start_latest)
                queues.request(client, r.req_id, configure, now)

    def _queue_info(
        self, client: bytes, request: QueueInfoFrame, core: NodeCore, queues: QueueService
    ) -> None:
        """What this node folded of a work group so far (a redirect if it holds no copy)."""
        replicas = core.routing.replicas_of(request.stream)
        if core.node_id not in replicas:
            self.answer(client, request.req_id, reads.redirect(request.stream, replicas, set()))
            return
        try:
            state = queues.describe(request.stream, request.group)
        except ValueError as exc:
            self.answer(client, request.req_id, Rejected(errors.BAD_REQUEST, str(exc)))
            return
        info: dict[str, object] = dict(state.describe()) if state is not None else {}
        if state is not None and request.peek:
            rows = state.waiting.peek(request.peek)
            info["next"] = [[w.seq, w.priority, w.not_before, w.order_ms, w.key] for w in rows]
        self.send(client, replies.encode_queue_info(request.req_id, info))

    def _untyped(self, request: PublishFrame) -> str | None:
        """Why a message of a publish to a typed stream is not of its schema, or None: the
        whole request is refused, and nothing of it stored. A compacted stream's tombstone (a
        key and no payload) is of every type."""
        block = self.config.streams.block_of(request.stream) if self.config.streams.blocks else None
        if block is None or block.schema is None:
            return None
        compacted = block.storage.cleanup == "compact"
        for i, item in enumerate(request.items):
            if compacted and not item.payload and item.key is not None:
                continue
            problem = block.schema.problem(item.payload)
            if problem is not None:
                return f"message {i} is not of the stream's schema: {problem}"
        return None

    def _forbidden(self, user: str, request: Request) -> Rejected | None:
        """Why the client's ``[[client]]`` table refuses ``request``, or None."""
        grant = self.grants.get(user) if self.grants else None
        if grant is None or isinstance(request, StatusFrame):
            return None
        if isinstance(request, PublishFrame):
            if not grant.may_publish(request.stream):
                return Rejected(errors.FORBIDDEN, grant.refusal("publish to", request.stream))
        elif not grant.may_consume(request.stream):
            return Rejected(errors.FORBIDDEN, grant.refusal("read", request.stream))
        return None

    # --- output -------------------------------------------------------------------------

    def reply(self, reply: PublishReply) -> None:
        """A publish's answer: its results, or why it was not taken."""
        body = reply.body
        if isinstance(body, PublishResults):
            acked = list(map(type, body.results)).count(AckedResult)
            if acked == len(body.results):
                self.publishes_ok.inc()
            else:
                self.metrics.publish_requests.labels("error").inc()
            self.metrics.published_txs.inc(acked)
            arrived = self.limits.arrived_ns(reply.client, reply.req_id)
            if arrived is not None:  # admitted here (a work group's own publish is not)
                self.metrics.quorum_latency.observe((time.perf_counter_ns() - arrived) / 1e9)
            self.send(reply.client, replies.encode_acks(reply.req_id, body), reply.req_id)
        else:
            outcome = "redirect" if isinstance(body, Redirect) else body.code
            self.metrics.publish_requests.labels(outcome).inc()
            self.answer(reply.client, reply.req_id, body, admitted=True)

    def read_done(self, client: bytes, req_id: int, body: ReadResult | Redirect | Rejected) -> None:
        """A fetch's answer."""
        self.answer(client, req_id, body, admitted=True)

    def queue_reply(self, client: bytes, req_id: int, answer: QueueAnswer) -> None:
        """A work group member's answer: jobs claimed, settlements, or why not."""
        if isinstance(answer, ClaimAnswer):
            self.send(client, replies.encode_jobs(req_id, answer), req_id)
        elif isinstance(answer, SettleAnswer):
            self.send(client, replies.encode_settled(req_id, answer), req_id)
        elif isinstance(answer, InfoAnswer):
            self.send(client, replies.encode_queue_info(req_id, answer.info), req_id)
        else:
            self.answer(client, req_id, answer, admitted=True)

    def answer(
        self,
        client: bytes,
        req_id: int,
        body: ReadResult | SpanResult | Redirect | Rejected,
        admitted: bool = False,
    ) -> None:
        """A read's, a span's or a refusal's answer, encoded for the client; ``admitted``:
        it answers a request ``ClientLimits`` counts."""
        if isinstance(body, Redirect):
            self.metrics.redirects.inc()
            nodes = self._addresses(body.nodes)
            encoded = replies.encode_redirect(req_id, body.stream, nodes)
        elif isinstance(body, Rejected):
            nodes = self._addresses(body.try_nodes)
            encoded = replies.encode_error(req_id, body, nodes)
        elif isinstance(body, ReadResult):
            encoded = replies.encode_txs(req_id, body)
        else:
            encoded = replies.encode_span(req_id, body)
        self.send(client, encoded, req_id if admitted else None)

    def _addresses(self, nodes: tuple[int, ...]) -> list[replies.Address]:
        specs = self.specs
        return [
            (n, specs[n].host, specs[n].client_port, specs[n].public_key or "")
            for n in nodes
            if n in specs
        ]

    def send(self, client: bytes, body: bytes, admitted: int | None = None) -> None:
        """Hand an answer to the socket, or let it wait (``ClientOutbox``); ``admitted``: the
        id of the share's request it answers."""
        self.outbox.send(client, body, admitted, time.monotonic() * 1000)


def _user_of(frame: zmq.Frame) -> str:
    """Who sent ``frame``: its ZAP user id; "" for the node's own HTTP API, whose in-process
    connection has no handshake (it checks its clients' grants itself)."""
    try:
        return str(frame.get("User-Id"))
    except zmq.ZMQError:
        return ""
