"""Flame graphs of running nodes: a local 3-node cluster per fsync setting, ``relay bench``
pipelined (``--count`` txs) and with one publish in flight (3,000), each node sampled by
``py-spy record`` at 250 Hz while the load runs (node 1 coordinates). Writes
``<out>/<pipelined|single>-<fsync>-node<N>.svg`` and prints what each load measured.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relay.runtime.local_cluster import LocalCluster

LOADS = {"pipelined": (), "single": ("--window", "1", "--batch", "1")}


def profile(fsync: str, load: str, count: int, out: Path) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=3, overrides={"fsync": fsync}) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        spies = [
            subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--rate",
                    "250",
                    "--pid",
                    str(proc.pid),
                    "--nonblocking",
                    "--format",
                    "flamegraph",
                    "--output",
                    str(out / f"{load}-{fsync}-node{n}.svg"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for n, proc in sorted(cluster.procs.items())
        ]
        try:
            time.sleep(1)  # py-spy attached
            args = ["--count", str(count if load == "pipelined" else 3000), *LOADS[load]]
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "relay",
                    "bench",
                    "--config",
                    str(cluster.config_path),
                    "--json",
                    "--node",
                    "1",
                    *args,
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=900,
            )
            report = json.loads(done.stdout)
            print(
                f"{load} fsync={fsync}: {report['tx_per_s']:,.0f} tx/s, "
                f"p50 {report['p50_ms']:.2f} ms, p99 {report['p99_ms']:.2f} ms",
                flush=True,
            )
        finally:
            for spy in spies:
                spy.send_signal(signal.SIGINT)
            for spy in spies:
                spy.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("docs/profiles"))
    parser.add_argument("--fsync", default="always,never")
    parser.add_argument("--count", type=int, default=300_000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for fsync in args.fsync.split(","):
        for load in LOADS:
            profile(fsync, load, args.count, args.out)


if __name__ == "__main__":
    main()
