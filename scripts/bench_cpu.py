"""CPU per transaction of each process: a 3-node cluster, one `relay bench` producer, and each
process's utime + stime from /proc over the run (steadier than throughput on a shared VM, so
two commits compare well when run alternately).

Usage: scripts/bench_cpu.sh [--fsync always] [--count 300000] [-- extra relay bench options]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from relay.runtime.local_cluster import LocalCluster


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsync", default="always", choices=["always", "interval", "never"])
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("extra", nargs="*", help="more relay bench options, after --")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=3, overrides={"fsync": args.fsync}) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        before = {n: cpu_seconds(p.pid) for n, p in cluster.procs.items()}
        client_before = children_cpu()
        command = [sys.executable, "-m", "relay", "bench", "--config", str(cluster.config_path)]
        command += ["--json", "--stream", "bench", "--count", str(args.count), "--node", "1"]
        out = subprocess.run([*command, *args.extra], capture_output=True, text=True, check=True)
        client = children_cpu() - client_before
        used = {n: cpu_seconds(p.pid) - before[n] for n, p in cluster.procs.items()}
    report = json.loads(out.stdout)
    per_tx = {f"node {n}": round(1e6 * s / args.count, 1) for n, s in used.items()}
    per_tx["producer"] = round(1e6 * client / args.count, 1)
    print(f"fsync={args.fsync} {report['tx_per_s']:,.0f} tx/s; CPU us per tx: {per_tx}")


if __name__ == "__main__":
    main()
