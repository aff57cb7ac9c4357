"""Carrying out a run's faults: each fault of the plan (``relay/sim/faults.py``) and each
window of disk errors started and healed at its instant, on the nodes' processes, links,
clocks and disks.

The injector owns what the faults leave behind: each node's wall clock (skewed, stepped,
drifting), which nodes are paused and what landed for them meanwhile, which are down until
their crash heals, and which failed to start (their disk refused) and are started again later,
as a supervisor would. It acts on the network through its ``LinkFaults`` and on the cluster
only through ``FaultTarget``.
"""

from __future__ import annotations

import heapq
from typing import Protocol

from relay.core.events import Event, Tick
from relay.sim.faults import CrashKind, Fault, FaultKind
from relay.sim.files import SimFiles
from relay.sim.network import LinkFaults
from relay.sim.plan import DiskErrors, SimPlan

RESTART_MS = 100  # a node that failed to start (its disk refused) is started again this later


class FaultTarget(Protocol):
    """The cluster as the injector sees it: the nodes' processes and machines, and the trace."""

    def node_running(self, n: int) -> bool:
        """Whether node ``n``'s process is up."""
        ...

    def start_node(self, n: int) -> bool:
        """Start node ``n`` from its disk; False when its failing disk refused."""
        ...

    def stop_node(self, n: int, graceful: bool) -> None:
        """End node ``n``'s running process: shut down cleanly, or killed."""
        ...

    def resume_node(self, n: int, held: list[Event]) -> None:
        """Node ``n``'s running process continues: a turn with what landed while paused."""
        ...

    def disk(self, n: int) -> SimFiles:
        """Node ``n``'s machine's files."""
        ...

    def replace_disk(self, n: int) -> SimFiles:
        """Give node ``n``'s machine an empty disk; the new one."""
        ...

    def note(self, line: str) -> None:
        """Add ``line`` to the run's trace, at the current instant."""
        ...


class FaultInjector:
    def __init__(
        self,
        plan: SimPlan,
        ids: list[int],
        links: LinkFaults,
        target: FaultTarget,
        start_ms: int,
    ) -> None:
        """``start_ms``: the instant the plan's windows count from."""
        self.ids = ids
        self.links = links
        self.target = target
        self.offsets: dict[int, int] = dict(zip(ids, plan.skews_ms, strict=True))
        self.drift: dict[int, tuple[int, int]] = {}  # node -> (per mille, since ms)
        self.paused: set[int] = set()
        self.backlog: dict[int, list[Event]] = {}  # what landed for a paused node
        self.down_by: dict[int, Fault] = {}  # node -> the crash that took it down
        self.restart_at: dict[int, int] = {}  # node -> when a start that failed is tried again
        self._actions: list[tuple[int, int, bool, Fault]] = []  # (at, order, is_start, fault)
        for i, fault in enumerate(plan.faults):
            heapq.heappush(self._actions, (start_ms + fault.start_ms, 2 * i, True, fault))
            heapq.heappush(self._actions, (start_ms + fault.end_ms, 2 * i + 1, False, fault))
        self._disk_errors = sorted(  # (at, order, window, failing from then on)
            (start_ms + (w.start_ms if on else w.end_ms), 2 * i + (not on), w, on)
            for i, w in enumerate(plan.disk_errors)
            for on in (True, False)
        )

    # --- what the cluster asks ----------------------------------------------------------

    def wall_ms(self, n: int, now_ms: int) -> int:
        """Node ``n``'s wall clock: skewed, stepped and drifting, never the same as another's."""
        rate, since = self.drift.get(n, (0, now_ms))
        return now_ms + self.offsets[n] + (now_ms - since) * rate // 1000

    def is_paused(self, n: int) -> bool:
        return n in self.paused

    def hold(self, n: int, events: list[Event]) -> None:
        """Keep what landed for paused node ``n`` until it resumes (it misses its ticks)."""
        self.backlog.setdefault(n, []).extend(e for e in events if not isinstance(e, Tick))

    def settled(self) -> bool:
        """No node paused, none waiting to be started again."""
        return not self.paused and not self.restart_at

    def next_time(self) -> int | None:
        """When the next fault starts or heals, a disk window opens or closes, or a node is
        started again."""
        times = (
            self._actions[0][0] if self._actions else None,
            self._disk_errors[0][0] if self._disk_errors else None,
            min(self.restart_at.values(), default=None),
        )
        return min((t for t in times if t is not None), default=None)

    def start(self, n: int, now_ms: int) -> None:
        """Start node ``n``; if its disk refuses, again ``RESTART_MS`` later."""
        if not self.target.start_node(n):
            self.restart_at[n] = now_ms + RESTART_MS

    def advance(self, now_ms: int) -> None:
        """Carry out every fault start and heal, disk window and restart due by ``now_ms``."""
        while self._actions and self._actions[0][0] <= now_ms:
            _, _, is_start, fault = heapq.heappop(self._actions)
            self._fault(fault, is_start, now_ms)
        while self._disk_errors and self._disk_errors[0][0] <= now_ms:
            _, _, window, on = self._disk_errors.pop(0)
            self._disk_failing(window, on)
        for n in [n for n, at in self.restart_at.items() if at <= now_ms]:
            del self.restart_at[n]
            if n not in self.down_by:
                self.start(n, now_ms)

    # --- carrying out -------------------------------------------------------------------

    def _fault(self, fault: Fault, start: bool, now_ms: int) -> None:
        self.target.note(f"{'start' if start else 'heal'} {fault.describe()}")
        kind, f = fault.kind, self.links
        if kind is FaultKind.STOP:
            for n in fault.nodes:
                self.down_by.pop(n, None)
                self.restart_at.pop(n, None)
                self._kill(n, graceful=fault.amount == 1)
        elif kind is FaultKind.CRASH:
            for n in fault.nodes:
                if start and (self.target.node_running(n) or n in self.restart_at):
                    self._kill(n, graceful=False)
                    self.restart_at.pop(n, None)  # down until the crash heals
                    self.down_by[n] = fault
                    self._crash_disk(n, fault.amount)
                elif not start and self.down_by.get(n) is fault:
                    del self.down_by[n]
                    self.start(n, now_ms)
        elif kind is FaultKind.ISOLATE:
            links = {(a, b) for a in fault.nodes for b in self.ids if a != b}
            links |= {(b, a) for a, b in links}
            f.cut = f.cut | links if start else f.cut - links
        elif kind is FaultKind.ONE_WAY:
            link = {(fault.nodes[0], fault.nodes[1])}
            f.cut = f.cut | link if start else f.cut - link
        elif kind is FaultKind.PAUSE:
            for n in fault.nodes:
                if start:
                    self.paused.add(n)
                elif n in self.paused:
                    self.paused.discard(n)
                    if self.target.node_running(n):
                        self.target.resume_node(n, self.backlog.pop(n, []))
        elif kind is FaultKind.CLOCK_STEP and start:
            self.offsets[fault.nodes[0]] += fault.amount
        elif kind is FaultKind.DRIFT:
            n = fault.nodes[0]
            if start:
                self.drift[n] = (fault.amount, now_ms)
            else:  # keep what drifted, stop drifting
                self.offsets[n] = self.wall_ms(n, now_ms) - now_ms
                self.drift.pop(n, None)
        elif kind is FaultKind.LOSS:
            f.loss_per_mille = fault.amount if start else 0
        elif kind is FaultKind.DUPLICATE:
            f.duplicate_per_mille = fault.amount if start else 0
        elif kind is FaultKind.REORDER:
            f.reorder_per_mille = fault.amount if start else 0

    def _disk_failing(self, window: DiskErrors, on: bool) -> None:
        self.target.note(f"{'start' if on else 'heal'} {window.describe()}")
        files = self.target.disk(window.node)
        files.write_errors = window.writes if on else 0.0
        files.sync_errors = window.syncs if on else 0.0

    def _crash_disk(self, n: int, kind: int) -> None:
        if kind == CrashKind.NEW_DISK:  # a replaced machine: no log, no memory of its epochs
            failing = self.target.disk(n)
            fresh = self.target.replace_disk(n)
            fresh.write_errors = failing.write_errors
            fresh.sync_errors = failing.sync_errors
        else:
            self.target.disk(n).crash(power_loss=kind == CrashKind.POWER)

    def _kill(self, n: int, graceful: bool) -> None:
        if not self.target.node_running(n):
            return
        self.target.stop_node(n, graceful)
        self.paused.discard(n)
        self.backlog.pop(n, None)
