"""The node's side of the shell's ports: the mesh sockets (with the fault hooks and the sent
counters) and what the node reports about itself (gauges, event counters, the log)."""

from __future__ import annotations

import logging

from relay.core.events import Notice, Verified
from relay.core.messages import MeshMessage
from relay.core.node import NodeCore
from relay.runtime.faults import FaultHooks
from relay.runtime.gauges import Gauges
from relay.runtime.mesh_sockets import MeshSockets
from relay.runtime.metrics import NodeMetrics

log = logging.getLogger("relay.node")


class MeshOut:
    def __init__(
        self, mesh: MeshSockets, hooks: FaultHooks, metrics: NodeMetrics, core: NodeCore
    ) -> None:
        self.mesh = mesh
        self.hooks = hooks
        self.metrics = metrics
        self.core = core

    def send(self, messages: list[MeshMessage]) -> None:
        kept = [m for m in messages if self.hooks.keep_outgoing()]
        for message in kept:
            self.metrics.sent(message)
        self.mesh.send(kept)

    def fault(self, peer: int, text: str) -> None:
        self.mesh.fault(peer, self.core.elapsed_ms, self.metrics, text)


class NodeReporter:
    def __init__(self, gauges: Gauges, metrics: NodeMetrics, core: NodeCore) -> None:
        self.gauges = gauges
        self.metrics = metrics
        self.core = core

    def verified(self, effect: Verified) -> None:
        self.gauges.verified(self.core, effect)

    def notice(self, effect: Notice) -> None:
        self.metrics.events.labels(effect.kind).inc()
        log.info("%s: %s", effect.kind, effect.text)
