"""A chaos run's report: ``report.txt`` (the checker's verdicts, the counts, each fault's
impact) and ``report.png`` (acknowledgements per second and publish latency over time, with
each fault's window shaded in its kind's colour), drawn with matplotlib's Agg backend."""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from chaos.checker import Analysis, render, rows

COLORS = {
    "kill": "#fabebe",
    "pause": "#fadca0",
    "partition": "#becdfa",
    "loss": "#c3ebbe",
    "clock": "#e1c8f0",
    "crash-all": "#d79696",
    "corrupt": "#f0afd7",
}
ACKS, WORST, MIDDLE = "#1e5ab4", "#c83228", "#288c3c"
SIZE_IN, DPI = (11.0, 6.5), 100  # 1100 x 650 pixels


def write(folder: Path, analysis: Analysis) -> str:
    settings = json.loads((folder / "run.json").read_text())
    text = headline(settings) + "\n\n" + render(analysis) + "\n"
    (folder / "report.txt").write_text(text)
    draw(folder, settings)
    return text


NETWORKS = {
    "local": "127.0.0.1, faults by admin hooks",
    "netns": "a namespace per node, faults by nftables",
}


def headline(settings: dict[str, Any]) -> str:
    net = settings.get("net", "local")  # runs recorded before --net were local
    return (
        f"chaos run: {settings['nodes']} nodes, {settings['duration_s']:.0f} s, "
        f"faults {','.join(settings['faults'])}, seed {settings['seed']}, "
        f"{settings['rate']:.0f} publishes/s offered, network {net} "
        f"({NETWORKS.get(net, 'unknown')})"
    )


def draw(folder: Path, settings: dict[str, Any], out: Path | None = None) -> Path:
    """Write the picture of the run in ``folder`` to ``out`` (default its ``report.png``)."""
    out = out or folder / "report.png"
    fig = figure(folder, settings)
    FigureCanvasAgg(fig)
    fig.savefig(out, dpi=DPI)
    return out


def figure(folder: Path, settings: dict[str, Any]) -> Figure:
    ops = list(rows(folder, "ops"))
    end = max([settings["duration_s"], *(op["t1"] for op in ops)]) + 1
    acks: dict[int, int] = defaultdict(int)
    latencies: dict[int, list[float]] = defaultdict(list)
    for op in ops:
        second = int(op["t1"])
        if op["outcome"] == "ok":
            acks[second] += 1
        latencies[second].append(op["t1"] - op["t0"])
    windows = fault_windows(folder, end)

    fig = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    fig.suptitle(textwrap.fill(headline(settings), 130), fontsize=11)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax in (top, bottom):
        for kind, t0, t1 in windows:
            ax.axvspan(t0, t1, color=COLORS[kind], linewidth=0, zorder=0)
        ax.grid(True, color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)

    seconds = range(int(end))
    mid = [s + 0.5 for s in seconds]
    per_second = [acks.get(s, 0) for s in seconds]
    peak = max(per_second, default=0)
    top.plot(mid, per_second, color=ACKS, linewidth=1.5)
    top.set_ylabel("acks/s")
    top.set_ylim(bottom=0)
    top.set_title(f"acknowledged publishes per second (peak {peak}/s)", fontsize=10, loc="left")

    gap = float("nan")  # no publish completed in that second: a break in the line
    worst = [max(latencies[s]) if s in latencies else gap for s in seconds]
    middle = [median(latencies[s]) if s in latencies else gap for s in seconds]
    top_s = max((max(v) for v in latencies.values()), default=0.0)
    line = {"linewidth": 1.5, "marker": ".", "markersize": 4}  # a dot shows a lone second
    bottom.plot(mid, worst, color=WORST, **line, label=f"max (top {top_s:.2f} s)")
    bottom.plot(mid, middle, color=MIDDLE, **line, label="median")
    bottom.set_yscale("log")
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bottom.set_ylabel("latency (s, log scale)")
    bottom.set_title("publish latency, per second of completion", fontsize=10, loc="left")
    bottom.legend(loc="lower right", bbox_to_anchor=(1, 1), ncols=2, fontsize=9, frameon=False)
    bottom.set_xlabel("time since the run started (s)")
    bottom.set_xlim(0, end)

    seen = {kind for kind, _, _ in windows}
    kinds = [k for k in COLORS if k in settings["faults"] or k in seen]
    if kinds:
        fig.legend(
            handles=[Patch(color=COLORS[k], label=k) for k in kinds],
            loc="outside lower center",
            ncols=len(kinds),
            title="fault windows",
            fontsize=9,
            title_fontsize=9,
            frameon=False,
        )
    return fig


def fault_windows(folder: Path, end: float) -> list[tuple[str, float, float]]:
    opened: dict[tuple[str, float], float] = {}
    windows = []
    for event in rows(folder, "faults"):
        key = (event["kind"], event["start_s"])
        if event["event"] == "start":
            opened[key] = event["t"]
        elif key in opened:
            windows.append((event["kind"], opened.pop(key), event["t"]))
    windows += [(kind, t, end) for (kind, _), t in opened.items()]  # never ended (interrupted)
    return windows
