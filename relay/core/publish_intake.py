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
of messages are held. ``NodeCore`` is this class
plus the rest.
"""

from __future__ import annotations

from collections import deque

from relay import errors
from relay.core import reads
from relay.core.events import PublishRequested, Redirect, Rejected, Reply
from relay.core.fencing import NodeState
from relay.core.parts import NodeParts
from relay.core.publish import (
    Publishes,
    attach_retries,
    refusal,
    request_bytes,
    request_problem,
    superseded,
    unadmitted,
)
from relay.core.routing import stream_name_problem
from relay.core.timer import Now

HELD_MAX = 1024  # publish requests held at once, over every stream
HELD_BYTES_MAX = 64 << 20  # and the bytes their messages carry
HOLD_MS = 1000  # how long a request is held before it is refused after all

Held = deque[tuple[int, int, PublishRequested]]  # (elapsed ms it arrived, bytes, request)


class PublishIntake(NodeParts):
    publishes: Publishes
    state: NodeState
    on_hold: dict[str, Held]  # stream -> its held requests
    held_count: int
    held_bytes: int  # their payloads

    def _on_publish(self, now: Now, req: PublishRequested) -> None:
        refused = self._publish_refusal(req)
        if refused is None and (req.stream in self.on_hold or self._wait_reason(now, req)):
            size = request_bytes(req)
            if self.held_count < HELD_MAX and self.held_bytes + size <= HELD_BYTES_MAX:
                self.on_hold.setdefault(req.stream, deque()).append((self.elapsed_ms, size, req))
                self.held_count += 1
                self.held_bytes += size
                return
            why = f"{self.held_count} publishes ({self.held_bytes} bytes) are held here; retry"
            refused = Rejected(errors.UNAVAILABLE, why)
        if refused is not None:
            self._effects.append(Reply(req.client, req.req_id, refused, 0))
        else:
            self._coordinate(now, req, self.elapsed_ms)

    def _release_held(self, now: Now) -> None:
        """Take (or refuse) each stream's held requests, in order, as far as they may go."""
        for stream, held in list(self.on_hold.items()):
            while held:
                arrived_ms, size, req = held[0]
                refused = self._publish_refusal(req)
                if refused is None:
                    why = self._wait_reason(now, req)
                    if why and self.elapsed_ms - arrived_ms < HOLD_MS:
                        break
                    if why:
                        refused = self._unavailable(req, f"held {HOLD_MS} ms: {why}")
                held.popleft()
                self.held_count -= 1
                self.held_bytes -= size
                if refused is not None:
                    self._effects.append(Reply(req.client, req.req_id, refused, 0))
                else:
                    self._coordinate(now, req, arrived_ms)
            if not held:
                del self.on_hold[stream]

    def _wait_reason(self, now: Now, req: PublishRequested) -> str | None:
        """Why ``req`` must wait a moment before it gets seqs here, or None."""
        if not self.origin.room(req.stream, now.wall_ms, len(req.items)):
            return "this node's seq reservation is being renewed on its disk"
        replicas = self.stream_set.routing.replicas_of(req.stream)
        me = (self.node_id, self.epoch)
        admitted = {n: me in p.accepts for n, p in self.peers.by_id.items() if n in replicas}
        return unadmitted(self.streams[req.stream], self.peers.up_nodes(), admitted)

    def _coordinate(self, now: Now, req: PublishRequested, arrived_ms: int) -> None:
        state = self.streams[req.stream]
        pending = self.publishes.start(self.elapsed_ms, req, arrived_ms)
        fresh, copies = attach_retries(state, req, pending)
        if fresh:
            txs = self.origin.originate(req.stream, now, req.producer_id, fresh)
            state.take_chain(self.node_id, txs)
            pending.originated(txs, copies)
        self.publishes.wait(req.stream, pending)
        self._touch(req.stream)

    def _publish_refusal(self, req: PublishRequested) -> Rejected | Redirect | None:
        problem = stream_name_problem(req.stream) or request_problem(req, self.params)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        replicas = self.stream_set.routing.replicas_of(req.stream)
        if self.node_id not in replicas:
            return reads.redirect(req.stream, replicas, self.peers.up_nodes())
        if self.state is not NodeState.SERVING:
            fenced = self.state is NodeState.FENCED
            why = "fenced: it cannot hear a quorum of the cluster" if fenced else "shutting down"
            return self._unavailable(req, f"this node is {why}")
        if self.storage_error:
            why = f"this node's disk refuses writes ({self.storage_error}); try another node"
            others = tuple(n for n in replicas if n != self.node_id)
            return Rejected(errors.STORAGE, why, others)
        state = self._stream(req.stream)
        problem = (
            refusal(state, self.peers.up_nodes()) if state else "this node holds too many streams"
        )
        if problem:
            return self._unavailable(req, problem)
        return superseded(state, req, self.wall_ms) if state and req.producer_id else None

    def _unavailable(self, req: PublishRequested, why: str) -> Rejected:
        replicas = self.stream_set.routing.replicas_of(req.stream)
        return reads.unavailable(why, replicas, self.node_id, self.peers.up_nodes())
