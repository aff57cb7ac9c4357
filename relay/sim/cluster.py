"""A whole relay cluster on one thread: pure nodes, a seeded network, producers, a checker.

How this works: time advances in whole milliseconds to the next thing that happens (a
message landing, a node's tick, a producer's publish). Every node gets everything that
landed for it at that instant as one batch, as the real shell drains its sockets; after
every batch the checker runs. The same seed always replays the same run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from relay.core.events import (
    Acked,
    Broadcast,
    Event,
    MeshReceived,
    PublishRequested,
    PublishResults,
    Redirect,
    Rejected,
    Reply,
    ShutdownRequested,
    Tick,
)
from relay.core.messages import Replicate
from relay.core.node import NodeCore
from relay.core.params import CoreConfig, CoreParams
from relay.core.routing import Subscription
from relay.sim.checker import InvariantChecker, InvariantViolation
from relay.sim.network import NetworkFaults, SimNetwork

START_MS = 1_780_000_000_000
TICK_MS = 10


@dataclass(frozen=True, slots=True)
class SimPlan:
    """What one seed runs; drawn from the seed by ``SimPlan.draw``."""

    nodes: int
    streams: tuple[str, ...]
    publish_ms: int
    publishes: int
    retry_rate: float
    stop_node: int | None  # a node that stops mid-run, or None
    stop_at_ms: int
    graceful_stop: bool
    network: NetworkFaults

    @staticmethod
    def draw(seed: int, nodes: int) -> SimPlan:
        rng = random.Random(seed * 7919 + nodes)
        stop = rng.random() < 0.3
        return SimPlan(
            nodes=nodes,
            streams=tuple(f"s{i}" for i in range(rng.randint(1, 3))),
            publish_ms=rng.randint(200, 600),
            publishes=rng.randint(20, 120),
            retry_rate=rng.choice([0.0, 0.1, 0.3]),
            stop_node=rng.randint(1, nodes) if stop else None,
            stop_at_ms=rng.randint(50, 400),
            graceful_stop=rng.random() < 0.5,
            network=NetworkFaults(delay_ms_max=rng.randint(0, 5)),
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


class SimCluster:
    def __init__(self, seed: int, plan: SimPlan, params: CoreParams | None = None) -> None:
        self.seed = seed
        self.plan = plan
        self.rng = random.Random(seed)
        self.params = params or CoreParams(
            heartbeat_ms=50, suspect_after_ms=300, publish_timeout_ms=2000
        )
        subs = tuple(Subscription(n, ("*",)) for n in range(1, plan.nodes + 1))
        self.nodes: dict[int, NodeCore] = {
            n: NodeCore(CoreConfig(n, subs, self.params), epoch=START_MS) for n in subs_ids(subs)
        }
        self.network = SimNetwork(self.rng, plan.network)
        self.checker = InvariantChecker()
        self.now_ms = START_MS
        self.next_tick: dict[int, int] = {n: START_MS for n in self.nodes}
        self.requests: dict[int, tuple[int, Publish]] = {}  # req id -> (node, publish)
        self.retry_queue: list[tuple[int, Publish]] = []
        self.req_ids = 0
        self.acked = 0
        self.rejected = 0
        self.trace: list[str] = []
        self._client_events: dict[int, list[Event]] = {}

    # --- running ------------------------------------------------------------------------

    def run(self) -> SimResult:
        plan = self.plan
        publish_times = sorted(
            START_MS + self.rng.randint(100, 100 + plan.publish_ms) for _ in range(plan.publishes)
        )
        msg_ids: dict[str, int] = {}
        stop_at = START_MS + plan.stop_at_ms if plan.stop_node else None
        end_publish = START_MS + 100 + plan.publish_ms
        deadline = end_publish + 20_000
        while self.now_ms < deadline:
            if stop_at is not None and self.now_ms >= stop_at:
                self._stop(plan.stop_node or 0, plan.graceful_stop)
                stop_at = None
            while publish_times and publish_times[0] <= self.now_ms:
                publish_times.pop(0)
                stream = self.rng.choice(plan.streams)
                pid = f"p{self.rng.randint(1, 3)}"
                msg_ids[pid] = msg_ids.get(pid, 0) + 1
                payload = self.rng.randbytes(self.rng.randint(0, 40))
                self._send(Publish(stream, pid, msg_ids[pid], payload))
            while self.retry_queue and self.retry_queue[0][0] <= self.now_ms:
                self._send(self.retry_queue.pop(0)[1])
            self._step()
            idle = not self.requests and not self.retry_queue
            if self.now_ms > end_publish and idle and self._quiet():
                break
            self.now_ms = self._next_time(publish_times, stop_at)
        live = list(self.nodes.values())
        if self.requests or not self._quiet():
            raise InvariantViolation(
                f"no quiescence by {self.now_ms - START_MS} ms: "
                f"{len(self.requests)} publishes unanswered; {self._describe()}"
            )
        self.checker.check_no_acked_loss(live)
        return SimResult(
            self.seed,
            plan,
            self.acked,
            self.rejected,
            self.network.sent,
            self.now_ms - START_MS,
            self.trace,
        )

    def _next_time(self, publish_times: list[int], stop_at: int | None) -> int:
        candidates = [min(self.next_tick.values())]
        landing = self.network.next_time()
        if landing is not None:
            candidates.append(landing)
        if publish_times:
            candidates.append(publish_times[0])
        if self.retry_queue:
            candidates.append(self.retry_queue[0][0])
        if stop_at is not None:
            candidates.append(stop_at)
        return (
            max(self.now_ms + 1, min(candidates))
            if min(candidates) <= self.now_ms
            else min(candidates)
        )

    def _step(self) -> None:
        inbox: dict[int, list[Event]] = {}
        for _src, dst, message in self.network.due(self.now_ms):
            if dst in self.nodes:
                inbox.setdefault(dst, []).append(MeshReceived(message))
        for n, events in self._client_events.items():
            inbox.setdefault(n, []).extend(events)
        self._client_events = {}
        for n in list(self.nodes):
            if self.next_tick[n] <= self.now_ms:
                self.next_tick[n] = self.now_ms + TICK_MS
                inbox.setdefault(n, []).append(Tick())
        for n, events in sorted(inbox.items()):
            node = self.nodes.get(n)
            if node is None:
                continue
            for effect in node.handle(self.now_ms, events):
                self._carry_out(n, effect)
            self.checker.check_node(node)

    def _carry_out(self, n: int, effect: object) -> None:
        if isinstance(effect, Broadcast):
            msg = effect.message
            if isinstance(msg, Replicate):
                for tx in msg.txs:
                    self.checker.check_origin_seq(tx.origin, msg.stream, tx.seq)
            for dst in self.nodes:
                if dst != n:
                    self.network.send(self.now_ms, n, dst, msg)
        elif isinstance(effect, Reply):
            self._on_reply(n, effect)

    # --- producers ----------------------------------------------------------------------

    def _send(self, pub: Publish, avoid: int | None = None) -> None:
        choices = [n for n in self.nodes if n != avoid] or list(self.nodes)
        node = self.rng.choice(choices)
        pub.attempts += 1
        self.req_ids += 1
        self.requests[self.req_ids] = (node, pub)
        event = PublishRequested(
            b"sim", self.req_ids, pub.stream, pub.producer_id, ((pub.msg_id, pub.payload),)
        )
        self._client_events.setdefault(node, []).append(event)
        if self.plan.retry_rate and self.rng.random() < self.plan.retry_rate:
            # a producer that gives up waiting early and retries elsewhere: a duplicate
            self.retry_queue.append(
                (
                    self.now_ms + self.rng.randint(0, 20),
                    Publish(pub.stream, pub.producer_id, pub.msg_id, pub.payload, pub.attempts),
                )
            )
            self.retry_queue.sort(key=lambda item: item[0])

    def _on_reply(self, n: int, reply: Reply) -> None:
        entry = self.requests.pop(reply.req_id, None)
        if entry is None:
            return
        _, pub = entry
        body = reply.body
        if isinstance(body, PublishResults):
            result = body.results[0]
            if isinstance(result, Acked):
                self.acked += 1
                self.checker.check_ack(
                    pub.stream, pub.producer_id, pub.msg_id, result.seq, result.digest
                )
                return
            body = result
        if isinstance(body, Redirect | Rejected) and pub.attempts < 20:
            self.rejected += 1
            self.retry_queue.append((self.now_ms + 20, pub))
            self.retry_queue.sort(key=lambda item: item[0])

    # --- faults -------------------------------------------------------------------------

    def _stop(self, n: int, graceful: bool) -> None:
        node = self.nodes[n]
        self.trace.append(f"{self.now_ms - START_MS} ms: stop node {n} (graceful={graceful})")
        if graceful:
            for effect in node.handle(self.now_ms, [ShutdownRequested()]):
                self._carry_out(n, effect)
        del self.nodes[n]
        del self.next_tick[n]
        for req_id, (target, pub) in list(self.requests.items()):
            if target == n:  # the client sees its connection fail and retries elsewhere
                del self.requests[req_id]
                self.retry_queue.append((self.now_ms + 50, pub))
        self.retry_queue.sort(key=lambda item: item[0])

    def _quiet(self) -> bool:
        if self.network.in_flight:
            return False
        heads: dict[str, set[bytes]] = {}
        for node in self.nodes.values():
            for name, state in node.streams.items():
                if any(lane.queue for lane in state.lanes.values()):
                    return False
                if state.verified_seq != state.timeline.head_seq:
                    return False
                heads.setdefault(name, set()).add(state.timeline.head_digest)
        return all(len(d) == 1 for d in heads.values())

    def _describe(self) -> str:
        return "; ".join(
            f"node {n}: "
            + ", ".join(
                f"{name} head {s.timeline.head_seq} verified {s.verified_seq} lanes "
                + ",".join(
                    f"{o}:{lane.state.value}/{len(lane.queue)}" for o, lane in s.lanes.items()
                )
                for name, s in node.streams.items()
            )
            for n, node in self.nodes.items()
        )


def subs_ids(subs: tuple[Subscription, ...]) -> list[int]:
    return [s.node_id for s in subs]


def run_seed(seed: int, nodes: int = 3) -> SimResult:
    cluster = SimCluster(seed, SimPlan.draw(seed, nodes))
    try:
        return cluster.run()
    except InvariantViolation as exc:
        trace = "\n  ".join(cluster.trace[-20:])
        raise InvariantViolation(
            f"seed {seed} ({nodes} nodes) failed: {exc}\n  replay: relay sim --seed {seed} "
            f"--nodes {nodes}\n  {trace}"
        ) from exc
