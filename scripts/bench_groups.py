"""What a consumer group's commit and a fan-out batch's acks cost on a 3-node cluster with the
default durability (fsync = always): latency of each, and the bytes each adds to a node's log.

A commit is one transaction of the group stream; acks go with a commit as one transaction of
the batch stream holding sorted ranges. Measured: sequential commits (each after the position
moved), ack flushes of 100 items in random order (100 ranges at worst) and in order (1 range),
and what each leaves in the logs.

Usage: scripts/bench_groups.sh [--count 500]
"""

from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time
from datetime import date
from pathlib import Path

from relay import Consumer, Producer
from relay.runtime.local_cluster import LocalCluster


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def log_bytes(cluster: LocalCluster, marker: str) -> int:
    """Bytes of node 1's segment files of the streams whose directory names hold ``marker``."""
    root = cluster.config.data_dir(1) / "streams"
    return sum(
        p.stat().st_size
        for d in root.iterdir()
        if marker in d.name
        for p in d.iterdir()
        if p.suffix in (".seg", ".open")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=500)
    n = parser.parse_args().count
    print(f"# relay group commit and batch ack costs, {date.today()}, {platform.node()}\n")
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        config = cluster.config_path
        with Producer(config=config) as producer:
            batch = producer.open_batch("orders")
            for _ in range(n * 200):
                producer.send("orders", b"x" * 100, batch=batch)
            producer.flush()
        with Consumer("orders", config=config, group="g", commit_interval_ms=0) as consumer:
            commits: list[float] = []
            for _ in range(n):
                consumer.take(1, timeout_s=10)
                started = time.perf_counter()
                consumer.commit()
                commits.append((time.perf_counter() - started) * 1000)
            commit_bytes = log_bytes(cluster, ".__group.") / n
            txs = consumer.take(n * 150, timeout_s=60)
            rng = random.Random(1)
            results = {}
            for name, ordered in (("scattered, random order", False), ("in order", True)):
                flushes: list[float] = []
                before = log_bytes(cluster, ".__batch.")
                for _ in range(n // 2):
                    chunk = txs[:100] if ordered else txs[:200:2]  # every other: 100 ranges
                    del txs[: 100 if ordered else 200]
                    if not ordered:
                        rng.shuffle(chunk)
                    for tx in chunk:
                        consumer.ack(tx)
                    started = time.perf_counter()
                    consumer.commit()
                    flushes.append((time.perf_counter() - started) * 1000)
                after = log_bytes(cluster, ".__batch.")
                results[name] = (flushes, (after - before) / (n // 2))
    print("| measure | p50 | p99 | log bytes per node |")
    print("|---|---|---|---|")
    print(
        f"| group commit ({n}) | {pct(commits, 0.5):.2f} ms | {pct(commits, 0.99):.2f} ms "
        f"| {commit_bytes:.0f} per commit |"
    )
    for name, (flushes, size) in results.items():
        print(
            f"| 100 batch acks, {name} ({n // 2} flushes) | {pct(flushes, 0.5):.2f} ms | "
            f"{pct(flushes, 0.99):.2f} ms | {size:.0f} per flush ({size / 100:.1f} per ack) |"
        )


if __name__ == "__main__":
    main()
