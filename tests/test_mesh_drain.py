"""The mesh drain bound counts messages, not frames: a peer that packs its messages into
bundles still gets at most ``DRAIN_FRAMES_MAX`` of them into one loop turn. Real sockets."""

import time
import tomllib
from typing import Any

import zmq

from relay.config import parse
from relay.core.events import Event, MeshReceived
from relay.core.messages import StreamAck
from relay.runtime.faults import FaultHooks
from relay.runtime.local_cluster import free_ports
from relay.runtime.mesh_sockets import DRAIN_FRAMES_MAX, MeshSockets
from relay.runtime.metrics import NodeMetrics
from relay.runtime.templates import cluster_toml
from relay.wire import mesh


def test_a_turn_takes_at_most_the_bound_of_messages_however_they_are_bundled() -> None:
    raw: dict[str, Any] = tomllib.loads(cluster_toml(3).replace('[""]', "[]"))
    raw["cluster"]["security"] = "none"
    for node, port in zip(raw["node"], free_ports(len(raw["node"])), strict=True):
        node["mesh_port"] = port
    config = parse(raw)
    ctx = zmq.Context()
    peer = ctx.socket(zmq.PUB)
    peer.bind(config.node(2).mesh_address)
    sockets = MeshSockets(ctx, config, config.node(1), None)
    try:
        sockets.connect(config)
        acks = [StreamAck("s", 2, 1, 1, 1, 1, bytes(32), 1, ()) for _ in range(mesh.BUNDLE_MAX)]
        frames = mesh.frames(acks)
        assert len(frames) == 1  # one bundle of BUNDLE_MAX messages
        sent = 3 * DRAIN_FRAMES_MAX // mesh.BUNDLE_MAX  # frames holding 3x the bound
        sub = next(iter(sockets.peers))
        canary = ctx.socket(zmq.SUB)  # a second subscriber: when it has every frame, so has sub
        canary.setsockopt(zmq.SUBSCRIBE, b"")
        canary.connect(config.node(2).mesh_address)
        deadline = time.monotonic() + 10
        while not (sub.poll(50) and canary.poll(0)):  # both subscriptions reached the publisher
            assert time.monotonic() < deadline, "a SUB never connected"
            peer.send(frames[0])
        while canary.poll(0):
            canary.recv()
        for _ in range(sent):
            peer.send(frames[0])
        for _ in range(sent):
            assert canary.poll(10_000), "the frames never arrived"
            canary.recv()
        events: list[Event] = []
        sockets.drain({sub: zmq.POLLIN}, 0, FaultHooks(), NodeMetrics(1, "t"), events)
        assert DRAIN_FRAMES_MAX <= len(events) < DRAIN_FRAMES_MAX + mesh.BUNDLE_MAX
        assert all(isinstance(e, MeshReceived) for e in events)
    finally:
        ctx.destroy(linger=0)  # every socket, the canary too, even when an assertion failed
