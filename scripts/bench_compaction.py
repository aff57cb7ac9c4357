"""Compaction under load: ``--updates`` updates over ``--keys`` keys (100-byte values) published
to a compacted stream of a 3-node cluster (``fsync = "always"``), against the same load on a
stream that is not compacted, in one run.

For each side: how long the load took; a probe's lone publishes to another stream (one in
flight, every 5 ms) while the load runs, p50 and p99 (what compaction costs the write path);
the stream's bytes on node 1's disk at the end of the load and once its compaction settled (no
pass changed the log for 120 s, at least the dedup window after the load); and the passes the
node logged, with their time. The dedup window is 10 s (``--dedup-ms``), since a pass never
takes what is younger (a retry must still find its original).

Usage: scripts/bench_compaction.sh [--updates N] [--keys N] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from relay import Producer
from relay.runtime.local_cluster import LocalCluster

PAYLOAD = b"x" * 100
PROBE_EVERY_S = 0.005
SETTLED_S = 120.0  # compaction settled: no change to the log for this long (a pass over
# gigabytes takes a minute on a busy machine, at nice 10)
SETTLE_MAX_S = 900.0
PASS = re.compile(r"compaction: kv\.load: (\d+) records kept, (\d+) dropped, .* ([\d.]+) s$")


def block(cleanup: str) -> str:
    return f'\n[[stream]]\npattern = "kv.*"\ncleanup = "{cleanup}"\n'


def measure(args: argparse.Namespace, cleanup: str) -> dict[str, Any]:
    overrides = {"dedup_window_ms": args.dedup_ms}
    with (
        tempfile.TemporaryDirectory(prefix="bench-compact-") as tmp,
        LocalCluster(Path(tmp), nodes=3, overrides=overrides, streams=block(cleanup)) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        stop = threading.Event()
        latencies: list[float] = []
        probe = threading.Thread(target=_probe, args=(cluster, stop, latencies))
        probe.start()
        started = time.perf_counter()
        with Producer(config=cluster.config_path, window=64, batch_max=256) as producer:
            for i in range(args.updates):
                producer.send("kv.load", PAYLOAD, key=f"k{i % args.keys}")
            producer.flush()
        loaded = time.perf_counter() - started
        stop.set()
        probe.join()
        at_load_end = _log_size(cluster)
        settled_after = _settle(cluster, args.dedup_ms / 1000) if cleanup == "compact" else 0.0
        passes = [PASS.search(line) for line in cluster.log(1).splitlines()]
        found = [m for m in passes if m]
        latencies.sort()
        return {
            "cleanup": cleanup,
            "updates": args.updates,
            "keys": args.keys,
            "load_s": round(loaded, 1),
            "tx_per_s": round(args.updates / loaded),
            "probe_p50_ms": round(statistics.median(latencies), 2),
            "probe_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
            "probes": len(latencies),
            "bytes_at_load_end": at_load_end[0],
            "txs_at_load_end": at_load_end[1],
            "bytes_settled": _log_size(cluster)[0],
            "txs_settled": _log_size(cluster)[1],
            "settled_after_load_s": round(settled_after, 1),
            "passes": len(found),
            "pass_seconds": round(sum(float(m.group(3)) for m in found), 1),
            "dropped": sum(int(m.group(2)) for m in found),
            "records_per_pass_second": round(
                sum(int(m.group(1)) + int(m.group(2)) for m in found)
                / max(0.1, sum(float(m.group(3)) for m in found))
            ),
        }


def _probe(cluster: LocalCluster, stop: threading.Event, latencies: list[float]) -> None:
    with Producer(config=cluster.config_path, window=1, batch_max=1) as producer:
        while not stop.is_set():
            t0 = time.perf_counter()
            producer.publish("probe", PAYLOAD)
            latencies.append((time.perf_counter() - t0) * 1000)
            stop.wait(PROBE_EVERY_S)


def _log_size(cluster: LocalCluster) -> tuple[int, int]:
    """(bytes, txs) of ``kv.load`` in node 1's log."""
    status = cluster.status(1)
    found = status.stream("kv.load") if status else None
    return (found.log_bytes, found.log_txs) if found else (0, 0)


def _settle(cluster: LocalCluster, dedup_s: float) -> float:
    """Seconds until node 1's log of the stream stopped changing (at least the dedup window
    after the load, so that every pass could take all of it)."""
    started = time.perf_counter()
    last, since = _log_size(cluster), time.perf_counter()
    while time.perf_counter() - started < SETTLE_MAX_S:
        time.sleep(0.5)
        now = _log_size(cluster)
        if now != last:
            last, since = now, time.perf_counter()
        elif time.perf_counter() - since >= SETTLED_S and time.perf_counter() - started > dedup_s:
            return since - started
    return SETTLE_MAX_S


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        "| cleanup | load | tx/s | probe p50 / p99 | bytes at load end | bytes settled | "
        "settled after | passes (time) |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['cleanup']} | {r['load_s']} s | {r['tx_per_s']:,} | "
            f"{r['probe_p50_ms']} / {r['probe_p99_ms']} ms | "
            f"{r['bytes_at_load_end'] / 1e6:,.1f} MB ({r['txs_at_load_end']:,} txs) | "
            f"{r['bytes_settled'] / 1e6:,.1f} MB ({r['txs_settled']:,} txs) | "
            f"{r['settled_after_load_s']} s | {r['passes']} ({r['pass_seconds']} s) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--dedup-ms", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(args, "compact"), measure(args, "delete")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"# compaction: {args.updates:,} updates over {args.keys:,} keys, 3 nodes\n")
    print(render(rows))


if __name__ == "__main__":
    main()
