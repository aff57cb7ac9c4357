"""A soak: a 3-node cluster (default settings: fsync always, CURVE) at half its peak rate for
``--minutes`` (default 10), with a consumer reading every message.

The load runs as one ``relay bench --rate`` per window of ``--every`` seconds (its p50/p99 are
the window's, measured from each message's due time). After each window every node is sampled:
RSS, parked fetches, client requests open, dedup keys and replication backlog (its /metrics).
Prints a markdown table and a verdict: RSS after ``--warmup`` seconds within 10% of its value
then, every gauge no higher in the later half of the soak than 1.5x the earlier half's peak,
and every window's p99 within 2x of the median window's. Exits 1 if a check fails.
Usage: scripts/soak.sh [--minutes M] [--every S] [--warmup S] [--rate R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from relay.runtime.local_cluster import LocalCluster

GAUGES = (
    "relay_parked_fetches",
    "relay_client_requests_open",
    "relay_dedup_keys",
    "relay_unverified_txs",
)
RSS_SPREAD_MAX = 0.10  # after warm-up
P99_SPREAD_MAX = 2.0  # a window's p99 against the median window's
GROWTH_MAX = 1.5  # a gauge's peak in the later half of the soak against the earlier half's


def bench(config: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "relay", "bench", "--config", str(config), "--json", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=3600,
    )
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def gauges(port: int) -> dict[str, float]:
    """Each gauge of ``GAUGES``, summed over its labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = dict.fromkeys(GAUGES, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] += float(line.rsplit(" ", 1)[1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--every", type=int, default=30, help="seconds per window")
    parser.add_argument("--warmup", type=int, default=150, help="seconds before RSS counts")
    parser.add_argument("--rate", type=int, help="tx/s (default: half a measured peak)")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=3) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        config = cluster.config_path
        rate = args.rate
        if rate is None:
            peak = bench(config, "--stream", "soak.peak", "--count", "200000")
            rate = int(peak["tx_per_s"] / 2)
            print(f"peak {peak['tx_per_s']:,.0f} tx/s; soak at {rate:,} tx/s\n", flush=True)
        nodes = sorted(cluster.procs)
        ports = {n: cluster.config.node(n).metrics_port for n in nodes}
        rows: list[dict[str, Any]] = []
        started = time.monotonic()
        print(
            "| t (s) | acked tx/s | p50 ms | p99 ms | RSS MB per node | parked | open | "
            "dedup keys | backlog |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        while time.monotonic() - started < args.minutes * 60:
            window = bench(
                config,
                "--stream",
                "soak",
                "--rate",
                str(rate),
                "--count",
                str(rate * args.every),
                "--consumers",
                "1",
            )
            sample = {n: gauges(ports[n]) for n in nodes}
            row = {
                "t": round(time.monotonic() - started),
                "tx_per_s": window["tx_per_s"],
                "p50": window["p50_ms"],
                "p99": window["p99_ms"],
                "failed": window["failed"],
                "rss": [round(rss_mb(cluster.procs[n].pid), 1) for n in nodes],
                **{g: max(sample[n][g] for n in nodes) for g in GAUGES},
            }
            rows.append(row)
            print(
                f"| {row['t']} | {row['tx_per_s']:,.0f} | {row['p50']:.2f} | {row['p99']:.2f} | "
                f"{row['rss']} | {row['relay_parked_fetches']:.0f} | "
                f"{row['relay_client_requests_open']:.0f} | {row['relay_dedup_keys']:,.0f} | "
                f"{row['relay_unverified_txs']:,.0f} |",
                flush=True,
            )
    sys.exit(0 if verdict(rows, args.warmup) else 1)


def verdict(rows: list[dict[str, Any]], warmup: int) -> bool:
    """Print each check; True if all hold."""
    settled = [r for r in rows if r["t"] >= warmup]
    checks: list[tuple[str, bool]] = []
    if len(settled) >= 2:
        for i in range(len(settled[0]["rss"])):
            series = [r["rss"][i] for r in settled]
            spread = max(series) / series[0] - 1
            checks.append(
                (
                    f"node {i + 1} RSS after warm-up {series[0]}-{max(series)} MB "
                    f"(+{100 * spread:.1f}%, at most +10%)",
                    spread <= RSS_SPREAD_MAX,
                )
            )
        half = len(settled) // 2
        for gauge in GAUGES:  # noisy gauges: the later half may not climb above the earlier
            early = max(r[gauge] for r in settled[: max(1, half)])
            late = max(r[gauge] for r in settled[half:])
            checks.append(
                (
                    f"{gauge} after warm-up: max {early:,.0f} in the first half, "
                    f"{late:,.0f} in the second (not growing)",
                    late <= GROWTH_MAX * early + 64,
                )
            )
    else:
        checks.append(("at least two windows after warm-up", False))
    p99s = [r["p99"] for r in rows]
    median = statistics.median(p99s)
    checks.append(
        (
            f"p99 per window {min(p99s):.2f}-{max(p99s):.2f} ms, median {median:.2f} "
            f"(each within {P99_SPREAD_MAX}x of the median)",
            max(p99s) <= P99_SPREAD_MAX * median,
        )
    )
    failed = sum(r["failed"] for r in rows)
    checks.append((f"publishes failed: {failed}", failed == 0))
    print()
    for what, ok in checks:
        print(f"- {'ok' if ok else 'FAILED'}: {what}")
    return all(ok for _, ok in checks)


if __name__ == "__main__":
    main()
