"""CPU per transaction of each process: a 3-node cluster (or 5, the stream on all five), one
`relay bench` producer, and each process's user + system CPU (psutil) over the run (steadier than
throughput on a shared VM, so two commits compare well when run alternately), and of that how
much its loop's thread spent (the rest is zmq's I/O thread and the sync, HTTP and metrics
threads). Also, per tx and node, from its /metrics: loop turns that handled input, mesh
messages sent by kind, and group commits.

Usage: scripts/bench_cpu.sh [--fsync always] [--count 300000] [--nodes 3|5] [-- extra relay bench
options]
(one publish in flight: scripts/bench_cpu.sh --count 3000 -- --window 1 --batch 1)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import psutil

from relay.runtime.launcher import child_env
from relay.runtime.local_cluster import LocalCluster


def cpu_seconds(pid: int) -> tuple[float, float]:
    """The process's user + system CPU, and its main thread's (a node's loop)."""
    process = psutil.Process(pid)
    times = process.cpu_times()
    main = next(t for t in process.threads() if t.id == pid)  # a process always has it
    return times.user + times.system, main.user_time + main.system_time


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


COUNTED = ("relay_loop_turns_total", "relay_mesh_messages_sent_total", "relay_log_syncs_total")


def counters(port: int) -> dict[str, float]:
    """The node's counters of ``COUNTED``, by name and labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(COUNTED):
            name, value = line.rsplit(" ", 1)
            found[name.replace("relay_", "").replace("_total", "")] = float(value)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsync", default="always", choices=["always", "interval", "never"])
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--nodes", type=int, default=3, choices=[3, 5])
    parser.add_argument("extra", nargs="*", help="more relay bench options, after --")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=args.nodes, overrides={"fsync": args.fsync}) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        before = {n: cpu_seconds(p.pid) for n, p in cluster.procs.items()}
        ports = {n: cluster.config.node(n).metrics_port for n in cluster.procs}
        counted = {n: counters(port) for n, port in ports.items()}
        client_before = children_cpu()
        command = [sys.executable, "-m", "relay", "bench", "--config", str(cluster.config_path)]
        stream = "events.bench" if args.nodes == 5 else "bench"  # on all five (templates.py)
        command += ["--json", "--stream", stream, "--count", str(args.count), "--node", "1"]
        run = [*command, *args.extra]
        out = subprocess.run(run, capture_output=True, text=True, check=True, env=child_env())
        client = children_cpu() - client_before
        used = {
            n: tuple(a - b for a, b in zip(cpu_seconds(p.pid), before[n], strict=True))
            for n, p in cluster.procs.items()
        }
        moved = {
            n: {k: v - counted[n].get(k, 0.0) for k, v in counters(port).items()}
            for n, port in ports.items()
        }
    report = json.loads(out.stdout)
    per_tx = {f"node {n}": round(1e6 * whole / args.count, 1) for n, (whole, _) in used.items()}
    per_tx["producer"] = round(1e6 * client / args.count, 1)
    loops = {f"node {n}": round(1e6 * loop / args.count, 1) for n, (_, loop) in used.items()}
    print(f"fsync={args.fsync} {report['tx_per_s']:,.0f} tx/s; CPU us per tx: {per_tx}")
    print(f"  of which the node's loop thread: {loops}")
    print(f"p50 {report['p50_ms']:.2f} ms, p99 {report['p99_ms']:.2f} ms; per tx and node:")
    for n, found in sorted(moved.items()):
        shown = {k: float(f"{v / args.count:.3g}") for k, v in sorted(found.items()) if v}
        print(f"  node {n}: {shown}")


if __name__ == "__main__":
    main()
