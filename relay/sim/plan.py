"""What one simulated run does, drawn from its seed (swarm testing, as TigerBeetle's VOPR).

How this works: a seed draws not only faults but the cluster's configuration: which nodes
replicate which streams (every node on ``*``, or prefixes on different sets of nodes), how
many streams (a few, or hundreds that mostly idle), the timeouts, which fault kinds may occur
and how often, each node's clock skew (up to +-10 s), and how many consumers long-poll. So a
campaign explores configurations, not one configuration.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from relay.core.params import CoreParams
from relay.core.routing import Subscription
from relay.sim.faults import Fault, FaultKind, crashes_of, draw_faults, partition_faults

SKEW_MS_MAX = 10_000
LEADS_MS = (0, 5, 20, 20, 100)  # how far an idle origin promises ahead (0: no lead)


@dataclass(frozen=True, slots=True)
class SimPlan:
    """What one seed runs; drawn from the seed by ``SimPlan.draw``."""

    nodes: int
    streams: tuple[str, ...]
    subscriptions: tuple[Subscription, ...]
    params: CoreParams
    publish_ms: int
    publishes: int
    retry_rate: float
    delay_ms_max: int
    consumers: int
    skews_ms: tuple[int, ...]  # each node's wall clock offset at the start
    faults: tuple[Fault, ...]
    disk_latency_ms_max: int = 0  # an fsync takes 0 to this many ms
    reuse_rate: float = 0.0  # publishes that reuse an earlier key with other content
    delivery: bool = False  # a fan-out batch and a group member that commits and restarts
    work: bool = False  # a work group: a producer of jobs and members that work them
    segment_bytes: int = 1 << 20  # the logs' segments roll at this size
    disk_errors: tuple[DiskErrors, ...] = ()  # windows in which a node's disk refuses
    compacted: bool = False  # a compacted stream (``relay.sim.compacted``) beside the others

    def with_compacted(self, compacted: bool) -> SimPlan:
        """This plan with a compacted stream or without (and the dedup window to match)."""
        dedup = COMPACTED_DEDUP_MS if compacted else CoreParams().dedup_window_ms
        params = replace(self.params, dedup_window_ms=dedup)
        return replace(self, compacted=compacted, params=params)

    @staticmethod
    def draw(
        seed: int,
        nodes: int,
        with_faults: bool = True,
        third_lose_power: bool = True,
        partitions: bool = False,
    ) -> SimPlan:
        """The plan of ``seed`` on ``nodes``; without ``third_lose_power`` as drawn before a
        third of all runs lost power on every node (a third of the ``always`` runs did); with
        ``partitions``, its faults are those of ``partition_faults`` instead, with no power
        loss and no disk errors (the rest of the plan as drawn)."""
        rng = random.Random(seed * 7919 + nodes)
        publish_ms = rng.randint(200, 1500)
        many = rng.random() < 0.1
        count = rng.randint(100, 400) if many else rng.randint(1, 3)
        prefixes = ("a", "b", "c")
        streams = tuple(f"{prefixes[i % 3]}.{i}" for i in range(count))
        kinds = list(FaultKind)
        enabled = tuple(rng.sample(kinds, rng.randint(1, len(kinds))))
        skews = tuple(
            rng.randint(-SKEW_MS_MAX, SKEW_MS_MAX) if rng.random() < 0.3 else 0
            for _ in range(nodes)
        )
        subscriptions = _subscriptions(rng, nodes, prefixes)
        replica_sets = tuple(
            frozenset(s.node_id for s in subscriptions if s.covers(f"{p}.0")) for p in prefixes
        )
        # the disk is drawn from its own stream of numbers, so that the draws of ``rng`` do
        # not depend on it (the regression seeds replay)
        disk = random.Random(seed * 104_729 + nodes)
        votes_wait = disk.random() < 0.7  # fsync = "always"; else "never"
        compacted = random.Random(seed * 122_949_829 + nodes).random() < COMPACTED_SHARE
        dedup = {"dedup_window_ms": COMPACTED_DEDUP_MS} if compacted else {}
        faults = draw_faults(rng, nodes, publish_ms, enabled, replica_sets) if with_faults else ()
        plan = SimPlan(
            nodes=nodes,
            streams=streams,
            subscriptions=subscriptions,
            params=replace(
                _params(rng),
                votes_wait_for_disk=votes_wait,
                # its own stream of numbers: the draws of ``rng`` do not depend on it
                promise_lead_ms=random.Random(seed * 67_867_967 + nodes).choice(LEADS_MS),
                **dedup,
            ),
            publish_ms=publish_ms,
            publishes=rng.randint(100, 400) if many else rng.randint(20, 150),
            retry_rate=rng.choice([0.0, 0.1, 0.3]),
            delay_ms_max=rng.randint(0, 5),
            consumers=rng.randint(0, 3),
            skews_ms=skews,
            faults=crashes_of(
                disk,
                faults,
                nodes,
                publish_ms,
                votes_wait,
                replica_sets,
                # its own stream of numbers, so the draws of ``disk`` replay
                whole=random.Random(seed * 179_424_673 + nodes) if third_lose_power else None,
            )
            if with_faults
            else (),
            disk_latency_ms_max=disk.choice([0, 1, 3, 10]),
            # its own stream of numbers too: half the seeds never reuse
            reuse_rate=random.Random(seed * 15_485_863 + nodes).choice([0.0, 0.0, 0.03, 0.1]),
            delivery=random.Random(seed * 32_452_843 + nodes).random() < 0.5,
            work=random.Random(seed * 67_867_967 + nodes).random() < WORK_SHARE,
            segment_bytes=random.Random(seed * 49_979_693 + nodes).choice(SEGMENT_BYTES),
            disk_errors=_disk_errors(random.Random(seed * 86_028_121 + nodes), nodes, publish_ms)
            if with_faults
            else (),
            compacted=compacted,
        )
        if not (partitions and with_faults):
            return plan
        cuts = partition_faults(
            random.Random(seed * 999_331 + nodes), nodes, publish_ms, replica_sets
        )
        return replace(plan, faults=cuts, disk_errors=())


WORK_SHARE = 0.3  # of the seeds that run a work group
COMPACTED_SHARE = 0.3  # of the seeds with a compacted stream
COMPACTED_DEDUP_MS = 20_000  # their dedup window (longer than any retry, across clock steps of
# 10 s): a pass never takes what is younger
SEGMENT_BYTES = (4096, 16_384, 1 << 20)  # small ones roll, seal and rename often


@dataclass(frozen=True, slots=True)
class DiskErrors:
    """From ``start_ms`` to ``end_ms`` node ``node``'s writes fail (ENOSPC, or short) with
    chance ``writes`` and its syncs (EIO) with chance ``syncs``."""

    node: int
    start_ms: int
    end_ms: int
    writes: float
    syncs: float

    def describe(self) -> str:
        return (
            f"disk errors on node {self.node} from {self.start_ms} to {self.end_ms} ms "
            f"(writes {self.writes:.2f}, syncs {self.syncs:.2f})"
        )


def _disk_errors(rng: random.Random, nodes: int, publish_ms: int) -> tuple[DiskErrors, ...]:
    """A quarter of the seeds: one or two windows of a failing disk."""
    if rng.random() >= 0.25:
        return ()
    windows = []
    for _ in range(rng.randint(1, 2)):
        start = rng.randint(100, 100 + publish_ms)
        writes, syncs = rng.choice([0.05, 0.2, 0.5]), rng.choice([0.0, 0.1, 0.3])
        windows.append(
            DiskErrors(rng.randint(1, nodes), start, start + rng.randint(50, 400), writes, syncs)
        )
    return tuple(windows)


def _subscriptions(
    rng: random.Random, nodes: int, prefixes: tuple[str, ...]
) -> tuple[Subscription, ...]:
    """Every node on ``*``, or each prefix on its own set of at least three nodes."""
    ids = list(range(1, nodes + 1))
    if nodes < 5 or rng.random() < 0.5:
        return tuple(Subscription(n, ("*",)) for n in ids)
    holders = {p: set(rng.sample(ids, rng.choice([3, 3, 5]))) for p in prefixes}
    return tuple(
        Subscription(n, tuple(f"{p}.*" for p in prefixes if n in holders[p]) or ("none",))
        for n in ids
    )


def _params(rng: random.Random) -> CoreParams:
    heartbeat = rng.choice([20, 50, 50, 100])
    suspect = rng.randint(max(200, 3 * heartbeat), 600)
    return CoreParams(
        heartbeat_ms=heartbeat,
        suspect_after_ms=suspect,
        fence_after_ms=rng.randint(max(2 * heartbeat, suspect // 2), suspect - 20),
        publish_timeout_ms=2000,
        repair_after_ms=rng.randint(30, 150),
        stuck_after_ms=rng.randint(200, 600),
        buffer_txs_max=rng.choice([1000, 5000]),
        buffer_bytes_max=rng.choice([1 << 20, 150_000]),  # the latter binds before the count
        rings_bytes_max=rng.choice([1 << 62, 8_000, 20_000]),  # the node's rings, together
    )
