"""A chaos run's report: ``report.txt`` (the checker's verdicts, the counts, each fault's
impact) and ``report.png`` (acknowledgements per second per stream, and publish latency p50
and p99 on a log scale, over time, with each fault's window shaded in its kind's colour and
labelled with the nodes it hit), drawn with matplotlib's Agg backend."""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from chaos.checker import Analysis, render, rows
from relay.bench import percentile

COLORS = {
    "kill": "#fabebe",
    "pause": "#fadca0",
    "partition": "#becdfa",
    "loss": "#c3ebbe",
    "clock": "#e1c8f0",
    "crash-all": "#d79696",
    "corrupt": "#f0afd7",
}
WORST, MIDDLE = "#c83228", "#288c3c"
STREAM_COLORS = ("#1e5ab4", "#e08214", "#7b3294", "#008837", "#5e3c99", "#b2182b")
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
    net = settings.get("net", "local")  # a run.json without it: every node on 127.0.0.1
    return (
        f"chaos run: {settings['nodes']} nodes, {settings['duration_s']:.0f} s, "
        f"faults {','.join(settings['faults'])}, seed {settings['seed']}, "
        f"{settings['rate']:.0f} publishes/s offered, network {net} "
        f"({NETWORKS.get(net, 'unknown')}), fsync {settings.get('fsync', 'always')}"
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
    acks: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    latencies: dict[int, list[float]] = defaultdict(list)
    for op in ops:
        second = int(op["t1"])
        if op["outcome"] == "ok":
            acks[op.get("stream", "?")][second] += 1
        latencies[second].append(op["t1"] - op["t0"])
    windows = fault_windows(folder, end)

    fig = Figure(figsize=SIZE_IN, dpi=DPI, layout="constrained")
    fig.suptitle(textwrap.fill(headline(settings), 130), fontsize=11)
    top, bottom = fig.subplots(2, 1, sharex=True)
    for ax in (top, bottom):
        for kind, t0, t1, _ in windows:
            ax.axvspan(t0, t1, color=COLORS[kind], linewidth=0, zorder=0)
        ax.grid(True, color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)

    seconds = range(int(end))
    mid = [s + 0.5 for s in seconds]
    peak = 0
    for i, stream in enumerate(sorted(acks)):
        per_second = [acks[stream].get(s, 0) for s in seconds]
        peak = max(peak, *per_second)
        top.plot(
            mid,
            per_second,
            color=STREAM_COLORS[i % len(STREAM_COLORS)],
            linewidth=1.2,
            label=stream,
        )
    top.set_ylabel("acks/s")
    top.set_ylim(bottom=0, top=max(1, peak) * 1.25)  # room for the fault labels
    top.set_title("acknowledged publishes per second, per stream", fontsize=10, loc="left")
    top.legend(loc="lower right", bbox_to_anchor=(1, 1), ncols=4, fontsize=8, frameon=False)
    label_faults(top, windows, max(1, peak) * 1.22)

    gap = float("nan")  # no publish completed in that second: a break in the line
    for values in latencies.values():
        values.sort()
    p99 = [percentile(latencies[s], 0.99) if s in latencies else gap for s in seconds]
    p50 = [percentile(latencies[s], 0.50) if s in latencies else gap for s in seconds]
    top_s = max((max(v) for v in latencies.values()), default=0.0)
    line = {"linewidth": 1.5, "marker": ".", "markersize": 4}  # a dot shows a lone second
    bottom.plot(mid, p99, color=WORST, **line, label=f"p99 (max {top_s:.2f} s)")
    bottom.plot(mid, p50, color=MIDDLE, **line, label="p50")
    bottom.set_yscale("log")
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    bottom.set_ylabel("latency (s, log scale)")
    bottom.set_title("publish latency, per second of completion", fontsize=10, loc="left")
    bottom.legend(loc="lower right", bbox_to_anchor=(1, 1), ncols=2, fontsize=9, frameon=False)
    bottom.set_xlabel("time since the run started (m:ss)")
    bottom.xaxis.set_major_formatter(FuncFormatter(minutes_seconds))
    bottom.set_xlim(0, end)

    seen = {kind for kind, _, _, _ in windows}
    kinds = [k for k in COLORS if k in settings["faults"] or k in seen]
    if kinds:
        fig.legend(
            handles=[Patch(color=COLORS[k], label=k) for k in kinds],
            loc="outside lower center",
            ncols=len(kinds),
            title="fault windows (labelled with the nodes they hit)",
            fontsize=9,
            title_fontsize=9,
            frameon=False,
        )
    return fig


def minutes_seconds(value: float, _: object) -> str:
    return f"{int(value) // 60}:{int(value) % 60:02d}"


def label_faults(ax: Any, windows: list[tuple[str, float, float, str]], y: float) -> None:
    """Name the nodes each fault hit at the top of its band, staggered where bands crowd."""
    last_x, row = -1e9, 0
    for kind, t0, _, nodes in sorted(windows, key=lambda w: w[1]):
        row = row + 1 if t0 - last_x < 6 else 0
        last_x = t0
        ax.text(
            t0,
            y * (1 - 0.07 * (row % 3)),
            f"{kind} {nodes}",
            fontsize=7,
            va="top",
            color="#444444",
            clip_on=True,
        )


def fault_windows(folder: Path, end: float) -> list[tuple[str, float, float, str]]:
    """(kind, start, end, the nodes it hit) of every fault."""
    opened: dict[tuple[str, float], tuple[float, str]] = {}
    windows = []
    for event in rows(folder, "faults"):
        key = (event["kind"], event["start_s"])
        if event["event"] == "start":
            opened[key] = (event["t"], ",".join(str(n) for n in event.get("nodes", [])))
        elif key in opened:
            t0, nodes = opened.pop(key)
            windows.append((event["kind"], t0, event["t"], nodes))
    windows += [(kind, t, end, nodes) for (kind, _), (t, nodes) in opened.items()]  # interrupted
    return windows
