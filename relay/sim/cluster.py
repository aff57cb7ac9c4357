"""The deterministic simulator: N pure cores on one thread, a seeded network, clients,
faults (carried out by ``FaultInjector``, ``relay/sim/fault_injection.py``), a checker.

How this works: time advances in whole milliseconds to the next thing that happens (a
message landing, a node's tick, a client's action, a fault starting or healing). Every node
gets everything that landed for it at that instant as one batch, as the real shell drains its
sockets; after every batch the checker runs. Each node sees its own wall clock (skewed,
stepped, drifting) and a monotonic elapsed clock. A run has two phases: the *safety* phase
(publishing, consuming and faults, invariants checked after every step) and the *liveness*
phase (every fault healed): the run must then go quiet within ``SETTLE_MS``: every publish
answered, every live replica verified to its head with equal digests, every consumer caught up.
The same seed always replays the same run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from relay.core.events import Event, MeshReceived, ShutdownRequested, Tick
from relay.core.node import NodeCore
from relay.core.params import CoreConfig
from relay.core.routing import Routing
from relay.core.timer import Now
from relay.shell import Shell
from relay.sim.checker import InvariantChecker, InvariantViolation, log_state
from relay.sim.clients import SimClients
from relay.sim.compacted import STREAM as COMPACTED_STREAM
from relay.sim.compacted import SimCompaction
from relay.sim.delivery import SimDelivery
from relay.sim.fault_injection import FaultInjector
from relay.sim.files import SimFiles
from relay.sim.network import LinkFaults, SimNetwork
from relay.sim.plan import SimPlan
from relay.sim.ports import SimAnswers, SimMesh, SimReporter, SimSyncRunner, node_disk
from relay.sim.work import SimWorkGroup
from relay.storage.settings import StorageSettings
from relay.storage.stream_log import StorageError

START_MS = 1_780_000_000_000
TICK_MS = 10
SETTLE_MS = 30_000  # how long a healed cluster may take to go quiet
COMPACTION_WAIT_MS = 45_000  # how long a quiet cluster waits for its compactors to settle


@dataclass(slots=True)
class SimResult:
    seed: int
    plan: SimPlan
    acked: int
    rejected: int
    messages: int
    end_ms: int
    trace: list[str] = field(default_factory=list)


class SimCluster:
    """The event loop over the nodes' processes and machines; the faults act on them through
    the ``FaultTarget`` methods."""

    def __init__(self, seed: int, plan: SimPlan) -> None:
        self.seed = seed
        self.plan = plan
        self.rng = random.Random(seed)
        ids = self.ids = list(range(1, plan.nodes + 1))
        self.nodes: dict[int, NodeCore] = {}
        self.incarnation: dict[int, int] = {}
        self.now_ms = START_MS
        self.next_tick: dict[int, int] = {}
        disk_rng = random.Random(seed * 31 + 7)  # apart from the network's draws
        self.disk_rng = disk_rng
        self.files = {n: SimFiles(disk_rng) for n in ids}  # each node's machine
        self.replaced: set[int] = set()  # the nodes whose disk was replaced
        self.storage = StorageSettings(
            fsync="always" if plan.params.votes_wait_for_disk else "never",
            segment_bytes=plan.segment_bytes,
        )
        self.shells: dict[int, Shell] = {}
        self.runners: dict[int, SimSyncRunner] = {}
        self.answers: dict[int, SimAnswers] = {}
        self.network = SimNetwork(self.rng, LinkFaults(delay_ms_max=plan.delay_ms_max))
        self.checker = InvariantChecker()
        self.compaction: SimCompaction | None = None
        self.settings_of: Callable[[str], StorageSettings] | None = None
        if plan.compacted:
            rng = random.Random(seed * 122_949_823 + 13)
            window = (START_MS + 100, START_MS + 100 + plan.publish_ms)
            self.compaction = SimCompaction(rng, window)
            self.settings_of = self.compaction.storage(self.storage)
            self.checker.keep_txs(COMPACTED_STREAM)
        self.trace: list[str] = []
        self.faults = FaultInjector(plan, ids, self.network.faults, self, START_MS)
        for n in ids:
            self.faults.start(n, self.now_ms)
        self.clients = SimClients(
            self.rng, ids, plan.streams, plan.consumers, plan.retry_rate, self.checker
        )
        self.clients.reuse(random.Random(seed * 2_750_159 + 3), plan.reuse_rate)
        self.delivery: SimDelivery | None = None
        if plan.delivery:  # its own numbers: the seeds without it replay as before
            rng = random.Random(seed * 49_979_687 + 11)
            first, last = START_MS + 100, START_MS + 100 + plan.publish_ms
            stream = rng.choice(plan.streams)
            self.delivery = SimDelivery(rng, self.clients, self.checker, stream, first, last)
            self.clients.live = lambda: sorted(self.nodes)
        ends = [plan.publish_ms, *(f.end_ms for f in plan.faults)]
        self.calm_from = START_MS + 100 + max(ends + [w.end_ms for w in plan.disk_errors])
        self.work: SimWorkGroup | None = None
        if plan.work:
            rng = random.Random(seed * 15_485_863 + 5)
            first, last = START_MS + 100, START_MS + 100 + plan.publish_ms
            stream = rng.choice(plan.streams)
            self.work = SimWorkGroup(
                rng, stream, lambda: sorted(self.nodes), (first, last, self.calm_from)
            )
            replicas = Routing(plan.subscriptions).replicas_of(stream)
            quorum = CoreConfig(ids[0], plan.subscriptions, plan.params).quorum_of(len(replicas))
            self.work.take_part(self.clients, self.checker, (tuple(replicas), quorum))
        self.turns = 0

    # --- running ------------------------------------------------------------------------

    def run(self) -> SimResult:
        plan = self.plan
        publish_times = sorted(
            START_MS + self.rng.randint(100, 100 + plan.publish_ms) for _ in range(plan.publishes)
        )
        calm_from = self.calm_from
        deadline = calm_from + SETTLE_MS + (COMPACTION_WAIT_MS if self.compaction else 0)
        while self.now_ms < deadline:
            self.faults.advance(self.now_ms)
            while publish_times and publish_times[0] <= self.now_ms:
                publish_times.pop(0)
                self.clients.publish(self.now_ms, self.rng.choice(plan.streams))
            self.clients.advance(self.now_ms)
            if self.delivery is not None:
                self.delivery.advance(self.now_ms)
            if self.work is not None:
                self.work.advance(self.now_ms, self.shells, self.wall_ms)
            if self.compaction is not None:
                self.compaction.publish(self.now_ms, self.clients)
            self._step()
            idle = self.clients.idle() and not publish_times
            idle = idle and (self.delivery is None or self.delivery.idle())
            idle = idle and (self.work is None or self.work.idle(self.shells, self._verified_of))
            idle = idle and (
                self.compaction is None
                or self.compaction.settled(self.shells, self.wall_ms)
                or self.now_ms >= calm_from + COMPACTION_WAIT_MS
            )
            if self.now_ms > calm_from and idle and self._quiet():
                break
            self.now_ms = self._next_time(publish_times)
        work_done = self.work is None or self.work.idle(self.shells, self._verified_of)
        if not self.clients.idle() or not self._quiet() or not work_done:
            raise InvariantViolation(
                f"no quiescence by {self.now_ms - START_MS} ms: "
                f"{len(self.clients.requests)} requests open; work group done: {work_done}; "
                f"{self._describe()}"
            )
        self.checker.check_no_acked_loss(list(self.nodes.values()))
        if self.delivery is not None:
            for n, node in self.nodes.items():
                self.delivery.check(node, self.incarnation[n], final=True)
        if self.work is not None:
            self.work.check(self.shells, self._verified_of)
        if self.compaction is not None:
            self.compaction.check(self.checker, self.nodes, self.shells, self.now_ms, self.wall_ms)
        return SimResult(
            self.seed,
            plan,
            self.clients.acked,
            self.clients.rejected,
            self.network.sent,
            self.now_ms - START_MS,
            self.trace,
        )

    def idle(self, duration_ms: int) -> int:
        """Let a quiet cluster run for ``duration_ms`` with no clients; the mesh messages it
        sent meanwhile (what idling costs)."""
        sent = self.network.sent
        until = self.now_ms + duration_ms
        while self.now_ms < until:
            self._step()
            self.now_ms = max(self.now_ms + 1, min([*self.next_tick.values(), until]))
        return self.network.sent - sent

    def _next_time(self, publish_times: list[int]) -> int:
        candidates = list(self.next_tick.values())
        candidates += [t for r in self.runners.values() if (t := r.due_ms) is not None]
        paused = self.faults.is_paused
        busy = (s.pending or s.log_reads for n, s in self.shells.items() if not paused(n))
        if any(busy):
            candidates.append(self.now_ms + 1)
        for t in (
            self.network.next_time(),
            publish_times[0] if publish_times else None,
            self.clients.next_time(),
            self.delivery.next_time() if self.delivery is not None else None,
            self.work.next_time() if self.work is not None else None,
            self.faults.next_time(),
        ):
            if t is not None:
                candidates.append(t)
        return max(self.now_ms + 1, min(candidates))

    def _step(self) -> None:
        inbox: dict[int, list[Event]] = {}
        paused = self.faults.is_paused
        for n, shell in self.shells.items():  # first, as the node's loop takes them
            if paused(n):  # a stopped process syncs nothing, and hears nothing
                continue
            events = self._own_events(n)
            if events or shell.log_reads:
                inbox[n] = events
        for _src, dst, message in self.network.due(self.now_ms):
            if dst in self.nodes:
                inbox.setdefault(dst, []).append(MeshReceived(message))
        for n, events in self.clients.outgoing.items():
            if n in self.nodes:
                inbox.setdefault(n, []).extend(events)
        self.clients.outgoing = {}
        for n in list(self.nodes):
            if self.compaction is not None and not paused(n):
                wall = self.wall_ms(n)
                self.compaction.tick(n, self.now_ms, wall, self.shells[n], self.nodes[n])
            if self.next_tick[n] <= self.now_ms and not paused(n):
                self.next_tick[n] = self.now_ms + TICK_MS
                inbox.setdefault(n, []).append(Tick())
        for n, events in sorted(inbox.items()):
            if paused(n):
                self.faults.hold(n, events)
                continue
            self._handle(n, events)

    def _own_events(self, n: int) -> list[Event]:
        """What node ``n``'s loop takes first: a restart's logs and the disk's answers, and
        what a sync that finished by now made durable."""
        shell = self.shells[n]
        events = shell.take_pending()
        if self.runners[n].finish_due(self.now_ms):
            events += shell.completed(Now(self.wall_ms(n), self.now_ms))
        return events

    def _verified_of(self, n: int, stream: str) -> int:
        state = self.nodes[n].streams.get(stream)
        return state.timeline.readable_seq if state is not None else 0

    def wall_ms(self, n: int) -> int:
        """Node ``n``'s wall clock now, as the faults left it."""
        return self.faults.wall_ms(n, self.now_ms)

    def _handle(self, n: int, events: list[Event]) -> None:
        node = self.nodes[n]
        # carried out: sent, written, answers held until the checker has looked
        self.shells[n].turn(Now(self.wall_ms(n), self.now_ms), events)
        self.runners[n].schedule(self.now_ms, self.disk_rng, self.plan.disk_latency_ms_max)
        incarnation = self.incarnation[n]
        # a stream can only change while active (the core's design); every 64th turn all
        self.turns += 1
        changed = list(node.streams) if self.turns % 64 == 0 else list(node.active)
        logs = self.shells[n].disk.store.logs
        self.checker.check_node(node, incarnation, changed, lambda name: log_state(logs.get(name)))
        if self.delivery is not None and self.turns % 64 == 0:
            self.delivery.check(node, incarnation, final=False)
        fenced = node.state_name() == "fenced"
        for answer in self.answers[n].take():
            self.clients.on_reply(self.now_ms, n, answer, fenced)
        members, self.answers[n].members = self.answers[n].members, []
        if self.work is not None:
            for client, req_id, reply in members:
                self.work.on_answer(self.now_ms, client, req_id, reply)

    # --- the nodes' processes and machines, as the faults act on them (FaultTarget) -----

    def node_running(self, n: int) -> bool:
        return n in self.nodes

    def start_node(self, n: int) -> bool:
        """Start node ``n`` from its disk (the real store, recovered), in a new epoch above
        every one it had and with seqs above every one it may have issued; False when its
        failing disk refused."""
        config = CoreConfig(n, self.plan.subscriptions, self.plan.params)
        disk, runner = node_disk(self.files[n], n, self.plan.params, self.storage, self.settings_of)
        try:
            restored, (epoch, floor, reserved) = disk.open(self.wall_ms(n))
        except (StorageError, OSError) as exc:
            files = self.files[n]
            if not (files.write_errors or files.sync_errors):
                raise InvariantViolation(f"node {n} could not start from its disk: {exc}") from exc
            disk.close()  # the process exits; its descriptors are gone
            self.files[n].crash(power_loss=False)
            self.note(f"node {n} failed to start: {exc}")
            return False
        self.incarnation[n] = self.incarnation.get(n, 0) + 1 + n * 1000
        forgot = n in self.replaced  # its operator starts it with --recover
        node = self.nodes[n] = NodeCore(config, epoch, floor, reserved, forgot=forgot)
        answers = self.answers[n] = SimAnswers()
        reporter = SimReporter(self.checker, self.incarnation[n])
        mesh = SimMesh(n, self.network, list(self.ids), self.checker, lambda: self.now_ms)
        shell = Shell(n, node, disk, mesh, answers, reporter, self.storage.votes_wait)
        shell.pending = list(restored)
        self.shells[n], self.runners[n] = shell, runner
        self.next_tick[n] = self.now_ms
        if self.compaction is not None:
            self.compaction.started_node(n, self.now_ms)
        return True

    def stop_node(self, n: int, graceful: bool) -> None:
        if graceful:
            self._handle(n, [ShutdownRequested()])
            self.shells[n].disk.close()
        else:
            self.files[n].crash(power_loss=False)  # the process's descriptors are gone
        del self.nodes[n], self.shells[n], self.runners[n], self.answers[n]
        del self.next_tick[n]
        self.network.forget(n)
        self.clients.node_gone(self.now_ms, n)
        if self.work is not None:
            self.work.node_gone(self.now_ms, n)

    def resume_node(self, n: int, held: list[Event]) -> None:
        self._handle(n, [*self._own_events(n), *held, Tick()])

    def disk(self, n: int) -> SimFiles:
        return self.files[n]

    def replace_disk(self, n: int) -> SimFiles:
        self.replaced.add(n)
        self.files[n] = SimFiles(self.disk_rng)
        return self.files[n]

    def note(self, line: str) -> None:
        self.trace.append(f"{self.now_ms - START_MS} ms: {line}")

    # --- quiescence ---------------------------------------------------------------------

    def _quiet(self) -> bool:
        """Healed and settled: every live node serves and sees every other live node in its
        current epoch; every live replica of every stream knows it, is synced, and verified
        its head with the same digest; every consumer delivered up to that head."""
        if self.network.in_flight or not self.faults.settled():
            return False
        heads: dict[str, set[bytes]] = {}
        verified: dict[str, int] = {}
        for n, node in self.nodes.items():
            if node.state_name() != "serving":
                return False
            for m, other in self.nodes.items():
                if m != n and node.peers.states[m] != (True, other.epoch):
                    return False
            for name, state in node.streams.items():
                if not state.catchup.synced or any(x.queue for x in state.lanes.values()):
                    return False
                if state.timeline.readable_seq != state.timeline.head_seq:
                    return False
                heads.setdefault(name, set()).add(state.timeline.head_digest)
                verified[name] = state.timeline.readable_seq
        for name in heads:
            for node in self.nodes.values():
                if node.replicates(name) and name not in node.streams:
                    return False
        if not all(len(d) == 1 for d in heads.values()):
            return False
        return all(c.after_seq == verified.get(c.stream, 0) for c in self.clients.consumers)

    def _describe(self) -> str:
        consumers = ", ".join(
            f"consumer {c.index} of {c.stream} on node {c.node} at {c.after_seq}"
            for c in self.clients.consumers
        )
        nodes = "; ".join(
            f"node {n} ({node.state_name()}): "
            + ", ".join(
                f"{name} head {s.timeline.head_seq} verified {s.verified_seq} "
                f"{s.catchup.state.value} lanes "
                + ",".join(
                    f"{o}:{lane.state.value}/{len(lane.queue)}" for o, lane in s.lanes.items()
                )
                for name, s in node.streams.items()
                if s.verified_seq != s.timeline.head_seq or any(x.queue for x in s.lanes.values())
            )
            for n, node in self.nodes.items()
        )
        return f"{nodes}; {consumers}"


def replay_flags(
    delivery: bool | None,
    work: bool | None,
    compacted: bool | None,
    third_lose_power: bool,
    partitions: bool = False,
) -> str:
    """The ``relay sim`` options that replay a seed run with these overrides (None: drawn)."""
    chosen = {"delivery": delivery, "work": work, "compacted": compacted}
    chosen["third-lose-power"] = None if third_lose_power else False
    chosen["partitions"] = partitions or None
    return "".join(
        f" --{'' if value else 'no-'}{name}" for name, value in chosen.items() if value is not None
    )


def run_seed(
    seed: int,
    nodes: int = 3,
    with_faults: bool = True,
    delivery: bool | None = None,
    work: bool | None = None,
    compacted: bool | None = None,
    third_lose_power: bool = True,
    partitions: bool = False,
) -> SimResult:
    """Run one seed; ``delivery``, ``work`` and ``compacted`` override the draws (a seed found
    before the simulator had groups and batches, work groups or a compacted stream replays as it
    was found without them; ``work=True`` gives every seed a work group, ``compacted=True`` a
    compacted stream); ``third_lose_power=False`` replays a seed found before a third of all
    runs lost power on every node, ``partitions=True`` draws the faults of
    ``partition_faults`` (``SimPlan.draw``)."""
    plan = SimPlan.draw(seed, nodes, with_faults, third_lose_power, partitions)
    if delivery is not None:
        plan = replace(plan, delivery=delivery)
    if work is not None:
        plan = replace(plan, work=work)
    if compacted is not None:
        plan = plan.with_compacted(compacted)
    cluster = SimCluster(seed, plan)
    try:
        return cluster.run()
    except InvariantViolation as exc:
        trace = "\n  ".join(cluster.trace[-20:])
        raise InvariantViolation(
            f"seed {seed} ({nodes} nodes) failed: {exc}\n  replay: relay sim --seed {seed} "
            f"--nodes {nodes}"
            f"{replay_flags(delivery, work, compacted, third_lose_power, partitions)}"
            f"\n  {trace}"
        ) from exc
