"""The fault schedule of a chaos run, drawn from its seed: the same seed, the same faults.

Faults come one after another with quiet gaps between them, so each one's effect can be read
off the history. Each fault but one keeps a majority of the cluster whole (a kill, a pause or a
corrupt takes at most a minority of the nodes; a split leaves a majority side), which is what
the cluster is built to survive: with a majority gone it must stop, not stay available. The
exception is ``crash-all``, every node killed at once: it tests the disks, not availability
(nothing acknowledged may be lost, and the cluster must come back from its logs alone).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

KINDS = ("kill", "pause", "partition", "loss", "clock", "crash-all", "corrupt")
WHOLE_CLUSTER = ("crash-all",)  # the kinds exempt from keeping a majority whole


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    start_s: float  # seconds after the workload started
    end_s: float
    nodes: tuple[int, ...]  # the nodes acted on (killed, paused, cut off, lossy, skewed, ...)
    detail: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        nodes = ",".join(str(n) for n in self.nodes)
        extra = " ".join(f"{k}={v}" for k, v in sorted(self.detail.items()))
        return f"{self.kind} {nodes}{' ' + extra if extra else ''}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "nodes": list(self.nodes),
            "detail": self.detail,
        }

    @staticmethod
    def from_json(row: dict[str, Any]) -> Fault:
        return Fault(
            row["kind"], row["start_s"], row["end_s"], tuple(row["nodes"]), row.get("detail", {})
        )


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown fault kind {unknown[0] if unknown else text!r}; use {KINDS}")
    return kinds


def draw(
    seed: int,
    nodes: int,
    duration_s: float,
    kinds: tuple[str, ...],
    settle_s: float = 5.0,
    lead_s: float = 3.0,
) -> list[Fault]:
    """Faults for a run of ``duration_s`` seconds: none in the first ``lead_s`` seconds (the
    workload warms up) nor in the last ``settle_s`` (the cluster heals before the end)."""
    rng = random.Random(seed)
    ids = list(range(1, nodes + 1))
    minority = (nodes - 1) // 2
    faults = []
    t = lead_s
    turn = 0
    while True:
        kind = kinds[turn % len(kinds)] if turn < len(kinds) else rng.choice(kinds)
        turn += 1
        length = rng.uniform(2.0, 6.0)
        if t + length > duration_s - settle_s:
            break
        faults.append(_one(rng, kind, t, t + length, ids, minority))
        t += length + rng.uniform(2.0, 4.0)
    return faults


def _one(
    rng: random.Random, kind: str, start: float, end: float, ids: list[int], minority: int
) -> Fault:
    start, end = round(start, 2), round(end, 2)
    if kind in ("kill", "pause"):
        victims = tuple(sorted(rng.sample(ids, rng.randint(1, minority))))
        return Fault(kind, start, end, victims)
    if kind == "crash-all":
        return Fault(kind, start, end, tuple(ids))
    if kind == "corrupt":
        # The byte to flip is chosen when the fault starts (which sealed segments exist depends
        # on timing), by an rng seeded from this fault; the value it is XORed with is drawn here.
        return Fault(kind, start, end, (rng.choice(ids),), {"xor": rng.randint(1, 255)})
    if kind == "partition":
        shape = rng.choice(("isolate", "split", "one-way"))
        if shape == "isolate":
            return Fault(kind, start, end, (rng.choice(ids),), {"shape": shape})
        if shape == "split":
            side = tuple(sorted(rng.sample(ids, minority)))
            return Fault(kind, start, end, side, {"shape": shape})
        deaf, muted = rng.sample(ids, 2)  # ``deaf`` stops hearing ``muted``
        return Fault(kind, start, end, (deaf,), {"shape": shape, "from": muted})
    if kind == "loss":
        lossy = tuple(sorted(rng.sample(ids, rng.randint(1, len(ids)))))
        return Fault(kind, start, end, lossy, {"fraction": round(rng.uniform(0.05, 0.3), 2)})
    if kind == "clock":
        node = (rng.choice(ids),)
        if rng.random() < 0.5:
            return Fault(
                kind, start, end, node, {"step_ms": rng.choice((-1, 1)) * rng.randint(200, 3000)}
            )
        return Fault(
            kind, start, end, node, {"drift_ms_per_s": rng.choice((-1, 1)) * rng.randint(50, 400)}
        )
    raise ValueError(f"unknown fault kind {kind!r}")
