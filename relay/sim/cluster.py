"""A whole relay cluster on one thread: pure nodes, a seeded network, producers, faults, a
checker.

How this works: time advances in whole milliseconds to the next thing that happens (a
message landing, a node's tick, a publish, a fault starting or healing). Every node gets
everything that landed for it at that instant as one batch, as the real shell drains its
sockets; after every batch the checker runs. Once the publishing and the faults are over,
everything heals and the run must go quiet: every publish answered, every live replica
verified up to its head with equal digests. The same seed always replays the same run.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from relay.core.events import (
    Acked,
    Broadcast,
    Event,
    MeshReceived,
    PublishRequested,
    PublishResults,
    Reply,
    ShutdownRequested,
    Tick,
    Verified,
)
from relay.core.messages import Replicate
from relay.core.node import NodeCore
from relay.core.params import CoreConfig, CoreParams
from relay.core.routing import Subscription
from relay.core.timer import Now
from relay.sim.checker import InvariantChecker, InvariantViolation
from relay.sim.faults import Fault, FaultKind, draw_faults
from relay.sim.network import LinkFaults, SimNetwork

START_MS = 1_780_000_000_000
TICK_MS = 10
CLIENT_TIMEOUT_MS = 1500  # a producer that hears nothing this long retries elsewhere
SETTLE_MS = 30_000  # how long a healed cluster may take to go quiet
SIM_PARAMS = CoreParams(
    heartbeat_ms=50,
    suspect_after_ms=300,
    fence_after_ms=250,
    publish_timeout_ms=2000,
    repair_after_ms=60,
    stuck_after_ms=300,
    buffer_txs_max=5000,
)


@dataclass(frozen=True, slots=True)
class SimPlan:
    """What one seed runs; drawn from the seed by ``SimPlan.draw``."""

    nodes: int
    streams: tuple[str, ...]
    publish_ms: int
    publishes: int
    retry_rate: float
    delay_ms_max: int
    faults: tuple[Fault, ...]

    @staticmethod
    def draw(seed: int, nodes: int, with_faults: bool = True) -> SimPlan:
        rng = random.Random(seed * 7919 + nodes)
        publish_ms = rng.randint(200, 1500)
        return SimPlan(
            nodes=nodes,
            streams=tuple(f"s{i}" for i in range(rng.randint(1, 3))),
            publish_ms=publish_ms,
            publishes=rng.randint(20, 150),
            retry_rate=rng.choice([0.0, 0.1, 0.3]),
            delay_ms_max=rng.randint(0, 5),
            faults=draw_faults(rng, nodes, publish_ms) if with_faults else (),
        )


@dataclass(slots=True)
class SimResult:
    seed: int
    plan: SimPlan
    acked: int
    rejected: int
    messages: int
    end_ms: int
    trace: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Publish:
    stream: str
    producer_id: str
    msg_id: int
    payload: bytes
    attempts: int = 0


@dataclass(slots=True)
class Request:
    node: int
    publish: Publish
    sent_ms: int


class SimCluster:
    def __init__(self, seed: int, plan: SimPlan, params: CoreParams = SIM_PARAMS) -> None:
        self.seed = seed
        self.plan = plan
        self.rng = random.Random(seed)
        self.params = params
        self.subs = tuple(Subscription(n, ("*",)) for n in range(1, plan.nodes + 1))
        self.nodes: dict[int, NodeCore] = {}
        self.incarnation: dict[int, int] = {}
        self.offsets: dict[int, int] = {n: 0 for n in range(1, plan.nodes + 1)}
        self.paused: set[int] = set()
        self.backlog: dict[int, list[Event]] = {}
        self.now_ms = START_MS
        self.next_tick: dict[int, int] = {}
        for n in range(1, plan.nodes + 1):
            self._boot(n)
        self.network = SimNetwork(self.rng, LinkFaults(delay_ms_max=plan.delay_ms_max))
        self.checker = InvariantChecker()
        self.requests: dict[int, Request] = {}
        self.retry_queue: list[tuple[int, int, Publish]] = []
        self.req_ids = 0
        self.acked = 0
        self.rejected = 0
        self.trace: list[str] = []
        self._client_events: dict[int, list[Event]] = {}
        self._actions: list[tuple[int, int, bool, Fault]] = []  # (at, order, is_start, fault)
        for i, fault in enumerate(plan.faults):
            heapq.heappush(self._actions, (START_MS + fault.start_ms, 2 * i, True, fault))
            heapq.heappush(self._actions, (START_MS + fault.end_ms, 2 * i + 1, False, fault))

    # --- running ------------------------------------------------------------------------

    def run(self) -> SimResult:
        plan = self.plan
        publish_times = sorted(
            START_MS + self.rng.randint(100, 100 + plan.publish_ms) for _ in range(plan.publishes)
        )
        msg_ids: dict[str, int] = {}
        calm_from = START_MS + 100 + max([plan.publish_ms] + [f.end_ms for f in plan.faults])
        deadline = calm_from + SETTLE_MS
        while self.now_ms < deadline:
            while self._actions and self._actions[0][0] <= self.now_ms:
                _, _, is_start, fault = heapq.heappop(self._actions)
                self._fault(fault, is_start)
            while publish_times and publish_times[0] <= self.now_ms:
                publish_times.pop(0)
                stream = self.rng.choice(plan.streams)
                pid = f"p{self.rng.randint(1, 3)}"
                msg_ids[pid] = msg_ids.get(pid, 0) + 1
                payload = self.rng.randbytes(self.rng.randint(0, 40))
                self._send(Publish(stream, pid, msg_ids[pid], payload))
            while self.retry_queue and self.retry_queue[0][0] <= self.now_ms:
                self._send(heapq.heappop(self.retry_queue)[2])
            self._time_out_requests()
            self._step()
            idle = not self.requests and not self.retry_queue and not publish_times
            if self.now_ms > calm_from and idle and self._quiet():
                break
            self.now_ms = self._next_time(publish_times)
        if self.requests or self.retry_queue or not self._quiet():
            raise InvariantViolation(
                f"no quiescence by {self.now_ms - START_MS} ms: "
                f"{len(self.requests)} publishes unanswered; {self._describe()}"
            )
        self.checker.check_no_acked_loss(list(self.nodes.values()))
        return SimResult(
            self.seed,
            plan,
            self.acked,
            self.rejected,
            self.network.sent,
            self.now_ms - START_MS,
            self.trace,
        )

    def _next_time(self, publish_times: list[int]) -> int:
        candidates = list(self.next_tick.values())
        for t in (
            self.network.next_time(),
            publish_times[0] if publish_times else None,
            self.retry_queue[0][0] if self.retry_queue else None,
            self._actions[0][0] if self._actions else None,
        ):
            if t is not None:
                candidates.append(t)
        candidates += [r.sent_ms + CLIENT_TIMEOUT_MS for r in self.requests.values()]
        return max(self.now_ms + 1, min(candidates))

    def _step(self) -> None:
        inbox: dict[int, list[Event]] = {}
        for _src, dst, message in self.network.due(self.now_ms):
            if dst in self.nodes:
                inbox.setdefault(dst, []).append(MeshReceived(message))
        for n, events in self._client_events.items():
            if n in self.nodes:
                inbox.setdefault(n, []).extend(events)
        self._client_events = {}
        for n in list(self.nodes):
            if self.next_tick[n] <= self.now_ms and n not in self.paused:
                self.next_tick[n] = self.now_ms + TICK_MS
                inbox.setdefault(n, []).append(Tick())
        for n, events in sorted(inbox.items()):
            if n in self.paused:
                self.backlog.setdefault(n, []).extend(e for e in events if not isinstance(e, Tick))
                continue
            self._handle(n, events)

    def _handle(self, n: int, events: list[Event]) -> None:
        node = self.nodes[n]
        before = {name: state.verified_seq for name, state in node.streams.items()}
        effects = node.handle(Now(self.now_ms + self.offsets[n], self.now_ms), events)
        announced = {e.stream: e.seq for e in effects if isinstance(e, Verified)}
        self.checker.check_announced(node, before, announced)
        for effect in effects:
            if isinstance(effect, Broadcast):
                msg = effect.message
                if isinstance(msg, Replicate):
                    for tx in msg.txs:
                        self.checker.check_origin_seq(tx.origin, msg.stream, tx.seq)
                for dst in self.offsets:
                    if dst != n:
                        self.network.send(self.now_ms, n, dst, msg)
            elif isinstance(effect, Reply):
                self._on_reply(node, effect)
        self.checker.check_node(node, self.incarnation[n])

    def _boot(self, n: int) -> None:
        """Start node ``n`` with empty memory (a new epoch from its own clock)."""
        wall = self.now_ms + self.offsets[n]
        self.nodes[n] = NodeCore(CoreConfig(n, self.subs, self.params), epoch=wall)
        self.incarnation[n] = self.incarnation.get(n, 0) + 1 + n * 1000
        self.next_tick[n] = self.now_ms

    # --- producers ----------------------------------------------------------------------

    def _send(self, pub: Publish, avoid: int | None = None) -> None:
        choices = [n for n in self.offsets if n != avoid]
        node = self.rng.choice(choices)
        pub.attempts += 1
        self.req_ids += 1
        self.requests[self.req_ids] = Request(node, pub, self.now_ms)
        event = PublishRequested(
            b"sim", self.req_ids, pub.stream, pub.producer_id, ((pub.msg_id, pub.payload),)
        )
        if node in self.nodes:
            self._client_events.setdefault(node, []).append(event)
        if pub.attempts == 1 and self.plan.retry_rate and self.rng.random() < self.plan.retry_rate:
            # a producer that gives up waiting early and retries elsewhere: a duplicate
            again = Publish(pub.stream, pub.producer_id, pub.msg_id, pub.payload, pub.attempts)
            self._retry(self.now_ms + self.rng.randint(0, 20), again)

    def _retry(self, at_ms: int, pub: Publish) -> None:
        self.req_ids += 1  # only an order key for the heap
        heapq.heappush(self.retry_queue, (at_ms, self.req_ids, pub))

    def _time_out_requests(self) -> None:
        for req_id, request in list(self.requests.items()):
            if self.now_ms - request.sent_ms >= CLIENT_TIMEOUT_MS:
                del self.requests[req_id]
                self._retry(self.now_ms, request.publish)

    def _on_reply(self, node: NodeCore, reply: Reply) -> None:
        request = self.requests.pop(reply.req_id, None)
        if request is None:
            return
        pub = request.publish
        body = reply.body
        if isinstance(body, PublishResults) and isinstance(body.results[0], Acked):
            result = body.results[0]
            self.acked += 1
            self.checker.check_ack(
                node, pub.stream, pub.producer_id, pub.msg_id, result.seq, result.digest
            )
            return
        self.rejected += 1
        self._retry(self.now_ms + 20, pub)

    # --- faults -------------------------------------------------------------------------

    def _fault(self, fault: Fault, start: bool) -> None:
        self.trace.append(
            f"{self.now_ms - START_MS} ms: {'start' if start else 'heal'} {fault.describe()}"
        )
        kind, f = fault.kind, self.network.faults
        if kind in (FaultKind.CRASH, FaultKind.STOP):
            for n in fault.nodes:
                if start:
                    self._kill(n, graceful=kind is FaultKind.STOP and fault.amount == 1)
                elif kind is FaultKind.CRASH:
                    self._boot(n)
        elif kind is FaultKind.ISOLATE:
            links = {(a, b) for a in fault.nodes for b in self.offsets if a != b}
            links |= {(b, a) for a, b in links}
            f.cut = f.cut | links if start else f.cut - links
        elif kind is FaultKind.ONE_WAY:
            link = {(fault.nodes[0], fault.nodes[1])}
            f.cut = f.cut | link if start else f.cut - link
        elif kind is FaultKind.PAUSE:
            for n in fault.nodes:
                if start:
                    self.paused.add(n)
                elif n in self.paused:
                    self.paused.discard(n)
                    if n in self.nodes:
                        self._handle(n, [*self.backlog.pop(n, []), Tick()])
        elif kind is FaultKind.CLOCK_STEP and start:
            self.offsets[fault.nodes[0]] += fault.amount
        elif kind is FaultKind.LOSS:
            f.loss_per_mille = fault.amount if start else 0
        elif kind is FaultKind.DUPLICATE:
            f.duplicate_per_mille = fault.amount if start else 0
        elif kind is FaultKind.REORDER:
            f.reorder_per_mille = fault.amount if start else 0

    def _kill(self, n: int, graceful: bool) -> None:
        node = self.nodes.pop(n, None)
        if node is None:
            return
        if graceful:
            self.nodes[n] = node
            self._handle(n, [ShutdownRequested()])
            del self.nodes[n]
        del self.next_tick[n]
        self.paused.discard(n)
        self.backlog.pop(n, None)
        self.network.forget(n)
        for req_id, request in list(self.requests.items()):
            if request.node == n:  # the client sees its connection fail and retries elsewhere
                del self.requests[req_id]
                self._retry(self.now_ms + 50, request.publish)

    def _quiet(self) -> bool:
        if self.network.in_flight or self.paused:
            return False
        heads: dict[str, set[bytes]] = {}
        for node in self.nodes.values():
            if node.state_name() != "serving":
                return False
            for name, state in node.streams.items():
                if any(lane.queue for lane in state.lanes.values()):
                    return False
                if state.verified_seq != state.timeline.head_seq:
                    return False
                heads.setdefault(name, set()).add(state.timeline.head_digest)
        return all(len(d) == 1 for d in heads.values())

    def _describe(self) -> str:
        return "; ".join(
            f"node {n} ({node.state_name()}): "
            + ", ".join(
                f"{name} head {s.timeline.head_seq} verified {s.verified_seq} lanes "
                + ",".join(
                    f"{o}:{lane.state.value}/{len(lane.queue)}" for o, lane in s.lanes.items()
                )
                for name, s in node.streams.items()
            )
            for n, node in self.nodes.items()
        )


def run_seed(seed: int, nodes: int = 3, with_faults: bool = True) -> SimResult:
    cluster = SimCluster(seed, SimPlan.draw(seed, nodes, with_faults))
    try:
        return cluster.run()
    except InvariantViolation as exc:
        trace = "\n  ".join(cluster.trace[-20:])
        raise InvariantViolation(
            f"seed {seed} ({nodes} nodes) failed: {exc}\n  replay: relay sim --seed {seed} "
            f"--nodes {nodes}\n  {trace}"
        ) from exc
