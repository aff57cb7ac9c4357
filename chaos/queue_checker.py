"""The invariants of a chaos run's queue workload, from ``workers.jsonl``, the job stream's
final timeline and ``queue_final.json``:

- queue-one-holder: no job is handed to a worker while another still holds it: a delivery is
  answered only after the previous delivery's worker sent a settlement of it (recorded before
  it is sent, so a worker killed before the answer still shows it), or after that
  worker's lease ran out, counted from when it sent its claim (a lease counts from when a quorum
  applied the claim, which is later); and no delivery of a job is handed out twice.
- queue-acked-once: no job is acknowledged twice (an ack answered ``settled``), and no job is
  both acknowledged and dead.
- queue-none-lost: at the end the group is drained on every replica (nothing ready, delayed,
  claimed, or dead and not yet moved; every job taken in), the replicas agree on how many jobs
  were acked and died, acked plus dead is the number of jobs in the stream, and the dead-letter
  stream holds each dead job once, each a job of the stream.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

from chaos.checker import Verdict, rows

PENDING = ("ready", "delayed", "claimed", "dead_not_moved")


def check(folder: Path, timelines: dict[str, Any], job_stream: str) -> list[Verdict]:
    steps = list(rows(folder, "workers"))
    final_path = folder / "queue_final.json"
    final = json.loads(final_path.read_text()) if final_path.exists() else None
    jobs = [row[0] for row in timelines.get(job_stream, {}).get("timeline", [])]
    return [
        one_holder(steps, final["lease_ms"] if final else 0),
        acked_once(steps, final),
        none_lost(jobs, final),
    ]


def one_holder(steps: list[dict[str, Any]], lease_ms: int) -> Verdict:
    verdict = Verdict("queue-one-holder")
    settles: dict[tuple[int, int], float] = {}  # (seq, delivery) -> first settlement sent
    for s in steps:
        if s["event"] == "settle":
            key = (s["seq"], s["delivery"])
            settles[key] = min(settles.get(key, s["t0"]), s["t0"])
    given: dict[int, list[tuple[float, float, int, str]]] = defaultdict(list)
    for s in steps:
        if s["event"] == "claim":
            for seq, delivery in s.get("jobs", ()):
                given[seq].append((s["t1"], s["t0"], delivery, s["member"]))
    for seq, deliveries in given.items():
        verdict.checked += len(deliveries)
        counts = Counter(d for _, _, d, _ in deliveries)
        for delivery, n in counts.items():
            if n > 1:
                verdict.fail(f"job {seq}: delivery {delivery} was handed out {n} times")
        ordered = sorted(deliveries, key=lambda d: d[2])
        for (_, sent, delivery, member), (answered, _, after, other) in pairwise(ordered):
            released = min(sent + lease_ms / 1000, settles.get((seq, delivery), float("inf")))
            if answered < released:
                verdict.fail(
                    f"job {seq}: delivery {after} reached {other} {released - answered:.3f} s "
                    f"before {member} (delivery {delivery}) settled it or its lease ran out"
                )
    return verdict


def acked_once(steps: list[dict[str, Any]], final: dict[str, Any] | None) -> Verdict:
    verdict = Verdict("queue-acked-once")
    acked = Counter(
        s["seq"]
        for s in steps
        if s["event"] == "settle" and s["action"] == "ack" and s["result"] == "settled"
    )
    verdict.checked = len(acked)
    for seq, n in acked.items():
        if n > 1:
            verdict.fail(f"job {seq} was acknowledged {n} times")
    for dead in (final or {}).get("dead", []):
        seq = int(dead["headers"].get("relay-dead-seq", 0))
        if seq in acked:
            verdict.fail(f"job {seq} was acknowledged and is in the dead-letter stream")
    return verdict


def none_lost(jobs: list[int], final: dict[str, Any] | None) -> Verdict:
    verdict = Verdict("queue-none-lost")
    if final is None:
        verdict.fail("no queue_final.json: the run did not reach its end")
        return verdict
    verdict.checked = len(jobs)
    totals = set()
    for node, info in final["infos"].items():
        pending = {k: info.get(k) for k in PENDING if info.get(k)}
        if pending:
            verdict.fail(f"node {node}: the group is not drained: {pending}")
        if jobs and info.get("jobs_through", 0) < jobs[-1]:
            verdict.fail(f"node {node} took jobs in only up to {info.get('jobs_through')}")
        totals.add((info.get("acked"), info.get("dead")))
    if len(totals) > 1:
        verdict.fail(f"the replicas count (acked, dead) differently: {sorted(totals)}")
    dead_seqs = [int(d["headers"].get("relay-dead-seq", 0)) for d in final["dead"]]
    for seq, n in Counter(dead_seqs).items():
        if n > 1:
            verdict.fail(f"job {seq} is in the dead-letter stream {n} times")
    known = set(jobs)
    for seq in set(dead_seqs) - known:
        verdict.fail(f"the dead-letter stream holds {seq}, which is no job of the stream")
    for acked, dead in totals:
        if (acked or 0) + (dead or 0) != len(jobs):
            verdict.fail(f"acked {acked} + dead {dead} != {len(jobs)} jobs: some job was lost")
        if dead != len(dead_seqs):
            verdict.fail(f"the group counts {dead} dead, the dead-letter stream {len(dead_seqs)}")
    return verdict
