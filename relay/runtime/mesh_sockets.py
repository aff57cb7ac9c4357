"""The node's mesh sockets: one XPUB it broadcasts on, and one SUB per peer.

Each SUB socket connects to one peer's XPUB. With CURVE it completes a handshake only with the
holder of that peer's secret key, so every frame it delivers comes from that peer: a frame that
claims another sender is that peer's protocol fault, counted and dropped. The XPUB admits
(through the ZAP handler) only the configured nodes, so no one else receives a payload, and it
applies a subscription by hand (``ZMQ_XPUB_MANUAL``) only if the subscriber, known by the user
id the ZAP handler gave its key, asks for a topic prefix its own stream patterns give
(``topic_prefixes``): a node receives only the streams it replicates, even one whose key an
attacker holds and which subscribes to everything.

libzmq pairs each subscription message with the connection that sent it in two queues, and a
message that is not a subscription (which a node's SUB never sends: its peer connected an XSUB
and wrote something else) enters one queue and not the other, so every later subscription
would be applied to the connection before it. Such a sender is banned (``subscriptions``
returns its user id: the ZAP handler admits its key no more) and the XPUB is made anew on the
same port (``rebuild``): every peer's SUB reconnects and subscribes again, and what was
broadcast meanwhile is repaired as after any lost frame.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from relay.auth.keys import KeyPair
from relay.auth.sockets import MESH_DOMAIN, connect_to, serve
from relay.config import ClusterConfig, NodeSpec
from relay.core.events import Event, MeshReceived
from relay.core.messages import MeshMessage, sender_of
from relay.runtime.faults import FaultHooks
from relay.runtime.metrics import NodeMetrics
from relay.runtime.throttle import Throttle
from relay.wire import mesh
from relay.wire.drain import holds_more

log = logging.getLogger("relay.node")

DRAIN_FRAMES_MAX = 2000  # messages taken from one socket per loop turn
DRAIN_BYTES_MAX = 8 << 20  # and their bytes: a turn with large payloads stays short, so
# ticks and heartbeats keep their pace (a turn of many 16 MiB frames would get peers cut)
HWM_FRAMES = 200_000
REBIND_TRIES, REBIND_WAIT_S = 100, 0.01  # a rebuilt XPUB binds its address again within 1 s


class MeshSockets:
    def __init__(
        self, ctx: zmq.Context[Any], config: ClusterConfig, spec: NodeSpec, pair: KeyPair | None
    ) -> None:
        self.ctx, self.pair = ctx, pair
        self.pub = self._xpub()
        # a node's user id (ZAP) -> the subscriptions it may make; None: no CURVE, no ids
        self.may_subscribe: dict[str, frozenset[bytes]] | None = (
            {str(n.id): frozenset(mesh.topic_prefixes(n.streams)) for n in config.nodes}
            if pair is not None
            else None
        )
        self.peers: dict[zmq.Socket[Any], int] = {}
        self.behind: set[int] = set()  # peers whose frames a drain left unread, until a tick
        for other in config.nodes:
            if other.id == spec.id:
                continue
            sub = ctx.socket(zmq.SUB)
            _tune(sub)
            sub.setsockopt(zmq.MAXMSGSIZE, mesh.FRAME_BYTES_MAX)
            if pair is not None and other.public_key is not None:
                connect_to(sub, other.public_key, pair)
            for prefix in mesh.topic_prefixes(spec.streams):
                sub.setsockopt(zmq.SUBSCRIBE, prefix)
            self.peers[sub] = other.id
        self.fault_log = Throttle()  # a warning a second at most per faulty peer

    def _xpub(self) -> zmq.Socket[Any]:
        pub: zmq.Socket[Any] = self.ctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.XPUB_MANUAL, 1)
        _tune(pub)
        if self.pair is not None:
            serve(pub, self.pair, MESH_DOMAIN)
        return pub

    def rebuild(self, poller: zmq.Poller) -> None:
        """Replace the XPUB by a new one on the same address (its connections go; the
        peers' SUBs reconnect). ``zmq.ZMQError`` if the address cannot be bound again."""
        endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        poller.unregister(self.pub)
        self.pub.close(linger=0)
        self.pub = self._xpub()
        for attempt in range(REBIND_TRIES):
            try:
                self.pub.bind(endpoint)
                break
            except zmq.ZMQError:  # the old listener is closed by libzmq's I/O thread
                if attempt == REBIND_TRIES - 1:
                    raise
                time.sleep(REBIND_WAIT_S)
        poller.register(self.pub, zmq.POLLIN)

    def connect(self, config: ClusterConfig) -> None:
        """Connect every SUB to its peer (after the PUB is bound)."""
        for sub, peer in self.peers.items():
            sub.connect(config.node(peer).mesh_address)

    def register(self, poller: zmq.Poller) -> None:
        poller.register(self.pub, zmq.POLLIN)  # subscriptions
        for sub in self.peers:
            poller.register(sub, zmq.POLLIN)

    def subscriptions(self, elapsed_ms: int, metrics: NodeMetrics) -> str | None:
        """Apply the subscriptions peers asked for that their patterns allow; count and log
        the others (a node asking for streams it does not replicate). The user id of a peer
        that sent something else than a subscription, if one did: the caller bans it and
        rebuilds the XPUB, whose pairing of subscriptions and connections it shifted."""
        while holds_more(self.pub):
            frame = self.pub.recv(zmq.NOBLOCK, copy=False)
            body = frame.bytes
            sender = _user_of(frame)  # None: libzmq's own notice (a connection ended)
            if self.may_subscribe is not None and sender is not None and body[:1] != b"\x01":
                offender = sender
                metrics.errors.labels("mesh_not_a_subscription").inc()
                log.warning(
                    "peer_fault: node %s sent its mesh publisher something else than a "
                    "subscription; its key is refused until a restart",
                    offender,
                )
                return offender
            if not body or body[0] not in (0, 1):
                continue  # not a subscription message
            topic = body[1:]
            if self.may_subscribe is not None and body[0] == 1:
                user = str(sender)
                if topic not in self.may_subscribe.get(user, frozenset()):
                    metrics.errors.labels("mesh_subscription_refused").inc()
                    if self.fault_log.allow(("subscription", user), elapsed_ms):
                        log.warning(
                            "peer_fault: node %s subscribed to %r, outside its streams; refused",
                            user,
                            topic.decode(errors="replace"),
                        )
                    continue
            self.pub.setsockopt(zmq.SUBSCRIBE if body[0] == 1 else zmq.UNSUBSCRIBE, topic)
        return None

    def send(self, messages: list[MeshMessage]) -> None:
        """Broadcast ``messages`` in order (a run about one stream in one frame)."""
        for frame in mesh.frames(messages):
            # pyzmq copies a frame under 64 KiB anyway; a larger one goes to libzmq without
            # a copy (copying a 500 KiB bundle cost ~180 us, mostly faulting in fresh pages),
            # through a view, which keeps the bytearray from being resized while libzmq reads
            self.pub.send(memoryview(frame), copy=False)

    def drain(
        self,
        ready: dict[Any, int],
        elapsed_ms: int,
        hooks: FaultHooks,
        metrics: NodeMetrics,
        events: list[Event],
    ) -> None:
        """What every ready peer sent, decoded and checked, into ``events``."""
        for sub, peer in self.peers.items():
            if sub in ready:
                self._drain_one(sub, peer, elapsed_ms, hooks, metrics, events)

    def _drain_one(
        self,
        sub: zmq.Socket[Any],
        peer: int,
        elapsed_ms: int,
        hooks: FaultHooks,
        metrics: NodeMetrics,
        events: list[Event],
    ) -> None:
        taken = count = messages = 0
        try:  # a bundle's messages count toward the bound one by one
            while messages < DRAIN_FRAMES_MAX and taken <= DRAIN_BYTES_MAX:
                frame = sub.recv(zmq.NOBLOCK)
                taken += len(frame)
                count += 1
                messages += self._take(frame, peer, elapsed_ms, hooks, metrics, events)
                if not holds_more(sub):
                    break
            else:
                self.behind.add(peer)  # the bound, not the socket, ended this drain
        except zmq.Again:
            pass
        metrics.frames_in.inc(count)

    def _take(
        self,
        frame: bytes,
        peer: int,
        elapsed_ms: int,
        hooks: FaultHooks,
        metrics: NodeMetrics,
        events: list[Event],
    ) -> int:
        """One frame from ``peer``: decoded, checked and admitted into ``events``; a frame
        with one message claiming another sender counts for none of them. How many messages
        it held (1 if none could be read). Each part of a message of several parts (which a
        node never sends) is read as a frame of its own."""
        try:
            messages = mesh.decode_frame(frame)
        except mesh.MalformedFrame as exc:
            self.fault(peer, elapsed_ms, metrics, str(exc), "malformed_mesh_frame")
            return 1
        for message in messages:
            claimed = sender_of(message)
            if claimed != peer:
                why = f"a {type(message).__name__} claiming to come from node {claimed}"
                self.fault(peer, elapsed_ms, metrics, why)
                return len(messages)
        for message in messages:
            admitted = hooks.admit(elapsed_ms, message)
            if admitted is not None:
                events.append(MeshReceived(admitted))
        return len(messages)

    def fault(
        self,
        peer: int,
        elapsed_ms: int,
        metrics: NodeMetrics,
        why: str,
        kind: str = "peer_fault",
    ) -> None:
        """Count a frame ``peer`` should not have sent (a protocol error by that peer); log
        it, at most once a second."""
        metrics.errors.labels(kind).inc()
        metrics.peer_faults.labels(str(peer)).inc()
        if self.fault_log.allow(peer, elapsed_ms):
            log.warning("%s: node %d: %s", kind, peer, why)

    def close(self) -> None:
        self.pub.close()
        for sub in self.peers:
            sub.close()


def _user_of(frame: zmq.Frame) -> str | None:
    """The ZAP user id of a frame's connection; None for a frame without one (without CURVE,
    or a notice libzmq made itself)."""
    try:
        return str(frame.get("User-Id"))
    except zmq.ZMQError:
        return None


def _tune(sock: zmq.Socket[Any]) -> None:
    sock.setsockopt(zmq.LINGER, 200)
    sock.setsockopt(zmq.SNDHWM, HWM_FRAMES)
    sock.setsockopt(zmq.RCVHWM, HWM_FRAMES)
