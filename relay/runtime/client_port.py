"""The client port: the ROUTER socket producers and consumers talk to, its bounds, its answers.

How this works: each loop turn ``drain`` reads at most ``DRAIN_FRAMES_MAX`` requests, answers
what is malformed or over a connection's share at once, admits each publish and fetch
(``ClientLimits``) and turns it into an event for the core; spans and status are answered on
the spot from the core's state. ``reply`` and ``answer`` encode what the core decided. The
socket bounds what one connection costs: a request's size (``ZMQ_MAXMSGSIZE``), the answers
queued for it (``ZMQ_SNDHWM``), and the connections it holds (``ClientConnections``).

An answer that finds its connection's queue full waits in the node, and so does every later
one for that connection (answers stay in order): the queue gives room back only in steps of
half its size, when libzmq's I/O thread has moved what it held, so one turn answering dozens
of a producer's requests at once (all verified by the same ack) can overflow it while the
client reads everything. A waiting answer's request still counts against the connection's
share (``ClientLimits``) until the answer is handed over; each turn ``resend`` hands over what
fits now, and the loop turns again within ``RESEND_MS`` while any wait. What a connection that
does not read can make the node hold stays bounded: past ``WAITING_BYTES_MAX`` of waiting
answers, or once the oldest waited ``WAIT_MS``, its answers are dropped and counted
(``reply_undeliverable``), as is an answer for a connection that went away.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import zmq

from relay import errors
from relay.config import ClusterConfig
from relay.core.events import Acked as AckedResult
from relay.core.events import (
    Event,
    FetchRequested,
    LogSpan,
    PublishRequested,
    PublishResults,
    ReadResult,
    Redirect,
    Rejected,
    Reply,
    SpanResult,
)
from relay.core.node import NodeCore
from relay.runtime.client_limits import ClientLimits
from relay.runtime.connections import ClientConnections
from relay.runtime.disk import NodeDisk
from relay.runtime.mesh_sockets import DRAIN_BYTES_MAX, DRAIN_FRAMES_MAX, HWM_FRAMES
from relay.runtime.metrics import NodeMetrics
from relay.wire import replies
from relay.wire.client import (
    BadRequest,
    FetchFrame,
    PublishFrame,
    Request,
    SpanFrame,
    StatusFrame,
    decode_request,
)
from relay.wire.drain import holds_more

log = logging.getLogger("relay.node")

# answers queued for one connection that does not read them: with a fetch answer at most
# reads.FETCH_BYTES_MAX (one larger tx aside), about 64 MiB per connection
REPLIES_QUEUED_MAX = 64
WAITING_BYTES_MAX = 16 << 20  # answers waiting for room, per connection
WAIT_MS = 5_000  # the longest an answer waits (a producer retries after 3 s)
RESEND_MS = 1  # how soon the loop turns again while answers wait

Waiting = deque[tuple[bytes, int | None, float]]  # (answer, admitted request id, since)


class ClientPort:
    def __init__(
        self, ctx: zmq.Context[Any], config: ClusterConfig, port: int, metrics: NodeMetrics
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.publishes_ok = metrics.publish_requests.labels("ok")  # found once, not per reply
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 200)
        self.sock.setsockopt(zmq.SNDHWM, REPLIES_QUEUED_MAX)  # per connection
        self.sock.setsockopt(zmq.RCVHWM, HWM_FRAMES)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.MAXMSGSIZE, config.clients.request_bytes_max)
        self.limits = ClientLimits(config.clients)
        self.waiting: dict[bytes, Waiting] = {}  # connection -> its answers waiting for room
        self.waiting_bytes: dict[bytes, int] = {}
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

    def drain(self, events: list[Event], core: NodeCore, disk: NodeDisk) -> None:
        taken = 0
        for i in range(DRAIN_FRAMES_MAX):
            if taken > DRAIN_BYTES_MAX or (i and not holds_more(self.sock)):
                return
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
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
            if isinstance(request, PublishFrame | FetchFrame):
                refused = self.limits.admit(client, request.req_id, len(frames[1]))
                if refused is not None:
                    self.metrics.errors.labels(refused.code).inc()
                    self.answer(client, request.req_id, refused)
                    continue
            if isinstance(request, PublishFrame):
                q = request
                events.append(PublishRequested(client, q.req_id, q.stream, q.producer_id, q.items))
            elif isinstance(request, FetchFrame):
                f = request
                events.append(
                    FetchRequested(client, f.req_id, f.stream, f.after_seq, f.limit, f.wait_ms)
                )
            elif isinstance(request, SpanFrame):
                s = request
                got = core.span(s.stream, s.after_seq, s.upto_seq, s.max_txs, s.parts)
                if isinstance(got, LogSpan):
                    got = disk.span(got, core.held)
                self.answer(client, s.req_id, got)
            elif isinstance(request, StatusFrame):
                self.send(client, replies.encode_status(request.req_id, disk.status(core.status())))

    # --- output -------------------------------------------------------------------------

    def reply(self, reply: Reply) -> None:
        """A publish's answer: its results, or why it was not taken."""
        body = reply.body
        if isinstance(body, PublishResults):
            acked = list(map(type, body.results)).count(AckedResult)
            if acked == len(body.results):
                self.publishes_ok.inc()
            else:
                self.metrics.publish_requests.labels("error").inc()
            self.metrics.published_txs.inc(acked)
            self.metrics.quorum_latency.observe(reply.latency_ms / 1000)
            self.send(reply.client, replies.encode_acks(reply.req_id, body), reply.req_id)
        else:
            outcome = "redirect" if isinstance(body, Redirect) else body.code
            self.metrics.publish_requests.labels(outcome).inc()
            self.answer(reply.client, reply.req_id, body, admitted=True)

    def read_done(self, client: bytes, req_id: int, body: ReadResult | Redirect | Rejected) -> None:
        """A fetch's answer."""
        self.answer(client, req_id, body, admitted=True)

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
        """Hand an answer to the socket, or let it wait for room behind the connection's
        waiting answers; ``admitted``: the id of the counted request it answers, which stops
        counting once the answer is handed over (or dropped)."""
        if client not in self.waiting and self._hand_over(client, body, admitted):
            return
        held = self.waiting_bytes.get(client, 0) + len(body)
        if held > WAITING_BYTES_MAX:
            self._drop(client, admitted, f"{held} bytes of answers wait for it")
            return
        self.waiting.setdefault(client, deque()).append((body, admitted, time.monotonic()))
        self.waiting_bytes[client] = held

    def resend(self) -> None:
        """Hand over, in order, the waiting answers that fit now; drop those of a connection
        whose oldest waited ``WAIT_MS``."""
        now = time.monotonic()
        for client, waiting in list(self.waiting.items()):
            if (now - waiting[0][2]) * 1000 > WAIT_MS:
                for _, admitted, _ in waiting:
                    self._drop(client, admitted, f"its answers waited {WAIT_MS} ms")
                self._forget(client)
                continue
            while waiting and self._hand_over(client, waiting[0][0], waiting[0][1]):
                self.waiting_bytes[client] -= len(waiting.popleft()[0])
            if not waiting:
                self._forget(client)

    def _hand_over(self, client: bytes, body: bytes, admitted: int | None) -> bool:
        """Send an answer; False if the connection's queue is full (it must wait)."""
        try:
            # a large reply (a fetch's txs) without a copy, as the mesh's bundles
            self.sock.send_multipart((client, body), zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:  # the client went away
            self._drop(client, admitted, str(exc))
            return True
        if admitted is not None:
            self.limits.done(client, admitted)
        return True

    def _drop(self, client: bytes, admitted: int | None, why: str) -> None:
        self.metrics.errors.labels("reply_undeliverable").inc()
        log.debug("could not answer a client: %s", why)
        if admitted is not None:
            self.limits.done(client, admitted)

    def _forget(self, client: bytes) -> None:
        del self.waiting[client]
        del self.waiting_bytes[client]
