"""A seeded network for the simulator: per-link FIFO with random delay, plus faults.

How this works: each directed link keeps the time its last message lands; a new message
lands at ``max(now + delay, last)`` so a link does not reorder (as a ZeroMQ TCP connection
does not), while messages on different links interleave freely. Faults change that: a cut
link loses everything, ``loss`` drops frames silently (as PUB/SUB does at a full queue or a
reconnect), ``duplicate`` delivers some twice and ``reorder`` lets some overtake.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from relay.core.messages import MeshMessage


@dataclass(slots=True)
class LinkFaults:
    delay_ms_max: int = 3
    loss_per_mille: int = 0
    duplicate_per_mille: int = 0
    reorder_per_mille: int = 0
    cut: set[tuple[int, int]] = field(default_factory=set)  # (src, dst) links that lose all


@dataclass(slots=True)
class SimNetwork:
    rng: random.Random
    faults: LinkFaults
    in_flight: list[tuple[int, int, int, int, MeshMessage]] = field(default_factory=list)
    link_last_ms: dict[tuple[int, int], int] = field(default_factory=dict)
    sent: int = 0
    dropped: int = 0
    _order: int = 0

    def send(self, now_ms: int, src: int, dst: int, message: MeshMessage) -> None:
        self.sent += 1
        f = self.faults
        if (src, dst) in f.cut or (
            f.loss_per_mille and self.rng.randrange(1000) < f.loss_per_mille
        ):
            self.dropped += 1
            return
        copies = (
            2 if f.duplicate_per_mille and self.rng.randrange(1000) < f.duplicate_per_mille else 1
        )
        for _ in range(copies):
            lands = now_ms + self.rng.randint(0, f.delay_ms_max)
            overtakes = f.reorder_per_mille and self.rng.randrange(1000) < f.reorder_per_mille
            if not overtakes:
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
            if (src, dst) not in self.faults.cut:
                out.append((src, dst, message))
        return out

    def forget(self, node: int) -> None:
        """Drop what was in flight to or from a node that died."""
        self.in_flight = [m for m in self.in_flight if node not in (m[2], m[3])]
        heapq.heapify(self.in_flight)
