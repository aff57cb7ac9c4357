"""The queue workload of a chaos run (``--workload queue``): the producers publish jobs, worker
processes work them as the work group ``chaos``, and some workers are killed with SIGKILL.

How this works: before the producers start, the group is configured (leases of 2 s, five
deliveries). ``WORKERS`` worker processes (``chaos.queue_worker``) claim and settle, each
recording its steps in ``workers.jsonl``. Every 4-12 s (drawn from the run's seed) one worker
is killed with SIGKILL, whatever it holds, and a new one (a new member) starts 0.5-2 s later;
each kill is a row of ``workers.jsonl`` too. After the faults heal and the cluster settles, the
workers go on until the group is drained (nothing ready, delayed, claimed or dead and not yet
moved, and every job of the stream taken in) or no job was settled for a minute; then they
stop, and ``queue_final.json`` keeps every replica's counts and the dead-letter stream's jobs,
for the checker.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from chaos.queue_worker import GROUP, JOB_STREAM, LEASE_MS
from relay import Consumer, RelayError, Worker
from relay.runtime.launcher import query_status
from relay.runtime.local_cluster import LocalCluster

WORKERS = 4
MAX_DELIVERIES = 5
DRAIN_STALLED_S = 60.0  # the drain gives up once no job was settled for this long
ROOT = Path(__file__).resolve().parent.parent


class QueueWorkload:
    def __init__(self, cluster: LocalCluster, out: Path, seed: int, duration_s: float) -> None:
        self.cluster = cluster
        self.out = out
        self.rng = random.Random(seed * 7919 + 1)
        self.duration_s = duration_s
        self.history = out / "workers.jsonl"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.started = 0
        self.stop = threading.Event()
        self.killer = threading.Thread(target=self._kill_now_and_then, name="kill-workers")
        self._lock = threading.Lock()

    def start(self) -> None:
        self._configure()
        for _ in range(WORKERS):
            self._spawn()
        self.killer.start()

    def _configure(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with Worker(JOB_STREAM, GROUP, config=self.cluster.config_path) as w:
                    w.configure(lease_ms=LEASE_MS, max_deliveries=MAX_DELIVERIES)
                return
            except RelayError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _spawn(self) -> None:
        self.started += 1
        member = f"w{self.started}"
        seed = str(self.rng.randrange(1 << 30))
        args = [str(self.cluster.config_path), member, str(self.history), seed]
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        command = [sys.executable, "-m", "chaos.queue_worker", *args]
        self.workers[member] = subprocess.Popen(command, env=env, cwd=ROOT)

    def _record(self, row: dict[str, Any]) -> None:
        with self._lock, self.history.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def _kill_now_and_then(self) -> None:
        end = time.monotonic() + self.duration_s
        while not self.stop.wait(self.rng.uniform(4.0, 12.0)) and time.monotonic() < end:
            live = sorted(m for m, p in self.workers.items() if p.poll() is None)
            if not live:
                continue
            victim = self.rng.choice(live)
            self.workers[victim].send_signal(signal.SIGKILL)
            self.workers[victim].wait(10)
            self._record({"member": victim, "event": "kill", "t": time.monotonic()})
            if self.stop.wait(self.rng.uniform(0.5, 2.0)):
                return
            self._spawn()

    def drain(self) -> tuple[bool, dict[str, Any]]:
        """Until the group is drained, or ``DRAIN_STALLED_S`` passed without a job settled:
        whether it drained, and the last counts seen."""
        heads = _verified_heads(self.cluster, JOB_STREAM)
        last_job = max((seq for seq, _ in heads.values()), default=0)
        deadline = time.monotonic() + DRAIN_STALLED_S
        info: dict[str, Any] = {}
        settled = -1
        while time.monotonic() < deadline:
            try:
                with Worker(JOB_STREAM, GROUP, config=self.cluster.config_path) as w:
                    info = w.info()
            except RelayError:
                time.sleep(0.5)
                continue
            pending = ("ready", "delayed", "claimed", "dead_not_moved")
            through = info.get("jobs_through", 0)
            if not any(info.get(k) for k in pending) and int(str(through)) >= last_job:
                return True, info
            done = int(str(info.get("acked", 0))) + int(str(info.get("dead", 0)))
            if done > settled:
                settled, deadline = done, time.monotonic() + DRAIN_STALLED_S
            time.sleep(0.5)
        return False, info

    def finish(self) -> None:
        """Stop killing and stop every worker (SIGTERM, then SIGKILL)."""
        self.stop.set()
        if self.killer.is_alive():
            self.killer.join(30)
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def write_final(self) -> None:
        """Every replica's counts of the group, and the dead-letter stream's jobs."""
        infos = {}
        for spec in self.cluster.config.nodes:
            with Worker(JOB_STREAM, GROUP, config=self.cluster.config_path, node=spec.id) as w:
                infos[spec.id] = w.info()
        dead = _read_all(self.cluster, f"{JOB_STREAM}.dead")
        final = {"infos": infos, "dead": dead, "lease_ms": LEASE_MS}
        (self.out / "queue_final.json").write_text(json.dumps(final, indent=1))


def _verified_heads(cluster: LocalCluster, stream: str) -> dict[int, tuple[int, str]]:
    heads = {}
    for spec in cluster.config.nodes:
        status = query_status(spec, 1000, cluster.client_pair)
        info = status.stream(stream) if status else None
        if info is not None:
            heads[spec.id] = (info.verified_seq, info.digest)
    return heads


def _read_all(cluster: LocalCluster, stream: str) -> list[dict[str, Any]]:
    """Every verified tx of ``stream`` (seq and headers), read from the earliest."""
    heads = _verified_heads(cluster, stream)
    last = max((seq for seq, _ in heads.values()), default=0)
    found: list[dict[str, Any]] = []
    if not last:
        return found
    with Consumer(stream, config=cluster.config_path) as consumer:
        while not found or found[-1]["seq"] < last:
            txs = consumer.poll(timeout_s=5)
            if not txs:
                raise RuntimeError(f"could not read {stream} to its end")
            found += [
                {"seq": t.seq, "headers": {k: v.decode(errors="replace") for k, v in t.headers}}
                for t in txs
            ]
    return found
