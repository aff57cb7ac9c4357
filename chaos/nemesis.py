"""Carries out a fault schedule on a local cluster: real signals and the nodes' admin hooks.

kill: SIGKILL, then a restart with empty memory at the end of the window. pause: SIGSTOP, then
SIGCONT. partition: ``block_from`` on each side (isolate one node, split off a minority, or one
way). loss: a fraction of incoming mesh frames dropped. clock: a step of the node's clock, or a
drift (the offset grows every 100 ms), set back to zero at the end. Every fault is logged with
the times it actually started and ended; ``heal_all`` undoes whatever is still on.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

from chaos.schedule import Fault
from relay.runtime.local_cluster import LocalCluster


class Nemesis:
    def __init__(
        self,
        cluster: LocalCluster,
        faults: list[Fault],
        clock: Callable[[], float],
        record: Callable[[dict[str, Any]], None],
    ) -> None:
        self.cluster = cluster
        self.faults = faults
        self.clock = clock
        self.record = record
        self.stop = threading.Event()
        self.active: list[Fault] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self.stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def heal_all(self) -> None:
        for fault in list(self.active):
            self._end(fault)

    # --- the schedule -------------------------------------------------------------------

    def _run(self) -> None:
        for fault in self.faults:
            if not self._sleep_until(fault.start_s):
                return
            started = self.clock()
            self._begin(fault)
            drift = fault.detail.get("drift_ms_per_s")
            while self.clock() < fault.end_s:
                if drift:
                    offset = int(drift * (self.clock() - started))
                    self._admin(fault.nodes[0], clock_offset_ms=offset)
                if self.stop.wait(0.1):
                    return
            self._end(fault)

    def _sleep_until(self, t: float) -> bool:
        while self.clock() < t:
            if self.stop.wait(min(0.1, t - self.clock())):
                return False
        return True

    def _begin(self, fault: Fault) -> None:
        t = self.clock()
        self.active.append(fault)
        c = self.cluster
        if fault.kind == "kill":
            for n in fault.nodes:
                c.stop(n, signal.SIGKILL)
        elif fault.kind == "pause":
            for n in fault.nodes:
                c.send_signal(n, signal.SIGSTOP)
        elif fault.kind == "partition":
            for n, blocked in self._cuts(fault).items():
                self._admin(n, block_from=sorted(blocked))
        elif fault.kind == "loss":
            for n in fault.nodes:
                self._admin(n, loss_in=fault.detail["fraction"])
        elif fault.kind == "clock" and "step_ms" in fault.detail:
            self._admin(fault.nodes[0], clock_offset_ms=fault.detail["step_ms"])
        self.record({"event": "start", "t": t, **fault.to_json()})

    def _end(self, fault: Fault) -> None:
        if fault not in self.active:
            return
        self.active.remove(fault)
        c = self.cluster
        if fault.kind == "kill":
            for n in fault.nodes:
                c.start(n)
        elif fault.kind == "pause":
            for n in fault.nodes:
                c.send_signal(n, signal.SIGCONT)
        elif fault.kind == "partition":
            for n in self._cuts(fault):
                self._admin(n, block_from=[])
        elif fault.kind == "loss":
            for n in fault.nodes:
                self._admin(n, loss_in=0.0)
        elif fault.kind == "clock":
            self._admin(fault.nodes[0], clock_offset_ms=0)
        self.record({"event": "end", "t": self.clock(), **fault.to_json()})

    def _cuts(self, fault: Fault) -> dict[int, set[int]]:
        """Which nodes drop frames from which, for a partition."""
        everyone = {spec.id for spec in self.cluster.config.nodes}
        if fault.detail["shape"] == "one-way":
            return {fault.nodes[0]: {fault.detail["from"]}}
        side = set(fault.nodes)
        rest = everyone - side
        return {n: (rest if n in side else side) for n in everyone}

    def _admin(self, node: int, **settings: Any) -> None:
        try:
            self.cluster.fault(node, **settings)
        except (TimeoutError, ValueError) as exc:  # a paused or dead node cannot answer
            self.errors.append(f"node {node} {settings}: {exc}")
