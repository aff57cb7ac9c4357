"""What a node does with each publish request: refuse it, take it, or hold it a moment.

How this works: a request is refused when it is malformed, when this node does not replicate
the stream (a redirect), does not serve, cannot reach a quorum of the stream's replicas or is
rejoining it, or when its disk refuses writes. It is *held* when it can go on in a moment: the
node's durable seq reservation (``origin.py``) has no room left (a peer's clock pushed the
floor past it, or its renewal waits on a busy disk), or the stream's replicas have not admitted
this node's epoch yet (a heartbeat away, just after a start or a cut). A stream's held requests
go on in arrival order, and while one is held every later one of that stream waits behind it:
so a producer's pipelined requests keep their order, where a refusal would send the first
elsewhere while the second got a seq here. A request held ``HOLD_MS`` is refused after all
(``unavailable``, naming why); at most ``HELD_MAX`` requests and ``HELD_BYTES_MAX`` bytes
of messages are held.

A request taken here gets its seqs from ``Origin`` and waits for its answer in ``Publishes``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from relay import errors
from relay.core import reads
from relay.core.events import Effect, PublishReply, PublishRequested, Redirect, Rejected
from relay.core.fencing import NodeState
from relay.core.origin import Origin
from relay.core.params import CoreParams
from relay.core.peers import Peers
from relay.core.publish import (
    Publishes,
    attach_retries,
    refusal,
    request_bytes,
    request_problem,
    superseded,
    unadmitted,
)
from relay.core.routing import StreamRule, stream_name_problem
from relay.core.streams import StreamSet
from relay.core.timer import Now

HELD_MAX = 1024  # publish requests held at once, over every stream
HELD_BYTES_MAX = 64 << 20  # and the bytes their messages carry
HOLD_MS = 1000  # how long a request is held before it is refused after all

Held = deque[tuple[int, int, PublishRequested]]  # (elapsed ms it arrived, bytes, request)


@dataclass(frozen=True, slots=True)
class Gate:
    """What a publish depends on that the rest of the node owns, this turn."""

    state: NodeState
    storage_error: str  # what the disk refused last ("": it takes writes)
    wall_ms: int  # the wall clock of the turn, as claims are judged (``WallGuard``)


class PublishIntake:
    def __init__(
        self,
        node_id: int,
        params: CoreParams,
        origin: Origin,
        peers: Peers,
        stream_set: StreamSet,
        publishes: Publishes,
    ) -> None:
        self.node_id = node_id
        self.params = params
        self.origin = origin
        self.peers = peers
        self.stream_set = stream_set
        self.publishes = publishes
        self.on_hold: dict[str, Held] = {}  # stream -> its held requests
        self.held_count = 0
        self.held_bytes = 0  # their payloads

    def take(self, out: list[Effect], now: Now, gate: Gate, req: PublishRequested) -> None:
        refused = self._refusal(gate, req)
        if refused is None and (req.stream in self.on_hold or self._wait_reason(now, req)):
            size = request_bytes(req)
            if self.held_count < HELD_MAX and self.held_bytes + size <= HELD_BYTES_MAX:
                self.on_hold.setdefault(req.stream, deque()).append((now.elapsed_ms, size, req))
                self.held_count += 1
                self.held_bytes += size
                return
            why = f"{self.held_count} publishes ({self.held_bytes} bytes) are held here; retry"
            refused = Rejected(errors.UNAVAILABLE, why)
        if refused is not None:
            out.append(PublishReply(req.client, req.req_id, refused))
        else:
            self._coordinate(now, req)

    def release(self, out: list[Effect], now: Now, gate: Gate) -> None:
        """Take (or refuse) each stream's held requests, in order, as far as they may go."""
        for stream, held in list(self.on_hold.items()):
            while held:
                arrived_ms, size, req = held[0]
                refused = self._refusal(gate, req)
                if refused is None:
                    why = self._wait_reason(now, req)
                    if why and now.elapsed_ms - arrived_ms < HOLD_MS:
                        break
                    if why:
                        refused = self._unavailable(req, f"held {HOLD_MS} ms: {why}")
                held.popleft()
                self.held_count -= 1
                self.held_bytes -= size
                if refused is not None:
                    out.append(PublishReply(req.client, req.req_id, refused))
                else:
                    self._coordinate(now, req)
            if not held:
                del self.on_hold[stream]

    def check(self) -> None:
        assert self.held_count == sum(map(len, self.on_hold.values())) <= HELD_MAX
        assert 0 <= self.held_bytes <= HELD_BYTES_MAX

    def _wait_reason(self, now: Now, req: PublishRequested) -> str | None:
        """Why ``req`` must wait a moment before it gets seqs here, or None."""
        if not self.origin.room(req.stream, now.wall_ms, len(req.items)):
            return "this node's seq reservation is being renewed on its disk"
        replicas = self.stream_set.routing.replicas_of(req.stream)
        admitted = self.peers.admitting((self.node_id, self.origin.epoch), replicas)
        state = self.stream_set.by_name[req.stream]
        return unadmitted(state, self.peers.up_nodes(), admitted)

    def _coordinate(self, now: Now, req: PublishRequested) -> None:
        state = self.stream_set.by_name[req.stream]
        pending = self.publishes.start(now.elapsed_ms, req)
        fresh, copies = attach_retries(state, req, pending)
        if fresh:
            txs = self.origin.originate(req.stream, now, req.producer_id, fresh)
            state.take_chain(self.node_id, txs)
            pending.originated(txs, copies)
        self.publishes.wait(req.stream, pending)
        self.stream_set.touch(req.stream)

    def _refusal(self, gate: Gate, req: PublishRequested) -> Rejected | Redirect | None:
        rule = self.stream_set.routing.rule_of(req.stream)
        bytes_max = rule.payload_bytes_max if rule and rule.payload_bytes_max else None
        problem = stream_name_problem(req.stream) or request_problem(req, self.params, bytes_max)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        if rule is not None:
            refused = _rule_refusal(rule, req, req.stream in self.stream_set.by_name)
            if refused is not None:
                return refused
        replicas = self.stream_set.routing.replicas_of(req.stream)
        if self.node_id not in replicas:
            return reads.redirect(req.stream, replicas, self.peers.up_nodes())
        if gate.state is not NodeState.SERVING:
            fenced = gate.state is NodeState.FENCED
            why = "fenced: it cannot hear a quorum of the cluster" if fenced else "shutting down"
            return self._unavailable(req, f"this node is {why}")
        if gate.storage_error:
            why = f"this node's disk refuses writes ({gate.storage_error}); try another node"
            others = tuple(n for n in replicas if n != self.node_id)
            return Rejected(errors.STORAGE, why, others)
        state = self.stream_set.ensure(req.stream, self.origin.epoch, self.peers.states)
        problem = (
            refusal(state, self.peers.up_nodes()) if state else "this node holds too many streams"
        )
        if problem:
            return self._unavailable(req, problem)
        return superseded(state, req, gate.wall_ms) if state and req.producer_id else None

    def _unavailable(self, req: PublishRequested, why: str) -> Rejected:
        replicas = self.stream_set.routing.replicas_of(req.stream)
        return reads.unavailable(why, replicas, self.node_id, self.peers.up_nodes())


def _rule_refusal(rule: StreamRule, req: PublishRequested, exists: bool) -> Rejected | None:
    """Why the stream's ``[[stream]]`` block refuses ``req``, or None."""
    if not rule.create and not rule.declares and not exists:
        why = (
            f"no stream {req.stream!r} is declared, and the [[stream]] block {rule.pattern!r} "
            "it falls under has create = false: declare it by its name in the cluster file"
        )
        return Rejected(errors.NOT_FOUND, why)
    if rule.keyed and any(item.key is None for item in req.items):
        why = 'a message without a key: the stream is compacted by key (cleanup = "compact")'
        return Rejected(errors.BAD_REQUEST, why)
    return None
