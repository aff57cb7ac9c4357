"""Carries out a fault schedule on a local cluster: real signals and the nodes' admin hooks.

kill: SIGKILL, then a restart with empty memory at the end of the window. pause: SIGSTOP, then
SIGCONT. partition: ``block_from`` on each side (isolate one node, split off a minority, or one
way). loss: a fraction of incoming mesh frames dropped. clock: a step of the node's clock, or a
drift (the offset grows every 100 ms), set back to zero at the end. crash-all: every node
SIGKILLed at once (all the signals sent before any process is waited for), all restarted from
their logs at the end. corrupt: SIGKILL one node, XOR one byte in the record area of one of its
sealed segments, restart it at the end (it must find the bad record, cut its log there and
fetch the rest from its peers); which file and byte is chosen when the fault starts, by an rng
seeded from the fault alone, and logged in its detail. Every fault is logged with the times it
actually started and ended; ``heal_all`` undoes whatever is still on.

On a namespaced cluster (``chaos run --net netns``) partitions and loss are the kernel's:
nftables rules in the receiving node's namespace drop the packets (``LocalCluster.net_faults``),
so the nodes' sockets, TCP and ZeroMQ see a real network fault; the other kinds stay as above.
"""

from __future__ import annotations

import json
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from chaos.schedule import Fault
from relay.runtime.local_cluster import LocalCluster
from relay.storage.records import read_frame
from relay.storage.segment import parse_name


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
        # per node, on a namespaced cluster: the nodes its kernel drops packets from, and loss
        self.blocked: dict[int, set[int]] = {}
        self.loss: dict[int, float] = {}
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
            fault = self._begin(fault)  # as carried out (a corrupt's detail names the byte)
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

    def _begin(self, fault: Fault) -> Fault:
        t = self.clock()
        c = self.cluster
        if fault.kind == "kill":
            for n in fault.nodes:
                c.stop(n, signal.SIGKILL)
        elif fault.kind == "crash-all":
            for n in fault.nodes:  # every signal first: the nodes die as one
                c.send_signal(n, signal.SIGKILL)
            for n in fault.nodes:
                c.stop(n, signal.SIGKILL)  # only waits for the process now
        elif fault.kind == "corrupt":
            c.stop(fault.nodes[0], signal.SIGKILL)  # its files hold still from here on
            fault = replace(fault, detail={**fault.detail, **self._corrupt(fault)})
        elif fault.kind == "pause":
            for n in fault.nodes:
                c.send_signal(n, signal.SIGSTOP)
        elif fault.kind == "partition":
            for n, blocked in self._cuts(fault).items():
                self._network(n, blocked=blocked)
        elif fault.kind == "loss":
            for n in fault.nodes:
                self._network(n, loss=fault.detail["fraction"])
        elif fault.kind == "clock" and "step_ms" in fault.detail:
            self._admin(fault.nodes[0], clock_offset_ms=fault.detail["step_ms"])
        self.active.append(fault)
        self.record({"event": "start", "t": t, **fault.to_json()})
        return fault

    def _end(self, fault: Fault) -> None:
        if fault not in self.active:
            return
        self.active.remove(fault)
        c = self.cluster
        if fault.kind in ("kill", "crash-all", "corrupt"):
            for n in fault.nodes:
                c.start(n)  # rebuilt from its data_dir
        elif fault.kind == "pause":
            for n in fault.nodes:
                c.send_signal(n, signal.SIGCONT)
        elif fault.kind == "partition":
            for n in self._cuts(fault):
                self._network(n, blocked=set())
        elif fault.kind == "loss":
            for n in fault.nodes:
                self._network(n, loss=0.0)
        elif fault.kind == "clock":
            self._admin(fault.nodes[0], clock_offset_ms=0)
        self.record({"event": "end", "t": self.clock(), **fault.to_json()})

    def _corrupt(self, fault: Fault) -> dict[str, Any]:
        """Flip a byte of one sealed segment of the fault's (killed) node: how many sealed
        segments it had, and which file (under ``streams/``) and offset were flipped. With none
        sealed yet nothing is flipped: the fault was a plain kill."""
        streams = self.cluster.config.data_dir(fault.nodes[0]) / "streams"
        sealed = sealed_segments(streams)
        if not sealed:
            return {"sealed": 0}
        # Seeded from the fault alone (its seeded times, node and xor), never from timing.
        rng = random.Random(json.dumps(fault.to_json(), sort_keys=True))
        path = rng.choice(sealed)
        found: dict[str, Any] = {"sealed": len(sealed), "file": str(path.relative_to(streams))}
        try:
            found["offset"] = flip_byte(path, rng, fault.detail["xor"])
        except (OSError, ValueError) as exc:
            self.errors.append(f"corrupt {path}: {exc}")
            found["error"] = str(exc)
        return found

    def _cuts(self, fault: Fault) -> dict[int, set[int]]:
        """Which nodes drop frames from which, for a partition."""
        everyone = {spec.id for spec in self.cluster.config.nodes}
        if fault.detail["shape"] == "one-way":
            return {fault.nodes[0]: {fault.detail["from"]}}
        side = set(fault.nodes)
        rest = everyone - side
        return {n: (rest if n in side else side) for n in everyone}

    def _network(
        self, node: int, blocked: set[int] | None = None, loss: float | None = None
    ) -> None:
        """Set what node ``node`` drops: by nftables on a namespaced cluster, else by its
        admin hooks."""
        if self.cluster.netns is None:
            if blocked is not None:
                self._admin(node, block_from=sorted(blocked))
            if loss is not None:
                self._admin(node, loss_in=loss)
            return
        if blocked is not None:
            self.blocked[node] = blocked
        if loss is not None:
            self.loss[node] = loss
        try:
            self.cluster.net_faults(
                node, sorted(self.blocked.get(node, ())), self.loss.get(node, 0)
            )
        except (OSError, RuntimeError, ValueError) as exc:
            self.errors.append(f"node {node} network faults: {exc}")

    def _admin(self, node: int, **settings: Any) -> None:
        try:
            self.cluster.fault(node, **settings)
        except (TimeoutError, ValueError) as exc:  # a paused or dead node cannot answer
            self.errors.append(f"node {node} {settings}: {exc}")


def sealed_segments(streams_dir: Path) -> list[Path]:
    """Every sealed segment of a node's logs (``<data_dir>/streams``), in a stable order; the
    open segments (``<base>.open``) and the files in ``quarantine/`` are left out."""
    found: list[Path] = []
    for directory in sorted(streams_dir.iterdir()) if streams_dir.is_dir() else []:
        if directory.is_dir():
            names = sorted(p for p in directory.iterdir() if p.is_file())
            found += [p for p in names if (name := parse_name(p.name)) and name.sealed]
    return found


def flip_byte(path: Path, rng: random.Random, xor: int) -> int:
    """XOR one byte of a segment file's records (past its header frame, so the file is still
    taken for a segment and the record is what is found bad) with ``xor``; its offset."""
    if not 0 < xor < 256:
        raise ValueError(f"xor {xor} flips nothing")
    data = path.read_bytes()
    header = read_frame(data, 0)  # raises CorruptRecord (a ValueError) on a bad header
    if header is None or header[2] >= len(data):
        raise ValueError("no record after the segment header")
    offset = rng.randrange(header[2], len(data))
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(bytes((data[offset] ^ xor,)))
    return offset
