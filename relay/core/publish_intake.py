"""What a node does with each publish request: refuse it, take it, or hold it a moment.

How this works: a request is refused when it is malformed, when this node does not replicate
the stream (a redirect), does not serve, or cannot coordinate it now (``publish.refusal``), or
when its disk refuses writes. Otherwise it needs seqs within the node's durable seq
reservation (``origin.py``). When the reservation has no room left (a peer's clock jumped the
floor past it, or its renewal waits on a busy disk), the request is *held*, not refused:
requests are held in arrival order and go on in that order once a renewal arrives, and while
any request is held every later one waits behind it. So a producer's pipelined requests to one
stream keep their order; a refusal would send the first elsewhere while the second got a seq
here. A held request that waits ``publish_timeout_ms`` gets ``timeout``, and at most
``HELD_MAX`` wait. ``NodeCore`` is this class plus the rest.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from relay import errors
from relay.core import reads
from relay.core.events import Effect, PublishRequested, Redirect, Rejected, Reply
from relay.core.fencing import NodeState
from relay.core.origin import Origin
from relay.core.params import CoreParams
from relay.core.peers import Peers
from relay.core.publish import Publishes, attach_retries, refusal, request_problem
from relay.core.routing import stream_name_problem
from relay.core.stream import StreamReplica
from relay.core.streams import StreamSet
from relay.core.timer import Now

HELD_MAX = 1024  # publish requests held at once while the seq reservation is renewed


class PublishIntake:
    node_id: int
    params: CoreParams
    origin: Origin
    peers: Peers
    stream_set: StreamSet
    streams: dict[str, StreamReplica]
    publishes: Publishes
    state: NodeState
    storage_error: str
    elapsed_ms: int
    _effects: list[Effect]
    on_hold: deque[tuple[int, PublishRequested]]  # (elapsed ms it arrived, request), in order

    if TYPE_CHECKING:  # MeshIntake's

        @property
        def epoch(self) -> int: ...

        def _stream(self, name: str) -> StreamReplica | None: ...

        def _touch(self, name: str) -> None: ...

    def _on_publish(self, now: Now, req: PublishRequested) -> None:
        refused = self._publish_refusal(req)
        if refused is None and (self.on_hold or not self._room(now, req)):
            if len(self.on_hold) < HELD_MAX:
                self.on_hold.append((self.elapsed_ms, req))
                return
            why = f"{HELD_MAX} publishes wait for this node's seq reservation; retry"
            refused = Rejected(errors.UNAVAILABLE, why)
        if refused is not None:
            self._effects.append(Reply(req.client, req.req_id, refused, 0))
        else:
            self._coordinate(now, req)

    def _release_held(self, now: Now) -> None:
        """Take (or refuse) the held requests, in order, as far as the reservation reaches."""
        on_hold = self.on_hold
        while on_hold:
            arrived_ms, req = on_hold[0]
            refused = self._publish_refusal(req)
            timeout_ms = self.publishes.timeout_ms
            if refused is None and self.elapsed_ms - arrived_ms >= timeout_ms:
                why = f"this node could not renew its seq reservation within {timeout_ms} ms"
                refused = Rejected(errors.TIMEOUT, why)
            if refused is None and not self._room(now, req):
                return
            on_hold.popleft()
            if refused is not None:
                self._effects.append(Reply(req.client, req.req_id, refused, 0))
            else:
                self._coordinate(now, req)

    def _room(self, now: Now, req: PublishRequested) -> bool:
        return self.origin.room(req.stream, now.wall_ms, len(req.items))

    def _coordinate(self, now: Now, req: PublishRequested) -> None:
        state = self.streams[req.stream]
        pending = self.publishes.start(self.elapsed_ms, req)
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
        up = self.peers.up_nodes()
        if self.node_id not in replicas:
            return reads.redirect(req.stream, replicas, up)
        if self.state is not NodeState.SERVING:
            fenced = self.state is NodeState.FENCED
            why = "fenced: it cannot hear a quorum of the cluster" if fenced else "shutting down"
            return reads.unavailable(f"this node is {why}", replicas, self.node_id, up)
        if self.storage_error:
            why = f"this node's disk refuses writes ({self.storage_error}); try another node"
            others = tuple(n for n in replicas if n != self.node_id)
            return Rejected(errors.STORAGE, why, others)
        state = self._stream(req.stream)
        me = (self.node_id, self.epoch)
        admitted = {n: me in p.accepts for n, p in self.peers.by_id.items() if n in replicas}
        problem = refusal(state, up, admitted) if state else "this node holds too many streams"
        return reads.unavailable(problem, replicas, self.node_id, up) if problem else None
