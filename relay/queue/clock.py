"""A work group's clock: the time a quorum of the job stream's replicas have reached.

How this works: every operation in the control stream carries the wall clock of the node that
wrote it (never more than the seq the node gave it, whose time its clock cannot be behind),
and the group's clock is the ``quorum``-th latest of the replicas' latest walls. A node whose
clock stepped ahead (or a hostile replica) moves only its own entry, so the clock runs ahead of
true time only when a quorum of replicas' clocks do, and then by no more than the least of
theirs; a clock that steps back moves nothing, since each entry only grows. Lease expiry and
not-before times are judged by this clock and nothing else. It moves when operations come in;
replicas that see a deadline pass by their own clocks write ticks.
"""

from __future__ import annotations

from relay.core.flake import seq_unix_ms


class QuorumClock:
    def __init__(self, replicas: tuple[int, ...], quorum: int) -> None:
        self.replicas = frozenset(replicas)
        self.quorum = quorum
        self.latest: dict[int, int] = {}  # replica -> the latest wall it wrote
        self.now_ms = 0  # 0 until a quorum of replicas wrote

    def hear(self, origin: int, wall_ms: int, op_seq: int) -> int:
        """Take an operation's wall clock into account; the clock's time after it."""
        if origin in self.replicas:
            wall = min(wall_ms, seq_unix_ms(op_seq))
            if wall > self.latest.get(origin, 0):
                self.latest[origin] = wall
                if len(self.latest) >= self.quorum:
                    ranked = sorted(self.latest.values(), reverse=True)
                    self.now_ms = max(self.now_ms, ranked[self.quorum - 1])
        return self.now_ms

    def written_by(self, origin: int) -> int:
        """The latest wall ``origin`` wrote (0: none)."""
        return self.latest.get(origin, 0)
