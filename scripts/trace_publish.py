"""Where one publish's time goes: a 3-node cluster whose nodes trace their loop turns
(``relay node --trace``), a producer publishing one message at a time (``--pause-ms`` apart;
a window may then also hold the previous publish's last acks), and the turns of every node
lined up against each publish on the monotonic clock (one clock for all processes of the
machine).

Prints, for the publish of median latency (or of ``--quantile``), every turn in its window
(node, start and end in us after the producer's send, what it took in and what it did), and
over all publishes the median latency, the median turns per node, and the median busy time per
node inside the window; the CPU each node's loop spent per turn, by what the turn took; then
what the longest turn in each of the slowest 1% of windows was doing (the tail's causes).
Usage: scripts/trace_publish.sh [--fsync always|interval|never] [--publishes N] [--pause-ms MS]
[--quantile Q]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

from relay import Producer
from relay.runtime.local_cluster import LocalCluster

Turn = dict[str, Any]
Windows = list[tuple[int, int]]  # (sent, acked) of each publish, monotonic ns


def run(
    fsync: str, publishes: int, pause_ms: int, folder: Path
) -> tuple[Windows, dict[int, list[Turn]]]:
    traces = {n: folder / f"node{n}.trace" for n in (1, 2, 3)}
    args = {n: ["--trace", str(path)] for n, path in traces.items()}
    windows: Windows = []
    with LocalCluster(folder / "c", nodes=3, overrides={"fsync": fsync}, node_args=args) as c:
        c.start()
        c.wait_serving()
        with Producer(config=c.config_path, window=1, batch_max=1, node=1) as producer:
            producer.publish("trace", b"warm")
            for _ in range(publishes):
                time.sleep(pause_ms / 1000)
                sent = time.monotonic_ns()
                producer.publish("trace", b"x" * 100)
                windows.append((sent, time.monotonic_ns()))
        for n in traces:
            c.stop(n)  # SIGTERM: each node writes its trace as it stops
    turns = {n: [json.loads(line) for line in path.open()] for n, path in traces.items()}
    return windows, turns


def inside(turns: list[Turn], window: tuple[int, int]) -> list[Turn]:
    start, end = window
    return [t for t in turns if t["end"] >= start and t["start"] <= end]


PHASES = "in / core / out / after"


def phases(turn: Turn) -> tuple[float, ...]:
    """A turn's reading and decoding, core, effects and after (log reads, the sync), in us."""
    stamps = [turn[k] for k in ("start", "core", "effects", "after", "end")]
    return tuple((b - a) / 1000 for a, b in pairwise(stamps))


def cpu_phases(turn: Turn) -> tuple[float, ...]:
    """The CPU the loop's thread spent in each phase of a turn, in us."""
    return tuple(ns / 1000 for ns in turn["cpu"])


def taken(turn: Turn) -> str:
    return ", ".join(sorted(turn["in"])) or "-"


def describe(turn: Turn) -> str:
    took = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(turn["in"].items()))
    did = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(turn["out"].items()))
    return f"in: {took or '-'}; out: {did or '-'}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fsync", default="never", choices=["always", "interval", "never"])
    parser.add_argument("--publishes", type=int, default=300)
    parser.add_argument(
        "--pause-ms", type=int, default=0, help="between publishes (past promise_lead_ms: idle)"
    )
    parser.add_argument("--quantile", type=float, default=0.5, help="which publish to show")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        windows, turns = run(args.fsync, args.publishes, args.pause_ms, Path(tmp))
    latencies = [(end - start) / 1000 for start, end in windows]
    order = sorted(range(len(windows)), key=lambda i: latencies[i])
    median_i = order[min(len(order) - 1, int(len(order) * args.quantile))]
    print(
        f"# one publish at a time, fsync = {args.fsync}, {len(windows)} publishes, "
        f"{args.pause_ms} ms apart\n"
    )
    print(
        f"latency p50 {statistics.median(latencies):.0f} us; the publish at quantile "
        f"{args.quantile}:\n"
    )
    start = windows[median_i][0]
    rows = sorted(
        (t["start"], n, t) for n, ts in turns.items() for t in inside(ts, windows[median_i])
    )
    print(f"| node | turn start (us) | end (us) | busy (us) | {PHASES} (us) | CPU | what |")
    print("|---|---|---|---|---|---|---|")
    for _, n, t in rows:
        begin, end = (t["start"] - start) / 1000, (t["end"] - start) / 1000
        split = " / ".join(f"{us:.0f}" for us in phases(t))
        cpu = " / ".join(f"{us:.0f}" for us in cpu_phases(t))
        line = f"| {n} | {begin:.0f} | {end:.0f} | {end - begin:.0f} | {split} | {cpu} |"
        print(f"{line} {describe(t)} |")
    print(f"| producer | 0 | {latencies[median_i]:.0f} | | | | send, then the ack |\n")
    print("Over all publishes (median per publish; in: reading and decoding the sockets, core:")
    print("the core's turn, out: carrying out its effects, after: log reads and the sync of the")
    print("turn's writes when it runs in the loop, each summed over the window's turns):\n")
    print(f"| node | turns in the window | busy us in the window | {PHASES} (us) |")
    print("|---|---|---|---|")
    for n, ts in sorted(turns.items()):
        counts, busy, sums = [], [], []
        for w in windows:
            found = inside(ts, w)
            counts.append(len(found))
            busy.append(sum(t["end"] - t["start"] for t in found) / 1000)
            sums.append([sum(p) for p in zip(*map(phases, found), strict=True)] or [0] * 4)
        medians = " / ".join(f"{statistics.median(p):.0f}" for p in zip(*sums, strict=True))
        print(
            f"| {n} | {statistics.median(counts):.0f} | {statistics.median(busy):.0f} | {medians} |"
        )
    print(by_kind(turns))
    print(tail(windows, turns, order[-max(1, len(order) // 100) :]))


def by_kind(turns: dict[int, list[Turn]]) -> str:
    """The CPU of every traced turn, by node and by the kinds of what it took: a turn's own
    cost, without the waits for a core that its wall time holds."""
    lines = ["\nCPU of the loop's thread per turn, by what the turn took (median, us):\n"]
    lines += [f"| node | took | turns | {PHASES} | all |", "|---|---|---|---|---|"]
    for n, ts in sorted(turns.items()):
        groups: dict[str, list[Turn]] = {}
        for t in ts:
            groups.setdefault(taken(t), []).append(t)
        for kind, group in sorted(groups.items(), key=lambda g: -len(g[1]))[:4]:
            split = [statistics.median(p) for p in zip(*map(cpu_phases, group), strict=True)]
            whole = statistics.median(sum(cpu_phases(t)) for t in group)
            shown = " / ".join(f"{us:.0f}" for us in split)
            lines.append(f"| {n} | {kind} | {len(group)} | {shown} | {whole:.0f} |")
    return "\n".join(lines)


def tail(windows: Windows, turns: dict[int, list[Turn]], slowest: list[int]) -> str:
    """What the longest turn inside each of the ``slowest`` windows was doing, counted."""
    found: Counter[str] = Counter()
    for i in slowest:
        inner = [
            (t["end"] - t["start"], n, t) for n, ts in turns.items() for t in inside(ts, windows[i])
        ]
        if inner:
            busy, n, t = max(inner, key=lambda x: x[0])
            found[f"node {n}, {busy // 1000 // 100 * 100}+ us, {describe(t)}"] += 1
    lines = [f"\nThe longest turn in each of the slowest {len(slowest)} publishes:\n"]
    lines += [f"- {count} x {what}" for what, count in found.most_common(12)]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
