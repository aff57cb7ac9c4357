"""Reads a chaos run's history and says, per invariant, whether it held.

Input: the run folder (``run.json``, ``ops.jsonl``, ``deliveries.jsonl``, ``faults.jsonl``,
``states.jsonl``, ``final.jsonl``). The invariants, as a user of the cluster would state them:

- acknowledged-not-lost: every publish answered ``ok`` is in the final timeline of its stream,
  at the seq it was acknowledged with and with its payload.
- no-double-delivery: no consumer received the same seq twice.
- one-order: every consumer received a prefix of the final timeline, in its order (same seqs,
  same digests, nothing skipped).
- replicas-agree: at the end every replica of a stream is at the same verified seq with the same
  digest, and that digest is the final timeline's.
- no-ack-while-fenced: no publish was acknowledged by a node that was seen fenced before the
  request was sent and, without a sighting of it serving in between, still after the answer.
- unknown-at-most-once: no (producer, message id) is in a timeline twice; a publish that timed
  out is there at most once (and so is every other).

A run of the queue workload is held to ``chaos.queue_checker``'s invariants too.
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from chaos.schedule import Fault


def rows(folder: Path, name: str) -> Iterator[dict[str, Any]]:
    path = folder / f"{name}.jsonl"
    if not path.exists():
        return
    with path.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


@dataclass
class Verdict:
    name: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def fail(self, message: str) -> None:
        self.violations.append(message)


@dataclass
class FaultImpact:
    fault: Fault
    started: float
    ended: float
    worst_latency_s: float  # the slowest publish that was in flight during the window
    longest_gap_s: float  # the longest stretch of a stream without an ack, touching the window
    stream: str  # the stream that went longest without one


@dataclass
class Analysis:
    verdicts: list[Verdict]
    impacts: list[FaultImpact]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)


def check(folder: Path) -> Analysis:
    ops = list(rows(folder, "ops"))
    deliveries = list(rows(folder, "deliveries"))
    finals = list(rows(folder, "final"))
    timelines = {f["stream"]: f for f in finals if "timeline" in f}
    verdicts = [
        _acknowledged_not_lost(ops, timelines),
        _no_double_delivery(deliveries),
        _one_order(deliveries, timelines),
        _replicas_agree(finals, timelines),
        _no_ack_while_fenced(ops, list(rows(folder, "states"))),
        _at_most_once(timelines),
    ]
    run_path = folder / "run.json"
    settings = json.loads(run_path.read_text()) if run_path.exists() else {}
    if settings.get("workload") == "queue":
        from chaos import queue_checker  # it builds on this module's verdicts

        verdicts += queue_checker.check(folder, timelines, settings["streams"][0])
    if settings.get("workload") == "compacted":
        from chaos import compacted_checker as kv  # it builds on this module's verdicts

        verdicts[0] = kv.acknowledged_not_lost(ops, timelines)
        verdicts[2] = kv.one_order(deliveries, timelines)
        tables = folder / "tables.json"
        verdicts.append(
            kv.tables_agree(json.loads(tables.read_text()) if tables.exists() else {}, timelines)
        )
    outcomes = Counter(op["outcome"] for op in ops)
    counts = {
        "attempted": len(ops),
        "acknowledged": outcomes["ok"],
        "failed": outcomes["fail"],
        "unknown": outcomes["unknown"],
        "lost": len(verdicts[0].violations),
        "delivered": sum(1 for d in deliveries if "seq" in d),
        "in_timelines": sum(len(t["timeline"]) for t in timelines.values()),
    }
    return Analysis(verdicts, _impacts(folder, ops), counts)


def _acknowledged_not_lost(ops: list[dict[str, Any]], timelines: dict[str, Any]) -> Verdict:
    v = Verdict("acknowledged-not-lost")
    held = {s: {row[0]: row for row in t["timeline"]} for s, t in timelines.items()}
    for op in ops:
        if op["outcome"] != "ok":
            continue
        v.checked += 1
        row = held.get(op["stream"], {}).get(op["seq"])
        if row is None:
            v.fail(f"{op['stream']} seq {op['seq']} ({op['payload']}) was acknowledged, is gone")
        elif row[4] != op["payload"]:
            v.fail(f"{op['stream']} seq {op['seq']} holds {row[4]!r}, acked {op['payload']!r}")
    return v


def _no_double_delivery(deliveries: list[dict[str, Any]]) -> Verdict:
    v = Verdict("no-double-delivery")
    seen: dict[str, set[int]] = defaultdict(set)
    for d in deliveries:
        if "seq" not in d:
            continue
        v.checked += 1
        if d["seq"] in seen[d["consumer"]]:
            v.fail(f"consumer {d['consumer']} received seq {d['seq']} twice")
        seen[d["consumer"]].add(d["seq"])
    return v


def by_consumer(deliveries: list[dict[str, Any]], v: Verdict) -> dict[str, list[dict[str, Any]]]:
    """Each consumer's deliveries in order; one that stopped with an error fails ``v``."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in deliveries:
        if "error" in d:
            v.fail(f"consumer {d['consumer']} stopped: {d['error']}")
        else:
            found[d["consumer"]].append(d)
    return found


def _one_order(deliveries: list[dict[str, Any]], timelines: dict[str, Any]) -> Verdict:
    v = Verdict("one-order")
    for consumer, got in sorted(by_consumer(deliveries, v).items()):
        v.checked += 1
        timeline = timelines.get(got[0]["stream"], {}).get("timeline", [])
        for i, d in enumerate(got):
            if i >= len(timeline):
                v.fail(f"{consumer} received seq {d['seq']} beyond the final timeline")
                break
            seq, digest = timeline[i][0], timeline[i][1]
            if d["seq"] != seq or d["digest"] != digest:
                v.fail(
                    f"{consumer}'s tx #{i + 1} is seq {d['seq']}; the timeline has seq {seq} there"
                )
                break
    return v


def _replicas_agree(finals: list[dict[str, Any]], timelines: dict[str, Any]) -> Verdict:
    v = Verdict("replicas-agree")
    by_stream: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in finals:
        by_stream[f["stream"]].append(f)
    for stream, replicas in sorted(by_stream.items()):
        v.checked += len(replicas)
        views = {(r["verified_seq"], r["digest"]) for r in replicas}
        if len(views) != 1:
            detail = ", ".join(
                f"node {r['node']}: {r['verified_seq']}/{r['digest'][:12]}" for r in replicas
            )
            v.fail(f"{stream}: replicas disagree at the end ({detail})")
        timeline = timelines.get(stream, {}).get("timeline", [])
        last = (timeline[-1][0], timeline[-1][1]) if timeline else (0, "")
        if timeline and (replicas[0]["verified_seq"], replicas[0]["digest"]) != last:
            v.fail(f"{stream}: the final timeline ends at {last[0]}, not at the replicas' head")
    return v


def _no_ack_while_fenced(ops: list[dict[str, Any]], states: list[dict[str, Any]]) -> Verdict:
    """An ack is a violation when its node was seen fenced before the request was sent and
    again, in the same unbroken run of fenced sightings, by a question asked after the answer
    arrived. Sightings are samples: a node that served between two of them is given the
    benefit of the doubt only if a sighting in between shows it."""
    v = Verdict("no-ack-while-fenced")
    runs: dict[int, list[tuple[float, float]]] = defaultdict(list)  # node -> [(seen, still)]
    current: dict[int, list[float]] = {}
    for s in sorted(states, key=lambda s: s["t"]):
        node = s["node"]
        if s["state"] == "fenced":
            if node in current:
                current[node][1] = s.get("asked", s["t"])
            else:
                current[node] = [s["t"], s.get("asked", s["t"])]
        elif node in current:
            runs[node].append((current[node][0], current[node][1]))
            del current[node]
    for node, (seen, still) in current.items():
        runs[node].append((seen, still))
    for op in ops:
        if op["outcome"] != "ok" or op.get("acked_by") is None:
            continue
        v.checked += 1
        for seen, still in runs.get(op["acked_by"], []):
            if seen <= op["t0"] and op["t1"] <= still:
                v.fail(
                    f"node {op['acked_by']} acknowledged {op['stream']} seq {op['seq']} at "
                    f"{op['t1']:.2f} s while fenced (seen fenced {seen:.2f}-{still:.2f} s)"
                )
    return v


def _at_most_once(timelines: dict[str, Any]) -> Verdict:
    v = Verdict("unknown-at-most-once")
    for stream, t in sorted(timelines.items()):
        keys = Counter((row[2], row[3]) for row in t["timeline"])
        v.checked += len(keys)
        for (producer, msg_id), n in keys.items():
            if n > 1:
                v.fail(f"{stream}: {producer} message {msg_id} is in the timeline {n} times")
    return v


def _impacts(folder: Path, ops: list[dict[str, Any]]) -> list[FaultImpact]:
    starts: dict[tuple[str, float], float] = {}
    impacts = []
    acks: dict[str, list[float]] = defaultdict(list)
    for op in ops:
        if op["outcome"] == "ok":
            acks[op["stream"]].append(op["t1"])
    for times in acks.values():
        times.sort()
    for event in rows(folder, "faults"):
        fault = Fault.from_json(event)
        key = (fault.kind, fault.start_s)
        if event["event"] == "start":
            starts[key] = event["t"]
            continue
        started, ended = starts.pop(key, fault.start_s), event["t"]
        in_flight = [op["t1"] - op["t0"] for op in ops if op["t0"] <= ended and op["t1"] >= started]
        gap, stream = max(
            ((_longest_gap(times, started, ended), name) for name, times in acks.items()),
            default=(0.0, ""),
        )
        impacts.append(FaultImpact(fault, started, ended, max(in_flight, default=0.0), gap, stream))
    return impacts


def _longest_gap(times: list[float], started: float, ended: float) -> float:
    """The longest stretch between two acks (sorted times) that overlaps [started, ended]."""
    lo = max(0, bisect_left(times, started) - 1)
    hi = bisect_right(times, ended) + 1
    window = times[lo:hi]
    return max((b - a for a, b in pairwise(window)), default=ended - started)


def render(analysis: Analysis) -> str:
    c = analysis.counts
    lines = [
        f"operations: {c['attempted']} attempted, {c['acknowledged']} acknowledged, "
        f"{c['failed']} failed, {c['unknown']} unknown (timed out), {c['lost']} lost; "
        f"{c['delivered']} deliveries to consumers; {c['in_timelines']} txs in the final timelines",
        "",
    ]
    for v in analysis.verdicts:
        status = "ok  " if v.ok else "FAIL"
        lines.append(f"{status} {v.name:<24} checked {v.checked}, violations {len(v.violations)}")
        lines.extend(f"       {msg}" for msg in v.violations[:10])
        if len(v.violations) > 10:
            lines.append(f"       ... and {len(v.violations) - 10} more")
    if analysis.impacts:
        lines += [
            "",
            f"{'fault':<40} {'window (s)':>13} {'worst publish':>14} {'longest no-ack':>15}"
            " (stream)",
        ]
        for i in analysis.impacts:
            window = f"{i.started:.1f}-{i.ended:.1f}"
            lines.append(
                f"{i.fault.label():<40} {window:>13} {i.worst_latency_s:>12.2f} s "
                f"{i.longest_gap_s:>13.2f} s ({i.stream})"
            )
    lines += ["", "verdict: " + ("every invariant held" if analysis.ok else "VIOLATIONS FOUND")]
    return "\n".join(lines)
