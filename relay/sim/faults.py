"""The faults a simulated run injects, drawn from its seed.

Each fault has a window ``[start_ms, end_ms)`` of simulated time after the cluster started.
At most a minority of the nodes is down, paused or isolated at any moment (one-way cuts are
not counted, so together with them a quorum may be cut off until they heal), and every run
must end with all nodes agreeing once the faults heal.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum


class FaultKind(Enum):
    CRASH = "crash"  # killed, restarted at end_ms from its disk (amount: one of CrashKind)
    STOP = "stop"  # stopped for good (graceful when amount == 1)
    ISOLATE = "isolate"  # every link to and from the nodes is cut
    ONE_WAY = "one-way"  # frames from nodes[0] to nodes[1] are lost
    PAUSE = "pause"  # the node handles nothing (SIGSTOP), then catches up
    CLOCK_STEP = "clock-step"  # the node's wall clock jumps by amount ms (either way)
    DRIFT = "drift"  # the node's wall clock runs amount per mille fast (or slow) meanwhile
    LOSS = "loss"  # every link loses amount per mille of frames
    DUPLICATE = "duplicate"  # every link delivers amount per mille of frames twice
    REORDER = "reorder"  # amount per mille of frames may overtake others on their link


@dataclass(frozen=True, slots=True)
class Fault:
    kind: FaultKind
    start_ms: int
    end_ms: int
    nodes: tuple[int, ...] = ()
    amount: int = 0

    def describe(self) -> str:
        target = f" nodes {list(self.nodes)}" if self.nodes else ""
        extra = f" amount {self.amount}" if self.amount else ""
        return f"{self.kind.value}{target}{extra} from {self.start_ms} to {self.end_ms} ms"


class CrashKind:
    PROCESS = 0  # the kernel keeps what was written
    POWER = 1  # only what was fsynced survives, and maybe part of what was not
    NEW_DISK = 2  # the node comes back on an empty disk (a replaced machine)


# Faults that take nodes out of the quorum; at most a minority may overlap.
# in the order ``partition_faults`` draws them (a seed's draws depend on it)
NODES_OUT_KINDS = (FaultKind.CRASH, FaultKind.ISOLATE, FaultKind.PAUSE, FaultKind.STOP)
TAKES_NODES_OUT = frozenset(NODES_OUT_KINDS)


def _out_until(fault: Fault) -> int:
    """A stopped node never comes back; a node on a replaced disk counts as out for good too
    (it vouches for nothing older than its start until each stream recovered, which may need
    every other replica: docs/design.md, *A replaced disk*)."""
    replaced = fault.kind is FaultKind.CRASH and fault.amount == CrashKind.NEW_DISK
    return 1 << 40 if fault.kind is FaultKind.STOP or replaced else fault.end_ms


def _room_for_good(
    index: int,
    faults: tuple[Fault, ...],
    decided: list[Fault],
    nodes: int,
    replica_sets: tuple[frozenset[int], ...],
) -> bool:
    """Whether the nodes of crash ``faults[index]`` may stay out from its start on: with every
    other fault that takes nodes out after that (``decided`` for the ones before it), still a
    minority of the cluster and of each stream's replicas."""
    crash = faults[index]
    out = set(crash.nodes)
    for i, f in enumerate(faults):
        f = decided[i] if i < len(decided) else f
        if i != index and f.kind in TAKES_NODES_OUT and _out_until(f) > crash.start_ms:
            out |= set(f.nodes)
    if len(out) > (nodes - 1) // 2:
        return False
    return not any(2 * len(out & r) >= len(r) for r in replica_sets)


def draw_faults(
    rng: random.Random,
    nodes: int,
    horizon_ms: int,
    kinds: tuple[FaultKind, ...],
    replica_sets: tuple[frozenset[int], ...],
) -> tuple[Fault, ...]:
    """Zero to four faults of ``kinds`` inside ``horizon_ms``, never more than a minority
    of the cluster, nor of any stream's replicas, out at once."""
    faults: list[Fault] = []
    minority = (nodes - 1) // 2
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        kind = rng.choice(kinds)
        start = rng.randint(50, max(60, horizon_ms - 100))
        end = start + rng.randint(100, 1500)
        if kind in TAKES_NODES_OUT:
            until = 1 << 40 if kind is FaultKind.STOP else end  # a stopped node stays down
            busy = {
                n
                for f in faults
                if f.kind in TAKES_NODES_OUT and f.start_ms < until and start < _out_until(f)
                for n in f.nodes
            }
            free = [n for n in range(1, nodes + 1) if n not in busy]
            room = minority - len(busy)
            if room <= 0 or not free:
                continue
            count = rng.randint(1, min(room, len(free)))
            targets = tuple(sorted(rng.sample(free, count)))
            out = busy | set(targets)
            if any(2 * len(out & r) >= len(r) for r in replica_sets):
                continue  # that would take out half or more of a stream's replicas
            amount = int(rng.random() < 0.5) if kind is FaultKind.STOP else 0
            faults.append(Fault(kind, start, end, targets, amount))
        elif kind is FaultKind.ONE_WAY:
            a, b = rng.sample(range(1, nodes + 1), 2)
            faults.append(Fault(kind, start, end, (a, b)))
        elif kind is FaultKind.CLOCK_STEP:
            step = rng.choice([-1, 1]) * rng.randint(5, 10_000)
            faults.append(Fault(kind, start, end, (rng.randint(1, nodes),), step))
        elif kind is FaultKind.DRIFT:
            rate = rng.choice([-1, 1]) * rng.randint(1, 50)
            faults.append(Fault(kind, start, end, (rng.randint(1, nodes),), rate))
        else:
            faults.append(Fault(kind, start, end, (), rng.randint(10, 150)))
    return tuple(sorted(faults, key=lambda f: f.start_ms))


ONE_WAY_DRAWS = 3  # draws of zero to four one-way cuts each


def partition_faults(
    rng: random.Random,
    nodes: int,
    horizon_ms: int,
    replica_sets: tuple[frozenset[int], ...],
) -> tuple[Fault, ...]:
    """Faults that cut nodes off: process crashes, isolations, pauses and stops (at most a
    minority out at once, as ``draw_faults``), and up to twelve one-way cuts beside them, which
    that bound does not count (as in ``draw_faults``; with the others they may leave no quorum
    until they heal): where a vote is counted by a peer that the voter never hears again."""
    found = list(draw_faults(rng, nodes, horizon_ms, NODES_OUT_KINDS, replica_sets))
    for _ in range(ONE_WAY_DRAWS):
        found += draw_faults(rng, nodes, horizon_ms, (FaultKind.ONE_WAY,), replica_sets)
    return tuple(sorted(found, key=lambda f: f.start_ms))


def crashes_of(
    rng: random.Random,
    faults: tuple[Fault, ...],
    nodes: int,
    horizon_ms: int,
    power_losses: bool,
    replica_sets: tuple[frozenset[int], ...] = (),
    whole: random.Random | None = None,
) -> tuple[Fault, ...]:
    """How each crash treats the disk; with ``power_losses`` (every vote waits for fsync)
    a crash may lose power, and 10 in 21 of those runs lose power on every node at once, so
    a third of all runs (``power_losses`` holds in 7 in 10). The loss is drawn in two steps:
    a third of the runs from ``rng`` (the draw older seeds replay), then 3 in 14 of the rest
    from ``whole``, its own stream of numbers, so that no later draw of ``rng`` moves."""
    # a replaced disk loses what a quorum's disks acknowledged together with a power loss
    # elsewhere (more than a quorum failing, as in Raft): the two are never drawn together
    kinds = (
        [CrashKind.PROCESS, CrashKind.POWER]
        if power_losses
        else [CrashKind.PROCESS, CrashKind.NEW_DISK]
    )
    found: list[Fault] = []
    for index, f in enumerate(faults):
        if f.kind is FaultKind.CRASH:
            kind = rng.choice(kinds)
            if kind == CrashKind.NEW_DISK and not _room_for_good(
                index, faults, found, nodes, replica_sets
            ):
                kind = CrashKind.PROCESS
            f = Fault(f.kind, f.start_ms, f.end_ms, f.nodes, kind)
        found.append(f)
    if power_losses:
        if rng.random() < 1 / 3:
            found.append(_every_node_loses_power(rng, nodes, horizon_ms))
        elif whole is not None and whole.random() < 3 / 14:
            found.append(_every_node_loses_power(whole, nodes, horizon_ms))
    return tuple(sorted(found, key=lambda f: f.start_ms))


def _every_node_loses_power(rng: random.Random, nodes: int, horizon_ms: int) -> Fault:
    start = rng.randint(50, max(60, horizon_ms - 100))
    end = start + rng.randint(50, 1000)
    return Fault(FaultKind.CRASH, start, end, tuple(range(1, nodes + 1)), CrashKind.POWER)
