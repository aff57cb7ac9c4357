"""A chaos run's report: ``report.txt`` (the checker's verdicts, the counts, each fault's
impact) and ``report.png`` (acknowledgements per second and publish latency over time, with
each fault's window shaded in its colour)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Any

from chaos.checker import Analysis, render, rows
from chaos.picture import Canvas, Color

COLORS: dict[str, Color] = {
    "kill": (250, 190, 190),
    "pause": (250, 220, 160),
    "partition": (190, 205, 250),
    "loss": (195, 235, 190),
    "clock": (225, 200, 240),
    "crash-all": (215, 150, 150),
    "corrupt": (240, 175, 215),
}
INK: Color = (40, 40, 40)
GRID: Color = (220, 220, 220)
ACKS: Color = (30, 90, 180)
WORST: Color = (200, 50, 40)
MIDDLE: Color = (40, 140, 60)
WIDTH, HEIGHT, LEFT, RIGHT = 1100, 560, 80, 20


def write(folder: Path, analysis: Analysis) -> str:
    settings = json.loads((folder / "run.json").read_text())
    head = (
        f"chaos run: {settings['nodes']} nodes, {settings['duration_s']:.0f} s, "
        f"faults {','.join(settings['faults'])}, seed {settings['seed']}, "
        f"{settings['rate']:.0f} publishes/s offered"
    )
    text = head + "\n\n" + render(analysis) + "\n"
    (folder / "report.txt").write_text(text)
    draw(folder, settings)
    return text


def draw(folder: Path, settings: dict[str, Any]) -> None:
    ops = [op for op in rows(folder, "ops")]
    end = max([settings["duration_s"], *(op["t1"] for op in ops)]) + 1
    acks: dict[int, int] = defaultdict(int)
    latencies: dict[int, list[float]] = defaultdict(list)
    for op in ops:
        second = int(op["t1"])
        if op["outcome"] == "ok":
            acks[second] += 1
        latencies[second].append(op["t1"] - op["t0"])
    windows = fault_windows(folder, end)

    c = Canvas(WIDTH, HEIGHT)
    top, bottom = (40, 250), (300, 500)
    peak_acks = max(acks.values(), default=1)
    peak_latency = max((max(v) for v in latencies.values()), default=0.01)
    for y0, y1 in (top, bottom):
        for kind, t0, t1 in windows:
            c.rect(x_of(t0, end), y0, x_of(t1, end) + 1, y1, COLORS[kind])
        c.line(LEFT, y1, WIDTH - RIGHT, y1, INK)
        c.line(LEFT, y0, LEFT, y1, INK)
        c.line(LEFT, (y0 + y1) // 2, WIDTH - RIGHT, (y0 + y1) // 2, GRID)
    series(
        c, [(s + 0.5, float(acks.get(s, 0))) for s in range(int(end))], peak_acks, top, end, ACKS
    )
    worst = [(s + 0.5, max(v)) for s, v in sorted(latencies.items())]
    middle = [(s + 0.5, median(v)) for s, v in sorted(latencies.items())]
    series(c, worst, peak_latency, bottom, end, WORST)
    series(c, middle, peak_latency, bottom, end, MIDDLE)

    c.text(LEFT, 14, f"acks per second (max {peak_acks})", ACKS)
    c.text(LEFT, 274, "publish latency s: ", INK)
    c.text(LEFT + 19 * 8, 274, "max", WORST)
    c.text(LEFT + 23 * 8, 274, f"median (top {peak_latency:.2f})", MIDDLE)
    for label, value, (y0, y1) in ((str(peak_acks), 0, top), (f"{peak_latency:.2f}", 0, bottom)):
        c.text(8, y0 - 4, label, INK)
        c.text(8, y1 - 10, str(value), INK)
    step = 10 if end <= 150 else 30
    for t in range(0, int(end) + 1, step):
        x = x_of(t, end)
        c.line(x, bottom[1], x, bottom[1] + 5, INK)
        c.text(x - 6, bottom[1] + 10, str(t), INK)
    c.text(8, bottom[1] + 10, "t (s)", INK)
    x = LEFT
    for kind, color in COLORS.items():
        if kind in settings["faults"]:
            c.rect(x, HEIGHT - 26, x + 18, HEIGHT - 12, color)
            c.text(x + 24, HEIGHT - 24, kind, INK)
            x += 24 + 8 * len(kind) + 30
    c.save(folder / "report.png")


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


def x_of(t: float, end: float) -> int:
    return LEFT + int((WIDTH - LEFT - RIGHT) * t / end)


def series(
    c: Canvas,
    points: list[tuple[float, float]],
    peak: float,
    band: tuple[int, int],
    end: float,
    color: Color,
) -> None:
    y0, y1 = band
    previous = None
    for t, value in points:
        here = (x_of(t, end), y1 - int((y1 - y0) * min(value, peak) / (peak or 1)))
        if previous is not None:
            c.line(*previous, *here, color, width=2)
        previous = here
