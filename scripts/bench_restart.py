"""How long a node takes to restart with a long log: publish N txs (100-byte payloads) to a
3-node cluster, stop every node, start them again, and time until every node serves and a
consumer reads the last tx from each. Also the log's bytes per tx.

Usage: scripts/bench_restart.sh [--count 1000000]
"""

from __future__ import annotations

import argparse
import platform
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from relay import Consumer
from relay.runtime.local_cluster import LocalCluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"# relay restart benchmark, {date.today()}, {platform.node()}\n")
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        started = time.monotonic()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "relay",
                "bench",
                "--config",
                str(cluster.config_path),
                "--stream",
                "bench",
                "--count",
                str(args.count),
                "--node",
                "1",
            ],
            check=True,
            capture_output=True,
            timeout=3600,
        )
        print(f"- published {args.count:,} txs in {time.monotonic() - started:.1f} s")
        with Consumer("bench", config=cluster.config_path, start="latest") as consumer:
            consumer.poll(timeout_s=0.5)
            last = consumer.position
        segments = [
            p
            for spec in cluster.config.nodes
            for p in (cluster.config.data_dir(spec.id) / "streams").rglob("*")
            if p.suffix in (".seg", ".open")
        ]
        size = sum(p.stat().st_size for p in segments)
        print(f"- log: {size / 3 / 2**20:.1f} MiB per node, {size / 3 / args.count:.0f} bytes/tx")
        for node_id in (1, 2, 3):
            cluster.stop(node_id, signal.SIGTERM)
        started = time.monotonic()
        cluster.start()
        cluster.wait_serving(timeout_s=600)
        serving = time.monotonic() - started
        for node_id in (1, 2, 3):
            with Consumer("bench", config=cluster.config_path, node=node_id, start=last) as c:
                assert c.take(1, timeout_s=600)[0].seq == last
        caught_up = time.monotonic() - started
        print(f"- restart of 3 nodes: serving after {serving:.1f} s, the last tx readable on")
        print(f"  every node after {caught_up:.1f} s (each node re-checks its whole log's chain)")


if __name__ == "__main__":
    main()
