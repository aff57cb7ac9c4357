"""The charts of a ``scripts/bench.sh`` run (``--charts DIR``): pipelined throughput of each
relay setting and node count beside NATS JetStream R3, and one-publish-in-flight latency
(p50 and p99) of relay and JetStream, each the median over the run's rounds."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:  # bench_report imports this module when asked for charts
    from bench_report import Peer, Results

RELAY, PEER = "#1e5ab4", "#9a9a9a"


def draw(rounds: list[tuple[Results, Peer | None]], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    peers = [nats for _, nats in rounds if nats]
    throughput: dict[str, tuple[float, str]] = {}
    for nodes, fsync, security in rounds[0][0]:
        rates = [r[(nodes, fsync, security)]["peak"]["tx_per_s"] for r, _ in rounds]
        plain = "" if security == "curve" else ", no CURVE"
        throughput[f"relay {nodes} nodes\n{fsync}{plain}"] = (statistics.median(rates), RELAY)
    for setting in peers[0] if peers else ():
        found = [p[setting]["pipelined"]["tx_per_s"] for p in peers]
        throughput[f"JetStream R3\n{setting}"] = (statistics.median(found), PEER)
    latency: dict[str, tuple[float, float, str]] = {}
    for fsync in ("always", "never"):
        singles = [r[(3, fsync, "curve")]["single"] for r, _ in rounds if (3, fsync, "curve") in r]
        if singles:
            latency[f"relay 3 nodes\n{fsync}"] = (
                statistics.median(s["p50_ms"] for s in singles),
                statistics.median(s["p99_ms"] for s in singles),
                RELAY,
            )
    for setting in peers[0] if peers else ():
        lone = [p[setting]["lone"] for p in peers]
        latency[f"JetStream R3\n{setting}"] = (
            statistics.median(m["p50_ms"] for m in lone),
            statistics.median(m["p99_ms"] for m in lone),
            PEER,
        )
    return [_throughput(throughput, folder), _latency(latency, folder)]


def _throughput(bars: dict[str, tuple[float, str]], folder: Path) -> Path:
    fig = Figure(figsize=(10, 4.5), dpi=100, layout="constrained")
    ax = fig.subplots()
    names = list(bars)
    ax.bar(names, [v for v, _ in bars.values()], color=[c for _, c in bars.values()])
    for i, (value, _) in enumerate(bars.values()):
        ax.text(i, value, f"{value:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("acknowledged tx/s (median of rounds)")
    ax.set_title("pipelined publish throughput, 100-byte payloads, one producer", loc="left")
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(True, axis="y", color="#dddddd")
    ax.set_axisbelow(True)
    return _save(fig, folder / "bench-throughput.png")


def _latency(bars: dict[str, tuple[float, float, str]], folder: Path) -> Path:
    fig = Figure(figsize=(10, 4.5), dpi=100, layout="constrained")
    ax = fig.subplots()
    x = list(range(len(bars)))
    width = 0.38
    values = list(bars.values())
    ax.bar(
        [i - width / 2 for i in x],
        [p50 for p50, _, _ in values],
        width,
        label="p50",
        color=[c for _, _, c in values],
        alpha=0.6,
    )
    ax.bar(
        [i + width / 2 for i in x],
        [p99 for _, p99, _ in values],
        width,
        label="p99",
        color=[c for _, _, c in values],
    )
    for i, (p50, p99, _) in enumerate(values):
        ax.text(i - width / 2, p50, f"{p50:.2f}", ha="center", va="bottom", fontsize=8)
        ax.text(i + width / 2, p99, f"{p99:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, list(bars), fontsize=8)
    ax.set_ylabel("ms (median of rounds)")
    ax.set_title("one publish in flight: ack latency p50 (light) and p99 (dark)", loc="left")
    ax.grid(True, axis="y", color="#dddddd")
    ax.set_axisbelow(True)
    return _save(fig, folder / "bench-latency.png")


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path)
    return path
