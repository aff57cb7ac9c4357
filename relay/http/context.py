"""What every handler of a node's HTTP API shares: the node's link, the gate, the bounds, the
metrics. It lives in the aiohttp app under ``CONTEXT``."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from relay.auth.keys import KeyPair
from relay.config import ClusterConfig
from relay.http.access import Gate, StreamSlots
from relay.http.link import NodeLink
from relay.http.metrics import HttpMetrics
from relay.http.replies import Answers

ASK_S = 5.0  # a request the node answers at once (a fetch that does not wait, a status)


@dataclass(slots=True)
class HttpContext:
    config: ClusterConfig
    node_id: int
    pair: KeyPair | None  # the node's own, to ask the other nodes for their status
    link: NodeLink
    metrics: HttpMetrics
    gate: Gate
    answers: Answers
    slots: StreamSlots
    chaos_dirs: tuple[Path, ...]  # where chaos reports are, for the console's picture
    producer_id: str = field(default_factory=lambda: f"http-{uuid.uuid4().hex}")
    msg_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    active: int = 0  # requests being served

    @property
    def publish_s(self) -> float:
        """How long a publish may wait for its answer: the node's own timeout, and a margin."""
        return self.config.params.publish_timeout_ms / 1000 + ASK_S

    @property
    def origins(self) -> frozenset[str]:
        """The nodes' own origins, whose pages may call this API from a browser."""
        return frozenset(n.http_address for n in self.config.nodes if n.http_address)

    @property
    def write_s(self) -> float:
        return self.config.http.http_write_ms_max / 1000


CONTEXT = web.AppKey("relay", HttpContext)
