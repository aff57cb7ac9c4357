"""A seeded network for the simulator: per-link FIFO with random delay.

How this works: each directed link keeps the time its last message lands; a new message
lands at ``max(now + delay, last)`` so a link never reorders (as a ZeroMQ TCP connection
does not), while messages on different links interleave freely. Loss, when enabled, drops a
message silently, as PUB/SUB does under a full queue or a reconnect.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from relay.core.messages import MeshMessage


@dataclass(frozen=True, slots=True)
class NetworkFaults:
    delay_ms_max: int = 3
    loss: float = 0.0


@dataclass(slots=True)
class SimNetwork:
    rng: random.Random
    faults: NetworkFaults
    in_flight: list[tuple[int, int, int, int, MeshMessage]] = field(default_factory=list)
    link_last_ms: dict[tuple[int, int], int] = field(default_factory=dict)
    sent: int = 0
    dropped: int = 0
    _order: int = 0

    def send(self, now_ms: int, src: int, dst: int, message: MeshMessage) -> None:
        self.sent += 1
        if self.faults.loss and self.rng.random() < self.faults.loss:
            self.dropped += 1
            return
        lands = now_ms + self.rng.randint(0, self.faults.delay_ms_max)
        lands = max(lands, self.link_last_ms.get((src, dst), 0))
        self.link_last_ms[(src, dst)] = lands
        self._order += 1
        heapq.heappush(self.in_flight, (lands, self._order, src, dst, message))

    def next_time(self) -> int | None:
        return self.in_flight[0][0] if self.in_flight else None

    def due(self, now_ms: int) -> list[tuple[int, int, MeshMessage]]:
        """Every (src, dst, message) that lands at or before ``now_ms``, in landing order."""
        out = []
        while self.in_flight and self.in_flight[0][0] <= now_ms:
            _, _, src, dst, message = heapq.heappop(self.in_flight)
            out.append((src, dst, message))
        return out

    def drop_links_of(self, node: int) -> None:
        """Forget what was in flight to or from a node that stopped."""
        self.in_flight = [m for m in self.in_flight if node not in (m[2], m[3])]
        heapq.heapify(self.in_flight)
