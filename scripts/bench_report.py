"""Measure relay against NATS JetStream R3 in one run; print a markdown report.

For a 3-node cluster with each ``fsync`` setting (always, the default; interval; never), the
default once more without CURVE (what encryption costs), and a 5-node cluster with the
default: pipelined acked tx/s from one producer (100-byte payloads), ack latency with one
publish in flight and at half the measured peak, each node's peak RSS and the log's bytes per
tx. Then scripts/ceiling.py on 3 and on 5 nodes, the least Python program doing relay's hot
path (no disk, no deduplication, no encryption: what any Python design of relay could reach at
most here), and, if the peer benchmark program and its venv are there (docs/benchmarks.md,
"NATS JetStream"), JetStream R3 (memory and file storage) in the same run.
Every measure is taken --rounds times (default 3), relay and JetStream alternating, so each
round's ratio compares figures taken minutes apart; the median ratio is the one to read.
Usage: scripts/bench.sh [--count N] [--rounds N] [--skip-nats] [--charts DIR] [--spark]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from relay.gc_tuning import THRESHOLDS
from relay.runtime.local_cluster import LocalCluster

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT.parent / "shared" / "peers" / "nats_jetstream_bench.py"
PEER_PYTHON = Path("/tmp/peer-venv/bin/python")


def run_json(*args: str) -> dict[str, Any]:
    """What a Python program of ours prints as JSON (``--json``)."""
    out = subprocess.run(
        [sys.executable, *args, "--json"], capture_output=True, text=True, check=True, timeout=900
    )
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def bench(config: Path, *args: str) -> dict[str, Any]:
    return run_json("-m", "relay", "bench", "--config", str(config), *args)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def log_bytes(cluster: LocalCluster) -> int:
    """Bytes of every node's segment files."""
    return sum(
        p.stat().st_size
        for spec in cluster.config.nodes
        for p in (cluster.config.data_dir(spec.id) / "streams").rglob("*")
        if p.suffix in (".seg", ".open")
    )


def measure_relay(nodes: int, count: int, fsync: str, security: str) -> dict[str, Any]:
    overrides = {"fsync": fsync, "security": security}
    if security == "none":  # client keys need CURVE
        overrides["client_auth"] = "none"
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=nodes, overrides=overrides) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        cfg = cluster.config_path
        stream = "events.bench" if nodes >= 5 else "bench"
        peak = bench(cfg, "--stream", stream, "--count", str(count), "--node", "1")
        single = bench(
            cfg,
            "--stream",
            stream,
            "--count",
            "3000",
            "--window",
            "1",
            "--batch",
            "1",
            "--node",
            "1",
        )
        half = float(peak["tx_per_s"]) / 2
        at_half = bench(
            cfg,
            "--stream",
            stream,
            "--count",
            str(int(half * 10)),
            "--rate",
            str(int(half)),
            "--node",
            "1",
        )
        rss = [round(peak_rss_mb(p.pid), 1) for p in cluster.procs.values()]
        txs = int(peak["acked"]) + int(single["acked"]) + int(at_half["acked"])
        per_tx = log_bytes(cluster) / max(1, txs * nodes)
    # on 5 nodes events.* has five replicas; orders.* has three (JetStream's R3 on 5), measured
    # on a cluster of its own: like every other peak, on nodes that hold nothing yet (a node
    # holding the 800,000 txs of the runs above moves a tenth to a quarter fewer)
    three = fresh_peak(nodes, count, overrides, "orders.bench") if nodes >= 5 else None
    return {
        "nodes": nodes,
        "fsync": fsync,
        "peak": peak,
        "single": single,
        "half": at_half,
        "rss_mb": rss,
        "peak_of_three": three,
        "bytes_per_tx": per_tx,
    }


def fresh_peak(nodes: int, count: int, overrides: dict[str, str], stream: str) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=nodes, overrides=overrides) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        return bench(cluster.config_path, "--stream", stream, "--count", str(count), "--node", "1")


def measure_ceiling(count: int, nodes: int) -> dict[str, Any]:
    return run_json(
        str(ROOT / "scripts" / "ceiling.py"), "--count", str(count), "--nodes", str(nodes)
    )


def measure_nats() -> str | None:
    if not PEER.exists() or not PEER_PYTHON.exists():
        return None
    # the peer's client runs with the garbage collector policy relay's own bench client uses
    prelude = (
        f"import gc, runpy; gc.collect(); gc.freeze(); gc.set_threshold(*{THRESHOLDS}); "
        f"runpy.run_path({str(PEER)!r}, run_name='__main__')"
    )
    out = subprocess.run(
        [
            str(PEER_PYTHON),
            "-c",
            prelude,
            "--uvloop",
            "--storage",
            "memory",
            "file",
            "--runs",
            "1",
            "--workdir",
            tempfile.mkdtemp(prefix="nats-"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out.stdout + out.stderr


# (nodes, fsync, security): CURVE is on by default; once off, to measure what it costs
CONFIGS = (
    (3, "always", "curve"),
    (3, "always", "none"),
    (3, "interval", "curve"),
    (3, "never", "curve"),
    (5, "always", "curve"),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3, help="relay then JetStream, N times")
    parser.add_argument("--skip-nats", action="store_true")
    parser.add_argument("--charts", type=Path, help="draw the medians as PNG charts here")
    parser.add_argument("--spark", action="store_true", help="also a Spark query's read rate")
    args = parser.parse_args()
    cores = os.cpu_count()
    print(f"# relay benchmark, {date.today()}, {platform.node()}, {cores} cores\n")
    per_round: list[dict[str, float]] = []
    rounds: list[tuple[dict[tuple[int, str, str], dict[str, Any]], str | None]] = []
    for round_no in range(1, args.rounds + 1):
        results: dict[tuple[int, str, str], dict[str, Any]] = {}
        for nodes, fsync, security in CONFIGS:
            found = results[(nodes, fsync, security)] = measure_relay(
                nodes, args.count, fsync, security
            )
            print(f"## round {round_no}: {nodes} nodes, fsync = {fsync}, security = {security}\n")
            print(describe(found), flush=True)
        ceilings = {nodes: measure_ceiling(args.count, nodes) for nodes in (3, 5)}
        for nodes, ceiling in ceilings.items():
            print(
                f"## round {round_no}: the ceiling on {nodes} nodes (scripts/ceiling.py)\n\n"
                f"- pipelined: {ceiling['pipelined']['tx_per_s']:,.0f} acked tx/s\n"
                f"- one in flight: p50 {ceiling['single']['p50_ms']:.3f} ms, "
                f"p99 {ceiling['single']['p99_ms']:.3f} ms\n",
                flush=True,
            )
        if args.skip_nats:
            rounds.append((results, None))
            continue
        nats = measure_nats()
        rounds.append((results, nats))
        missing = "not run: no peer benchmark program or venv (docs/benchmarks.md, NATS JetStream)"
        print(f"## round {round_no}: NATS JetStream R3\n")
        print("```\n" + (nats or missing) + "\n```\n", flush=True)
        if nats:
            per_round.append(ratios(results, ceilings, nats))
    if per_round:
        print(ratio_table(per_round))
    if args.spark:
        print(spark_rate())
    if args.charts:
        from bench_charts import draw

        for path in draw(rounds, args.charts, parse_nats):
            print(f"chart: {path}")


SPARK_ROWS_PER_S_MIN = 100_000  # the target: verified rows/s, wall clock, into the noop sink


def spark_rate() -> str:
    """scripts/bench_spark.py's noop runs (600,000 rows, one micro-batch, 2 partitions)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_spark.py"), "--count", "600000",
         "--partitions", "2", "--max-per-trigger", "1000000", "--runs", "3"],
        capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    walls = [
        float(line.split()[-2].replace(",", ""))
        for line in out.stdout.splitlines()
        if line.startswith("noop")
    ]
    median = statistics.median(walls)
    met = "met" if median >= SPARK_ROWS_PER_S_MIN else "not met"
    return (
        "## Spark: a streaming query into the noop sink\n\n"
        f"rows/s wall clock per run: {', '.join(f'{w:,.0f}' for w in walls)}; median "
        f"**{median:,.0f}** (target >= {SPARK_ROWS_PER_S_MIN:,}: {met})\n"
    )


def describe(r: dict[str, Any]) -> str:
    peak, single, half = r["peak"], r["single"], r["half"]
    return (
        f"- pipelined: {peak['tx_per_s']:,.0f} acked tx/s ({peak['acked']} acked, "
        f"{peak['failed']} failed, window {peak['settings']['window']} x "
        f"batch {peak['settings']['batch']})\n"
        f"- one in flight: p50 {single['p50_ms']:.3f} ms, p99 {single['p99_ms']:.3f} ms, "
        f"p99.9 {single['p999_ms']:.3f} ms ({single['tx_per_s']:,.0f} tx/s)\n"
        f"- at half the peak ({half['settings']['rate']:,.0f} tx/s offered, "
        f"{half['tx_per_s']:,.0f} acked): p50 {half['p50_ms']:.3f} ms, "
        f"p99 {half['p99_ms']:.3f} ms\n"
        + (
            f"- pipelined on a stream of three replicas: {r['peak_of_three']['tx_per_s']:,.0f} "
            "acked tx/s\n"
            if r["peak_of_three"]
            else ""
        )
        + f"- peak RSS per node (MB): {r['rss_mb']}\n"
        f"- log bytes per tx per node (100-byte payloads): {r['bytes_per_tx']:.0f}\n"
    )


def parse_nats(nats: str) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """The peer's best pipelined msg/s and its one-in-flight (p50, p99) in us, per storage."""
    best: dict[str, float] = {}
    sync: dict[str, tuple[float, float]] = {}
    for line in nats.splitlines():
        found = re.match(r"(memory|file)\s+async publish window=\d+: median ([\d,]+) msg/s", line)
        if found:
            rate = float(found[2].replace(",", ""))
            best[found[1]] = max(best.get(found[1], 0.0), rate)
        found = re.match(r"(memory|file)\s+sync publish: .* p50 ([\d,]+) us, p99 ([\d,]+) us", line)
        if found:
            sync[found[1]] = (float(found[2].replace(",", "")), float(found[3].replace(",", "")))
    return best, sync


def ratios(
    results: dict[tuple[int, str, str], dict[str, Any]],
    ceilings: dict[int, dict[str, Any]],
    nats: str,
) -> dict[str, float]:
    """The targets' ratios against the peer measured in the same round ({} if it failed)."""
    best, sync = parse_nats(nats)
    ceiling = ceilings[3]
    if len(best) < 2 or len(sync) < 2:
        return {}
    always, never = results[(3, "always", "curve")], results[(3, "never", "curve")]
    interval = results[(3, "interval", "curve")]
    plain, five = results[(3, "always", "none")], results[(5, "always", "curve")]
    return {
        "3 nodes always / JetStream file, pipelined": always["peak"]["tx_per_s"] / best["file"],
        "3 nodes never / JetStream memory, pipelined": never["peak"]["tx_per_s"] / best["memory"],
        "one in flight p99, always / file": always["single"]["p99_ms"] * 1000 / sync["file"][1],
        "one in flight p99, never / memory": never["single"]["p99_ms"] * 1000 / sync["memory"][1],
        # JetStream's file store syncs on an interval (2 minutes by default), not per publish:
        # relay's `interval` is the like-for-like durability, `always` the stronger one
        "3 nodes interval / JetStream file, pipelined": (
            interval["peak"]["tx_per_s"] / best["file"]
        ),
        "one in flight p99, interval / file": (
            interval["single"]["p99_ms"] * 1000 / sync["file"][1]
        ),
        "5 nodes / 3 nodes, always, pipelined": (
            five["peak"]["tx_per_s"] / always["peak"]["tx_per_s"]
        ),
        "5 nodes, stream on 3 of them / 3 nodes, always, pipelined": (
            five["peak_of_three"]["tx_per_s"] / always["peak"]["tx_per_s"]
        ),
        "CURVE on / off, always, pipelined": always["peak"]["tx_per_s"] / plain["peak"]["tx_per_s"],
        "CURVE on / off, one in flight p50": always["single"]["p50_ms"] / plain["single"]["p50_ms"],
        # the least Python program doing the hot path: how far relay is from it, and whether a
        # target lies above what Python reaches on this machine at all
        "ceiling / JetStream memory, pipelined": ceiling["pipelined"]["tx_per_s"] / best["memory"],
        "one in flight p99, ceiling / JetStream memory": (
            ceiling["single"]["p99_ms"] * 1000 / sync["memory"][1]
        ),
        "3 nodes never / ceiling, pipelined": (
            never["peak"]["tx_per_s"] / ceiling["pipelined"]["tx_per_s"]
        ),
        # every node folds every tx: on two cores five such processes share what three did
        "ceiling 5 nodes / 3 nodes, pipelined": (
            ceilings[5]["pipelined"]["tx_per_s"] / ceiling["pipelined"]["tx_per_s"]
        ),
    }


# the performance targets: (what the median must be, whether it is)
TARGETS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "3 nodes always / JetStream file, pipelined": (">= 3x", lambda r: r >= 3),
    "3 nodes never / JetStream memory, pipelined": (">= 3x", lambda r: r >= 3),
    "one in flight p99, always / file": ("<= 1x", lambda r: r <= 1),
    "one in flight p99, never / memory": ("<= 1x", lambda r: r <= 1),
    "5 nodes / 3 nodes, always, pipelined": (">= 0.75x", lambda r: r >= 0.75),
    "5 nodes, stream on 3 of them / 3 nodes, always, pipelined": (">= 0.75x", lambda r: r >= 0.75),
}


def ratio_table(per_round: list[dict[str, float]]) -> str:
    """Each target's ratio in every round, their median, and whether it meets the target."""
    complete = [r for r in per_round if r]
    if not complete:
        return "\n(ratios: the peer's output was not complete in any round)"
    rounds = " | ".join(f"round {i}" for i in range(1, len(complete) + 1))
    lines = [
        "## Ratios, each against the peer measured in the same round\n",
        f"| measure | {rounds} | median | target |",
        "|---|" + "---|" * (len(complete) + 2),
    ]
    for name in complete[0]:
        values = [r[name] for r in complete]
        cells = " | ".join(f"{v:.2f}x" for v in values)
        median = statistics.median(values)
        verdict = "-"
        if name in TARGETS:
            target, met = TARGETS[name]
            verdict = f"{target}: {'met' if met(median) else 'not met'}"
        lines.append(f"| {name} | {cells} | **{median:.2f}x** | {verdict} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
