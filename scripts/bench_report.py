"""Measure relay against NATS JetStream R3 in one run; print a markdown report.

For a 3-node cluster with each ``fsync`` setting (always, the default; interval; never), the
default once more without CURVE (what encryption costs), and a 5-node cluster with the
default: pipelined acked tx/s from one producer (100-byte payloads), ack latency with one
publish in flight, at half the measured peak with a consumer attached, each node's peak RSS and
the log's bytes per tx; for ``always`` and ``never`` also one publish in flight with a consumer
attached and open loop at 20,000 tx/s with a consumer (ack and end-to-end latency). Then
scripts/ceiling.py on 3 and on 5 nodes, the least Python program doing relay's hot path (no
disk, no deduplication, no encryption: what any Python design of relay could reach at most
here), and JetStream R3 (``scripts/bench_nats.py``, PyPI's ``nats-server`` of the bench extra)
with the same measures: file storage with ``sync_interval: always`` (relay's ``always``),
memory storage (relay's ``never``) and the default file store (synced every 2 minutes).
Every measure is taken --rounds times (default 3), relay and JetStream alternating, so each
round's ratio compares figures taken minutes apart; the median ratio is the one to read.
Usage: scripts/bench.sh [--count N] [--rounds N] [--skip-nats] [--charts DIR] [--spark]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from relay import compiled
from relay.runtime.launcher import child_env
from relay.runtime.local_cluster import LocalCluster

Results = dict[tuple[int, str, str], dict[str, Any]]  # by (nodes, fsync, security)
Peer = dict[str, dict[str, Any]]  # scripts/bench_nats.py's measures, by JetStream setting

ROOT = Path(__file__).resolve().parent.parent
NATS_SERVER = shutil.which("nats-server", path=str(Path(sys.executable).parent))
OPEN_LOOP_RATE = 20_000  # tx/s with a consumer attached: the latency targets' fixed load
LONE = ("--window", "1", "--batch", "1")
# a run of a comparison program (the peer's measures, the ceiling) that failed is tried once
# more, saying why, before the report gives up (one of three rounds failed once and its command
# ran clean alone just after); relay's own measures are not retried
COMPARISON_ATTEMPTS = 2


def run_json(*args: str) -> dict[str, Any]:
    """What a Python program of ours prints as JSON (``--json``)."""
    out = subprocess.run(
        [sys.executable, *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
        env=child_env(),
    )
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def run_comparison(what: str, *args: str) -> dict[str, Any]:
    """``run_json`` of a comparison program, tried ``COMPARISON_ATTEMPTS`` times."""
    attempt = 1
    while True:
        try:
            return run_json(*args)
        except subprocess.CalledProcessError as exc:
            said = (exc.stderr or "").strip().splitlines()[-5:]
            print(
                f"{what}: {Path(args[0]).name} exited {exc.returncode} "
                f"(attempt {attempt} of {COMPARISON_ATTEMPTS}):", *said, sep="\n  ",
                file=sys.stderr, flush=True,
            )  # fmt: skip
            if attempt == COMPARISON_ATTEMPTS:
                raise
            attempt += 1


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
        single = bench(cfg, "--stream", stream, "--count", "3000", *LONE, "--node", "1")
        found = {"peak": peak, "single": single}
        half = float(peak["tx_per_s"]) / 2
        found["half"] = bench(
            cfg, "--stream", stream, "--count", str(int(half * 10)), "--rate", str(int(half)),
            "--consumers", "1", "--node", "1",
        )  # fmt: skip
        if nodes == 3 and fsync in ("always", "never") and security == "curve":
            found["single_e2e"] = bench(
                cfg, "--stream", stream, "--count", "3000", *LONE, "--consumers", "1",
                "--node", "1",
            )  # fmt: skip
            found["open_loop"] = bench(
                cfg, "--stream", stream, "--count", str(OPEN_LOOP_RATE * 10),
                "--rate", str(OPEN_LOOP_RATE), "--consumers", "1", "--node", "1",
            )  # fmt: skip
        rss = [round(peak_rss_mb(p.pid), 1) for p in cluster.procs.values()]
        txs = sum(int(r["acked"]) for r in found.values())
        per_tx = log_bytes(cluster) / max(1, txs * nodes)
    # on 5 nodes events.* has five replicas; orders.* has three (JetStream's R3 on 5), measured
    # on a cluster of its own: like every other peak, on nodes that hold nothing yet (a node
    # holding the 800,000 txs of the runs above moves a tenth to a quarter fewer)
    three = fresh_peak(nodes, count, overrides, "orders.bench") if nodes >= 5 else None
    return {
        "nodes": nodes,
        "fsync": fsync,
        **found,
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
    ceiling = str(ROOT / "scripts" / "ceiling.py")
    return run_comparison(
        f"the ceiling on {nodes} nodes", ceiling, "--count", str(count), "--nodes", str(nodes)
    )


# JetStream's settings, each measured in every round: (name, scripts/bench_nats.py options)
NATS_SETTINGS = (
    ("file, sync_interval: always", ("--storage", "file", "--sync-always")),
    ("memory", ("--storage", "memory")),
    ("file, default sync", ("--storage", "file")),
)
# one nats-py client publishes at most about 20,000 msg/s here: JetStream's pipelined rate is
# also measured from this many publisher processes at once, and its best counts
NATS_PUBLISHERS = 3


def peer_pipelined(m: dict[str, Any]) -> float:
    """JetStream's best pipelined rate: from one client, or from ``NATS_PUBLISHERS``."""
    alone: float = m["pipelined"]["tx_per_s"]
    together: float = m.get("pipelined_by", {}).get("tx_per_s", 0.0)
    return max(alone, together)


def measure_nats(count: int) -> dict[str, dict[str, Any]] | None:
    """Each JetStream setting's measures (``scripts/bench_nats.py``), or None without the
    bench extra's ``nats-server``."""
    if NATS_SERVER is None:
        return None
    found = {}
    for name, options in NATS_SETTINGS:
        rates = ("--rates", str(OPEN_LOOP_RATE)) if "default" not in name else ()
        command = (
            str(ROOT / "scripts" / "bench_nats.py"), "--server", NATS_SERVER, *options,
            "--count", str(min(count, 100_000)), *rates,
            "--publishers", str(NATS_PUBLISHERS),
        )  # fmt: skip
        found[name] = run_comparison(f"JetStream {name}", *command)
    return found


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
    print(f"relay's core: {compiled.choose()} (relay/compiled.py)\n")  # what the nodes run
    per_round: list[dict[str, float]] = []
    rounds: list[tuple[Results, Peer | None]] = []
    latency_rounds: list[dict[str, list[float]]] = []
    for round_no in range(1, args.rounds + 1):
        results: Results = {}
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
        nats = None if args.skip_nats else measure_nats(args.count)
        rounds.append((results, nats))
        if args.skip_nats:
            continue
        print(f"## round {round_no}: NATS JetStream R3 (scripts/bench_nats.py)\n")
        print(describe_nats(nats), flush=True)
        if nats:
            per_round.append(ratios(results, ceilings, nats))
            latency_rounds.append(latency_rows(results, nats))
    print(absolute_targets([results for results, _ in rounds]))
    if latency_rounds:
        print(latency_table(latency_rounds))
    if per_round:
        print(ratio_table(per_round))
    if args.spark:
        print(spark_rate())
    if args.charts:
        from bench_charts import draw

        for path in draw(rounds, args.charts):
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
    lines = [
        f"- pipelined: {peak['tx_per_s']:,.0f} acked tx/s ({peak['acked']} acked, "
        f"{peak['failed']} failed, window {peak['settings']['window']} x "
        f"batch {peak['settings']['batch']})",
        f"- one in flight: p50 {single['p50_ms']:.3f} ms, p99 {single['p99_ms']:.3f} ms, "
        f"p99.9 {single['p999_ms']:.3f} ms ({single['tx_per_s']:,.0f} tx/s)",
        f"- at half the peak with a consumer ({half['settings']['rate']:,.0f} tx/s offered, "
        f"{half['tx_per_s']:,.0f} tx/s acked): {latencies(half)}",
    ]
    if "single_e2e" in r:
        lines.append(f"- one in flight with a consumer: {latencies(r['single_e2e'])}")
        loop = r["open_loop"]
        lines.append(
            f"- open loop at {loop['settings']['rate']:,.0f} tx/s with a consumer "
            f"({loop['tx_per_s']:,.0f} tx/s acked): {latencies(loop)}"
        )
    if r["peak_of_three"]:
        lines.append(
            f"- pipelined on a stream of three replicas: {r['peak_of_three']['tx_per_s']:,.0f} "
            "acked tx/s"
        )
    lines.append(f"- peak RSS per node (MB): {r['rss_mb']}")
    lines.append(f"- log bytes per tx per node (100-byte payloads): {r['bytes_per_tx']:.0f}")
    return "\n".join(lines) + "\n"


def latencies(m: dict[str, Any]) -> str:
    """Ack (and, with a consumer, end-to-end) p50 / p99 of one measure, in ms."""
    text = f"ack p50 {m['p50_ms']:.3f} ms, p99 {m['p99_ms']:.3f} ms"
    if m.get("consumed"):
        text += f"; end to end p50 {m['e2e_p50_ms']:.3f} ms, p99 {m['e2e_p99_ms']:.3f} ms"
    return text


def describe_nats(nats: Peer | None) -> str:
    if nats is None:
        return "not run: no nats-server beside this Python (the bench extra)\n"
    lines = []
    for name, m in nats.items():
        lines.append(f"- {name}: pipelined {m['pipelined']['tx_per_s']:,.0f} acked msg/s")
        if "pipelined_by" in m:
            by = m["pipelined_by"]
            lines.append(
                f"  - pipelined from {by['publishers']} publisher processes: "
                f"{by['tx_per_s']:,.0f} acked msg/s"
            )
        lines.append(f"  - one in flight: {latencies(m['lone'])}")
        lines.append(f"  - one in flight with a consumer: {latencies(m['lone_e2e'])}")
        for key, loop in m.items():
            if key.startswith("rate "):
                lines.append(
                    f"  - open loop at {loop['offered']:,.0f} msg/s with a consumer "
                    f"({loop['tx_per_s']:,.0f} tx/s acked): {latencies(loop)}"
                )
    return "\n".join(lines) + "\n"


# the pairs of like durability: (relay fsync, JetStream setting)
PAIRS = (("always", "file, sync_interval: always"), ("never", "memory"))


def latency_rows(results: Results, nats: Peer) -> dict[str, list[float]]:
    """One round's row per system: pipelined tx/s; one in flight p50 and p99; with a
    consumer, one in flight end to end p50 and p99; open loop ack and end-to-end p99."""
    rows = {}
    for fsync, peer in PAIRS:
        r = results[(3, fsync, "curve")]
        rows[f"relay `{fsync}`"] = [
            r["peak"]["tx_per_s"], r["single"]["p50_ms"], r["single"]["p99_ms"],
            r["single_e2e"]["e2e_p50_ms"], r["single_e2e"]["e2e_p99_ms"],
            r["open_loop"]["p99_ms"], r["open_loop"]["e2e_p99_ms"],
        ]  # fmt: skip
        m = nats[peer]
        loop = m[f"rate {OPEN_LOOP_RATE}"]
        rows[f"JetStream {peer}"] = [
            peer_pipelined(m), m["lone"]["p50_ms"], m["lone"]["p99_ms"],
            m["lone_e2e"]["e2e_p50_ms"], m["lone_e2e"]["e2e_p99_ms"],
            loop["p99_ms"], loop["e2e_p99_ms"],
        ]  # fmt: skip
    return rows


def latency_table(per_round: list[dict[str, list[float]]]) -> str:
    """The medians over rounds of each system's row (``latency_rows``)."""
    lines = [
        "## Latency against JetStream, like durability, medians of rounds\n",
        "| | pipelined tx/s | one in flight p50 ms | p99 | with a consumer, end to end p50 "
        f"| p99 | open loop {OPEN_LOOP_RATE:,} tx/s, ack p99 | end to end p99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in per_round[0]:
        medians = [statistics.median(r[name][i] for r in per_round) for i in range(7)]
        cells = [f"{medians[0]:,.0f}", *(f"{v:.2f}" for v in medians[1:])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# open loop with a consumer: (measure, its bound on ack and end-to-end p99 in ms)
LOAD_TARGETS = (("open_loop", 10.0), ("half", 25.0))


def absolute_targets(per_round: list[Results]) -> str:
    """Open loop at 20,000 tx/s and at half the peak, with a consumer: the medians over rounds
    of ack and end-to-end p99 on 3 nodes, against their bounds."""
    lines = ["## Latency under load, 3 nodes, medians of rounds\n"]
    for fsync in ("always", "never"):
        for measure, bound in LOAD_TARGETS:
            found = [r[(3, fsync, "curve")][measure] for r in per_round]
            ack = statistics.median(m["p99_ms"] for m in found)
            e2e = statistics.median(m["e2e_p99_ms"] for m in found)
            rate = statistics.median(m["settings"]["rate"] for m in found)
            met = "met" if max(ack, e2e) < bound else "not met"
            lines.append(
                f"- `{fsync}`, open loop at {rate:,.0f} tx/s: ack p99 {ack:.2f} ms, end to end "
                f"p99 {e2e:.2f} ms (target < {bound:.0f} ms: {met})"
            )
    return "\n".join(lines) + "\n"


def ratios(results: Results, ceilings: dict[int, dict[str, Any]], nats: Peer) -> dict[str, float]:
    """The targets' ratios against the peer measured in the same round."""
    ceiling = ceilings[3]
    always, never = results[(3, "always", "curve")], results[(3, "never", "curve")]
    interval = results[(3, "interval", "curve")]
    plain, five = results[(3, "always", "none")], results[(5, "always", "curve")]
    synced, memory = nats["file, sync_interval: always"], nats["memory"]
    default = nats["file, default sync"]
    return {
        "3 nodes always / JetStream file sync always, pipelined": (
            always["peak"]["tx_per_s"] / peer_pipelined(synced)
        ),
        "3 nodes never / JetStream memory, pipelined": (
            never["peak"]["tx_per_s"] / peer_pipelined(memory)
        ),
        "3 nodes interval / JetStream file default sync, pipelined": (
            interval["peak"]["tx_per_s"] / peer_pipelined(default)
        ),
        "one in flight p99, always / file sync always": (
            always["single"]["p99_ms"] / synced["lone"]["p99_ms"]
        ),
        "one in flight p99, never / memory": never["single"]["p99_ms"] / memory["lone"]["p99_ms"],
        "one in flight p50, always / ceiling": (
            always["single"]["p50_ms"] / ceiling["single"]["p50_ms"]
        ),
        "one in flight p50, never / ceiling": (
            never["single"]["p50_ms"] / ceiling["single"]["p50_ms"]
        ),
        "end to end p99, always / file sync always": (
            always["single_e2e"]["e2e_p99_ms"] / synced["lone_e2e"]["e2e_p99_ms"]
        ),
        "end to end p99, never / memory": (
            never["single_e2e"]["e2e_p99_ms"] / memory["lone_e2e"]["e2e_p99_ms"]
        ),
        "5 nodes / 3 nodes, always, pipelined, over the ceiling's 5 / 3": (
            five["peak"]["tx_per_s"] / always["peak"]["tx_per_s"]
        )
        / (ceilings[5]["pipelined"]["tx_per_s"] / ceiling["pipelined"]["tx_per_s"]),
        "5 nodes, stream on 3 of them / 3 nodes, always, pipelined": (
            five["peak_of_three"]["tx_per_s"] / always["peak"]["tx_per_s"]
        ),
        "CURVE on / off, always, pipelined": always["peak"]["tx_per_s"] / plain["peak"]["tx_per_s"],
        "CURVE on / off, one in flight p50": always["single"]["p50_ms"] / plain["single"]["p50_ms"],
        "3 nodes never / ceiling, pipelined": (
            never["peak"]["tx_per_s"] / ceiling["pipelined"]["tx_per_s"]
        ),
        "ceiling 5 nodes / 3 nodes, pipelined": (
            ceilings[5]["pipelined"]["tx_per_s"] / ceiling["pipelined"]["tx_per_s"]
        ),
    }


# the performance targets: (what the median must be, whether it is)
TARGETS: dict[str, tuple[str, Callable[[float], bool]]] = {
    "3 nodes always / JetStream file sync always, pipelined": (">= 4x", lambda r: r >= 4),
    "3 nodes never / JetStream memory, pipelined": (">= 3x", lambda r: r >= 3),
    "one in flight p99, always / file sync always": ("<= 1x", lambda r: r <= 1),
    "one in flight p99, never / memory": ("<= 1x", lambda r: r <= 1),
    "one in flight p50, always / ceiling": ("<= 2x", lambda r: r <= 2),
    "one in flight p50, never / ceiling": ("<= 2x", lambda r: r <= 2),
    "end to end p99, always / file sync always": ("<= 1x", lambda r: r <= 1),
    "end to end p99, never / memory": ("<= 1x", lambda r: r <= 1),
    "5 nodes / 3 nodes, always, pipelined, over the ceiling's 5 / 3": (
        ">= 0.95x",
        lambda r: r >= 0.95,
    ),
    "5 nodes, stream on 3 of them / 3 nodes, always, pipelined": (">= 0.75x", lambda r: r >= 0.75),
}


def ratio_table(per_round: list[dict[str, float]]) -> str:
    """Each target's ratio in every round, their median, and whether it meets the target."""
    rounds = " | ".join(f"round {i}" for i in range(1, len(per_round) + 1))
    lines = [
        "## Ratios, each against the peer measured in the same round\n",
        f"| measure | {rounds} | median | target |",
        "|---|" + "---|" * (len(per_round) + 2),
    ]
    for name in per_round[0]:
        values = [r[name] for r in per_round]
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
