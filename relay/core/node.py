"""A relay node's brain: events in, effects out; no clock, sockets or randomness.

How this works: ``handle(now_ms, events)`` applies a batch of events (mesh messages, publish
requests, ticks) and then *flushes*: it broadcasts the txs this node coordinated, folds what
became stable in each stream, sends one ``StreamAck`` per stream that changed (its promise and
its vote), and answers the producers whose txs a quorum verified. Batching by whatever
arrived together is what keeps the wire cost per transaction low under load.

Peers are tracked by heartbeats. A peer silent for ``suspect_after_ms`` (or one that says it
is leaving, or that restarted with a new epoch) is suspected in every stream it replicates:
its epoch is frozen and cut where the live replicas agree (see ``relay.core.lane``). A node
that learns it was cut ends its epoch, starts a new one and coordinates again once every live
replica has admitted it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise

from relay import errors
from relay.core.events import (
    Acked,
    Broadcast,
    Effect,
    Event,
    MeshReceived,
    Notice,
    PublishRequested,
    PublishResults,
    ReadResult,
    Redirect,
    Rejected,
    Reply,
    ShutdownRequested,
    SpanResult,
    Tick,
    Verified,
)
from relay.core.fencing import FenceInput, NodeState, next_state, quorum_input
from relay.core.flake import COUNTER_MAX, NODE_ID_MAX, SEQ_MAX, FlakeClock, make_seq
from relay.core.lane import LaneState
from relay.core.messages import (
    Heartbeat,
    MeshMessage,
    RepairData,
    RepairRequest,
    Replicate,
    StreamAck,
    SyncData,
    SyncRequest,
    Tx,
)
from relay.core.params import CoreConfig
from relay.core.routing import Routing, stream_name_problem
from relay.core.stream import StreamLimits, StreamReplica
from relay.core.timeline import Timeline


@dataclass(slots=True)
class PeerView:
    epoch: int = 0
    last_heard_ms: int = 0
    up: bool = False
    floor: int = 0
    accepts: frozenset[tuple[int, int]] = frozenset()


@dataclass(slots=True, eq=False)
class PendingPublish:
    client: bytes
    req_id: int
    started_ms: int
    deadline_ms: int
    seqs: list[int]  # per item: the seq it waits for
    results: list[Acked | Rejected | None]
    done: bool = False


@dataclass(slots=True)
class StreamWaiters:
    """Publish requests waiting for verification: a heap of (highest seq, order, pending)."""

    heap: list[tuple[int, int, PendingPublish]] = field(default_factory=list)


class NodeCore:
    def __init__(self, config: CoreConfig, epoch: int, floor: int = 0) -> None:
        self.config = config
        self.params = config.params
        self.node_id = config.node_id
        self.epoch = epoch
        self.clock = FlakeClock(config.node_id, floor)
        self.routing = Routing(config.subscriptions)
        self.peers: dict[int, PeerView] = {
            s.node_id: PeerView() for s in config.subscriptions if s.node_id != self.node_id
        }
        self.streams: dict[str, StreamReplica] = {}
        self.origin_last: dict[str, int] = {}
        self.outbox: dict[str, list[Tx]] = {}
        self.waiters: dict[str, StreamWaiters] = {}
        self.pending: deque[PendingPublish] = deque()
        self.dirty: dict[str, None] = {}  # insertion-ordered: replays stay deterministic
        self.started_ms: int | None = None
        self.next_heartbeat_ms = 0
        self.repair_asked_ms: dict[tuple[str, int], int] = {}  # (stream, origin) -> last ask
        self.sync_asked_ms: dict[str, int] = {}  # stream -> last sync request
        self.state = NodeState.FENCED  # until it hears a quorum of the cluster
        self.serving_since_ms = 0  # when it last began serving: silence before it is not counted
        self._order = 0
        self._effects: list[Effect] = []
        self._limits = StreamLimits(
            buffer_txs_max=self.params.buffer_txs_max,
            dedup_window_ms=self.params.dedup_window_ms,
            dedup_keys_max=self.params.dedup_keys_max,
        )

    # --- the one entry point ------------------------------------------------------------

    def handle(self, now_ms: int, events: Iterable[Event]) -> list[Effect]:
        if self.started_ms is None:
            self.started_ms = now_ms
        upkeep = False
        for event in events:
            if isinstance(event, MeshReceived):
                self._on_mesh(now_ms, event.message)
            elif isinstance(event, PublishRequested):
                self._on_publish(now_ms, event)
            elif isinstance(event, ShutdownRequested):
                self._fence_input(now_ms, FenceInput.SHUTDOWN)
                self.next_heartbeat_ms = now_ms
                upkeep = True
            elif isinstance(event, Tick):
                upkeep = True
        if upkeep:  # timers, cuts and repairs run on ticks, not on every message
            self._maintain(now_ms)
        self._flush(now_ms)
        effects, self._effects = self._effects, []
        return effects

    # --- queries (no state change) ------------------------------------------------------

    def read(
        self, stream: str, after_seq: int, limit: int, strict: bool
    ) -> ReadResult | Redirect | Rejected:
        """Up to ``limit`` verified txs after ``after_seq``.

        ``strict``: the caller already holds ``after_seq``, so a trimmed range is data loss.
        """
        timeline = self._readable(stream)
        if not isinstance(timeline, Timeline):
            return timeline
        start, indexes = timeline.read_verified(after_seq, limit)
        return ReadResult(
            stream=stream,
            txs=tuple(timeline.txs[i] for i in indexes),
            digests=tuple(timeline.digests[i] for i in indexes),
            prev_digest=timeline.digest_before(start),
            verified_seq=timeline.verified_seq,
            earliest_seq=timeline.earliest_seq(),
            lost=strict and after_seq < timeline.trimmed_seq,
        )

    def span(
        self, stream: str, after_seq: int, upto_seq: int, max_txs: int, parts: int, strict: bool
    ) -> SpanResult | Redirect | Rejected:
        """The verified txs in (``after_seq``, ``upto_seq``], at most ``max_txs`` of them, cut
        into at most ``parts`` parts of near-equal size. 0 means no bound for ``upto_seq`` and
        ``max_txs``.
        """
        timeline = self._readable(stream)
        if not isinstance(timeline, Timeline):
            return timeline
        upto = timeline.verified_seq if upto_seq <= 0 else min(upto_seq, timeline.verified_seq)
        start = bisect_right(timeline.seqs, after_seq)
        end = max(start, bisect_right(timeline.seqs, upto))
        if max_txs > 0:
            end = min(end, start + max_txs)
        total = end - start
        count = max(1, min(parts, total))
        cuts = [start + (total * k) // count for k in range(count + 1)]
        bounds = tuple(
            (timeline.seqs[b - 1], timeline.digests[b - 1], b - a)
            for a, b in pairwise(cuts)
            if b > a
        )
        return SpanResult(
            stream=stream,
            bounds=bounds,
            verified_seq=timeline.verified_seq,
            earliest_seq=timeline.earliest_seq(),
            lost=strict and after_seq < timeline.trimmed_seq,
        )

    def _readable(self, stream: str) -> Timeline | Redirect | Rejected:
        """The stream's timeline if this node may serve reads of it; else the answer to give."""
        problem = stream_name_problem(stream)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        replicas = self.routing.replicas_of(stream)
        if self.node_id not in replicas:
            return self._redirect(stream, replicas)
        if self.state is not NodeState.SERVING:
            return self._unavailable(stream, f"this node is {self.state.value}")
        state = self.streams.get(stream)
        if state is None:
            return Timeline(stream, 1)  # a stream nobody published to yet: empty
        if not state.synced:
            return self._unavailable(stream, "this node is catching up with the stream")
        return state.timeline

    def replicates(self, stream: str) -> bool:
        return self.node_id in self.routing.replicas_of(stream)

    def up_nodes(self) -> set[int]:
        return {self.node_id} | {n for n, p in self.peers.items() if p.up}

    def status(self) -> dict[str, object]:
        streams = {}
        for name, state in sorted(self.streams.items()):
            timeline = state.timeline
            held = sum(len(lane.queue) for lane in state.lanes.values())
            verified_digest = timeline.digest_at(timeline.verified_seq)
            streams[name] = {
                "replicas": list(state.replicas),
                "head_seq": timeline.head_seq,
                "verified_seq": timeline.verified_seq,
                "digest": verified_digest.hex() if verified_digest else "",
                "lag": held
                + len(timeline.seqs)
                - bisect_right(timeline.seqs, timeline.verified_seq),
                "mismatches": state.mismatches,
                "late_txs": state.late_txs,
                "lanes": {str(o): lane.state.value for o, lane in sorted(state.lanes.items())},
            }
        return {
            "node": self.node_id,
            "epoch": self.epoch,
            "state": self.state_name(),
            "peers_up": sorted(n for n, p in self.peers.items() if p.up),
            "peers_down": sorted(n for n, p in self.peers.items() if not p.up),
            "streams": streams,
        }

    def state_name(self) -> str:
        return self.state.value

    # --- mesh ---------------------------------------------------------------------------

    def _on_mesh(self, now_ms: int, message: MeshMessage) -> None:
        if isinstance(message, Replicate):
            self._on_replicate(now_ms, message)
        elif isinstance(message, StreamAck):
            self._on_ack(now_ms, message)
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(now_ms, message)
        elif isinstance(message, RepairRequest):
            self._on_repair_request(message)
        elif isinstance(message, RepairData):
            self._on_repair_data(message)
        elif isinstance(message, SyncRequest):
            self._on_sync_request(message)
        elif isinstance(message, SyncData):
            self._on_sync_data(now_ms, message)

    def _hear(self, now_ms: int, sender: int, epoch: int) -> PeerView | None:
        peer = self.peers.get(sender)
        if peer is None or epoch < peer.epoch:
            return None
        if epoch > peer.epoch:
            peer.epoch = epoch
            peer.floor = 0
            peer.accepts = frozenset()
        if not peer.up:
            self._effects.append(Notice("peer_up", f"node {sender} is up (epoch {epoch})"))
        peer.up = True
        peer.last_heard_ms = now_ms
        self._sync_lanes_of(sender)
        return peer

    def _on_heartbeat(self, now_ms: int, hb: Heartbeat) -> None:
        peer = self._hear(now_ms, hb.sender, hb.epoch)
        if peer is None:
            return
        peer.floor = max(peer.floor, hb.floor)
        peer.accepts = frozenset(hb.accepts)
        self.clock.observe(hb.floor)
        claims = dict(hb.origin_last)
        for name in claims:
            self._stream(name)
        for name, state in self.streams.items():
            lane = state.lanes.get(hb.sender)
            if lane is not None and lane.epoch == hb.epoch:
                lane.claim(claims.get(name, 0), hb.floor)
                self.dirty[name] = None
        if hb.leaving:
            self._suspect(hb.sender, "left the cluster")

    def _on_replicate(self, now_ms: int, msg: Replicate) -> None:
        if self._hear(now_ms, msg.origin, msg.epoch) is None or not msg.txs:
            return
        state = self._stream(msg.stream)
        if state is None:
            return
        lane = state.lanes.get(msg.origin)
        if lane is None or lane.epoch != msg.epoch:
            return
        last = 0
        for tx in msg.txs:
            if tx.origin == msg.origin and tx.epoch == msg.epoch:
                state.take(tx)
                last = tx.seq
        self.clock.observe(msg.txs[-1].seq)
        lane.claim(last, msg.floor)
        state.needs_ack = True
        self.dirty[msg.stream] = None

    def _on_ack(self, now_ms: int, ack: StreamAck) -> None:
        if self._hear(now_ms, ack.sender, ack.epoch) is None:
            return
        state = self._stream(ack.stream)
        if state is None or ack.sender not in state.lanes:
            return
        self.clock.observe(ack.floor)
        lane = state.lanes[ack.sender]
        if lane.epoch == ack.epoch:
            lane.claim(ack.origin_last, ack.floor)
        for report in ack.reports:
            state.take_report(ack.sender, report)
        state.peer_verified[ack.sender] = ack.verified_seq
        if state.take_vote(ack.sender, ack.head_seq, ack.head_digest):
            self._verified(now_ms, ack.stream, state)
        self.dirty[ack.stream] = None

    def _on_repair_request(self, req: RepairRequest) -> None:
        state = self.streams.get(req.stream)
        if state is None or req.requester == self.node_id:
            return
        txs = state.txs_of(
            req.origin,
            req.origin_epoch,
            req.after_seq,
            req.upto_seq,
            self.params.repair_batch_txs_max,
        )
        if txs:
            self._effects.append(
                Broadcast(
                    RepairData(req.stream, self.node_id, req.origin, req.origin_epoch, tuple(txs))
                )
            )

    def _on_repair_data(self, data: RepairData) -> None:
        state = self.streams.get(data.stream)
        if state is None:
            return
        lane = state.lanes.get(data.origin)
        if lane is None or lane.epoch != data.origin_epoch:
            return
        taken = 0
        for tx in data.txs:
            if tx.origin == data.origin and state.take(tx):
                taken += 1
                self.clock.observe(tx.seq)
        if taken:
            state.needs_ack = True
            self.dirty[data.stream] = None

    # --- publish ------------------------------------------------------------------------

    def _on_publish(self, now_ms: int, req: PublishRequested) -> None:
        refusal = self._publish_refusal(req)
        if refusal is not None:
            self._effects.append(Reply(req.client, req.req_id, refusal, 0))
            return
        state = self.streams[req.stream]
        pending = PendingPublish(
            client=req.client,
            req_id=req.req_id,
            started_ms=now_ms,
            deadline_ms=now_ms + self.params.publish_timeout_ms,
            seqs=[],
            results=[None] * len(req.items),
        )
        self.pending.append(pending)
        outbox = self.outbox.setdefault(req.stream, [])
        seqs = pending.seqs
        producer_id = req.producer_id
        prev = self.origin_last.get(req.stream, 0)
        next_seq = self.clock.next_seq
        take = state.take
        for msg_id, payload in req.items:
            seq = state.lookup_key(producer_id, msg_id) if producer_id else None
            if seq is None:
                seq = next_seq(now_ms)
                tx = Tx(seq, prev, self.node_id, self.epoch, producer_id, msg_id, payload)
                taken = take(tx)
                assert taken, "a node's own txs always extend its lane"
                prev = seq
                outbox.append(tx)
            seqs.append(seq)
        self.origin_last[req.stream] = prev
        self._wait(req.stream, pending)
        self.dirty[req.stream] = None

    def _wait(self, stream: str, pending: PendingPublish) -> None:
        self._order += 1
        waiters = self.waiters.setdefault(stream, StreamWaiters())
        heapq.heappush(waiters.heap, (max(pending.seqs), self._order, pending))

    def _publish_refusal(self, req: PublishRequested) -> Rejected | Redirect | None:
        problem = stream_name_problem(req.stream)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        if not req.items:
            return Rejected(errors.BAD_REQUEST, "a publish needs at least one message")
        if len(req.items) > self.params.publish_items_max:
            return Rejected(
                errors.BAD_REQUEST,
                f"at most {self.params.publish_items_max} messages per publish request",
            )
        largest = max(len(p) for _, p in req.items)
        if largest > self.params.payload_bytes_max:
            return Rejected(
                errors.BAD_REQUEST,
                f"a payload of {largest} bytes exceeds payload_bytes_max "
                f"({self.params.payload_bytes_max})",
            )
        replicas = self.routing.replicas_of(req.stream)
        if self.node_id not in replicas:
            return self._redirect(req.stream, replicas)
        if self.state is not NodeState.SERVING:
            why = (
                "fenced: it cannot hear a quorum of the cluster"
                if (self.state is NodeState.FENCED)
                else "shutting down"
            )
            return self._unavailable(req.stream, f"this node is {why}")
        state = self._stream(req.stream)
        if state is None:
            return self._unavailable(req.stream, "this node holds too many streams")
        up = [r for r in replicas if r == self.node_id or self.peers[r].up]
        if len(up) < state.quorum:
            return self._unavailable(
                req.stream,
                f"only {len(up)} of the stream's {len(replicas)} replicas are reachable "
                f"from here; a quorum is {state.quorum}",
            )
        if state.lanes[self.node_id].state is not LaneState.ACTIVE:
            return self._unavailable(req.stream, "this node is rejoining the stream")
        me = (self.node_id, self.epoch)
        unaware = [r for r in up if r != self.node_id and me not in self.peers[r].accepts]
        if unaware:
            return self._unavailable(
                req.stream, f"replicas {unaware} have not admitted this node yet"
            )
        return None

    def _redirect(self, stream: str, replicas: tuple[int, ...]) -> Redirect | Rejected:
        if not replicas:
            return Rejected(
                errors.NO_REPLICAS,
                f"no node's streams patterns match {stream!r}; check the stream name or "
                "the cluster config",
            )
        return Redirect(stream, self._by_liveness(replicas))

    def _unavailable(self, stream: str, why: str) -> Rejected:
        others = tuple(
            r for r in self._by_liveness(self.routing.replicas_of(stream)) if r != self.node_id
        )
        return Rejected(errors.UNAVAILABLE, why, others)

    def _by_liveness(self, nodes: Iterable[int]) -> tuple[int, ...]:
        up = self.up_nodes()
        return tuple(sorted(nodes, key=lambda n: (n not in up, n)))

    # --- streams ------------------------------------------------------------------------

    def _stream(self, name: str) -> StreamReplica | None:
        state = self.streams.get(name)
        if state is not None:
            return state
        if stream_name_problem(name) or len(self.streams) >= self.params.streams_max:
            return None
        replicas = self.routing.replicas_of(name)
        if self.node_id not in replicas:
            return None
        state = StreamReplica(
            name, self.node_id, replicas, self.config.quorum_of(len(replicas)), self._limits
        )
        me = state.lanes[self.node_id]
        me.restart(self.epoch, LaneState.ACTIVE)
        for origin in replicas:
            if origin != self.node_id:
                self._sync_lane(state, origin)
        self.streams[name] = state
        return state

    def _sync_lanes_of(self, origin: int) -> None:
        for state in self.streams.values():
            if origin in state.lanes:
                self._sync_lane(state, origin)

    def _sync_lane(self, state: StreamReplica, origin: int) -> None:
        """Make ``origin``'s lane follow the epoch its heartbeats announce."""
        peer = self.peers[origin]
        lane = state.lanes[origin]
        if peer.epoch <= lane.epoch or peer.epoch == 0:
            return
        if lane.epoch == 0 and lane.state is LaneState.WAITING:
            lane.epoch = peer.epoch
            if peer.up:
                lane.state = LaneState.ACTIVE
        elif lane.state is LaneState.CUT and not lane.queue:  # its last txs folded first
            lane.restart(peer.epoch, LaneState.WAITING)
        elif lane.state in (LaneState.ACTIVE, LaneState.WAITING):
            state.suspect(origin, lane.epoch)

    def _suspect(self, origin: int, why: str) -> None:
        peer = self.peers[origin]
        peer.up = False
        self._effects.append(Notice("peer_down", f"node {origin} {why}; cutting its epoch"))
        for name, state in self.streams.items():
            if origin in state.lanes:
                state.suspect(origin, state.lanes[origin].epoch or peer.epoch)
                self.dirty[name] = None

    # --- upkeep -------------------------------------------------------------------------

    def _maintain(self, now_ms: int) -> None:
        heard = 1 + sum(
            1 for p in self.peers.values() if now_ms - p.last_heard_ms <= self.params.fence_after_ms
        )
        self._fence_input(now_ms, quorum_input(heard, len(self.peers) + 1))
        for origin, peer in self.peers.items():
            # Only a node that hears a quorum suspects: a fenced one is the likely culprit. Nor
            # does time it spent fenced count as a peer's silence: a node whose clock jumped, or
            # that was paused or cut off, first hears some peers again, then the others; it
            # gives them ``suspect_after_ms`` from the moment it serves again.
            silent_ms = now_ms - max(peer.last_heard_ms, self.serving_since_ms)
            suspect = peer.up and silent_ms > self.params.suspect_after_ms
            if suspect and self.state is NodeState.SERVING:
                self._suspect(origin, f"was silent for {silent_ms} ms")
        up = self.up_nodes()
        for name, state in self.streams.items():
            grace = self.params.suspect_after_ms
            for origin, epoch, after, upto in state.settle_cuts(now_ms, up, grace):
                self._ask_repair(now_ms, name, origin, epoch, after, upto)
            if state.sync_wanted(now_ms, up, self.params.stuck_after_ms):
                self._ask_sync(now_ms, name, state)
            if state.rebuild_wanted(now_ms, up, self.params.stuck_after_ms):
                count = state.rebuild(now_ms)
                self._effects.append(
                    Notice(
                        "rebuild",
                        f"{name}: no quorum agreed past seq "
                        f"{state.verified_seq}; refolding {count} txs",
                    )
                )
            for lane in state.lanes.values():
                if lane.state is LaneState.CUT and lane.origin != self.node_id:
                    self._sync_lane(state, lane.origin)
                if lane.state is LaneState.ACTIVE and lane.origin != self.node_id and state.synced:
                    missing = lane.missing_range()
                    if missing is None:
                        lane.gap_since_ms = None
                    elif lane.gap_since_ms is None:
                        lane.gap_since_ms = now_ms
                    elif now_ms - lane.gap_since_ms >= self.params.repair_after_ms:
                        self._ask_repair(now_ms, name, lane.origin, lane.epoch, *missing)
            if state.needs_ack:
                self.dirty[name] = None
        self._end_epoch_if_cut(now_ms)
        if now_ms >= self.next_heartbeat_ms:
            self.next_heartbeat_ms = now_ms + self.params.heartbeat_ms
            self._heartbeat(now_ms)
        self._expire(now_ms)

    def _fence_input(self, now_ms: int, event: FenceInput) -> None:
        before = self.state
        self.state = next_state(before, event)
        if self.state is before:
            return
        if self.state is NodeState.SERVING:
            self.serving_since_ms = now_ms
        self._effects.append(
            Notice(
                "state",
                f"node {self.node_id}: {before.value} -> {self.state.value} ({event.value})",
            )
        )
        if self.state is not NodeState.SERVING:
            for pending in self.pending:  # they cannot be acknowledged from here any more
                if not pending.done:
                    for i, result in enumerate(pending.results):
                        if result is None:
                            pending.results[i] = Rejected(
                                errors.UNAVAILABLE, f"node {self.node_id} is {self.state.value}"
                            )
                    self._finish(now_ms, pending)

    def _ask_sync(self, now_ms: int, stream: str, state: StreamReplica) -> None:
        if now_ms - self.sync_asked_ms.get(stream, -(10**12)) < self.params.repair_after_ms:
            return
        self.sync_asked_ms[stream] = now_ms
        after = state.verified_seq if state.synced else 0
        self._effects.append(Broadcast(SyncRequest(stream, self.node_id, after)))

    def _on_sync_request(self, req: SyncRequest) -> None:
        state = self.streams.get(req.stream)
        if state is None or req.requester == self.node_id:
            return
        found = state.sync_slice(req.after_seq, self.params.repair_batch_txs_max)
        if found is None:
            return
        base_seq, base_digest, indexes, snapshot = found
        timeline = state.timeline
        dedup = (
            tuple((pid, mid, seq) for (seq, (pid, mid)) in state.dedup_order if seq <= base_seq)
            if snapshot
            else ()
        )
        self._effects.append(
            Broadcast(
                SyncData(
                    req.stream,
                    self.node_id,
                    req.requester,
                    base_seq,
                    base_digest,
                    tuple(timeline.txs[i] for i in indexes),
                    tuple(timeline.digests[i] for i in indexes),
                    dedup,
                )
            )
        )

    def _on_sync_data(self, now_ms: int, data: SyncData) -> None:
        if data.requester != self.node_id:
            return
        state = self.streams.get(data.stream)
        if state is None:
            return
        outcome = state.adopt(
            now_ms, data.base_seq, data.base_digest, data.txs, data.digests, data.dedup
        )
        if outcome:
            self._effects.append(
                Notice("sync", f"{data.stream}: {outcome} from node {data.sender}")
            )
        if outcome.startswith("adopted"):
            self._verified(now_ms, data.stream, state)
            self.dirty[data.stream] = None
            if len(data.txs) >= self.params.repair_batch_txs_max:
                self.sync_asked_ms.pop(data.stream, None)
                self._ask_sync(now_ms, data.stream, state)

    def _ask_repair(
        self, now_ms: int, stream: str, origin: int, epoch: int, after: int, upto: int
    ) -> None:
        key = (stream, origin)
        if now_ms - self.repair_asked_ms.get(key, -(10**12)) < self.params.repair_after_ms:
            return
        self.repair_asked_ms[key] = now_ms
        self._effects.append(
            Broadcast(RepairRequest(stream, self.node_id, origin, epoch, after, upto))
        )

    def _end_epoch_if_cut(self, now_ms: int) -> None:
        """If the others cut this node's epoch and every cut settled, start a new epoch."""
        mine = [state.lanes[self.node_id] for state in self.streams.values()]
        if not any(lane.state is LaneState.CUT for lane in mine):
            return
        if any(lane.state is LaneState.CUTTING or lane.queue for lane in mine):
            return  # wait until every cut settled and the txs within it are folded
        self.epoch = max(now_ms, self.epoch + 1)
        self.origin_last.clear()
        self.outbox.clear()  # txs of the cut epoch not sent yet: they can never commit
        for state in self.streams.values():
            state.lanes[self.node_id].restart(self.epoch, LaneState.ACTIVE)
            state.needs_ack = True
        self._effects.append(Notice("epoch", f"this node was cut; rejoining as epoch {self.epoch}"))
        self.next_heartbeat_ms = now_ms

    def _heartbeat(self, now_ms: int) -> None:
        self._promise_now(now_ms)
        accepts = [(self.node_id, self.epoch)]
        for origin, peer in self.peers.items():
            if peer.up and all(
                state.lanes[origin].state is LaneState.ACTIVE
                and state.lanes[origin].epoch == peer.epoch
                for state in self.streams.values()
                if origin in state.lanes
            ):
                accepts.append((origin, peer.epoch))
        self._effects.append(
            Broadcast(
                Heartbeat(
                    sender=self.node_id,
                    epoch=self.epoch,
                    floor=self.clock.floor,
                    origin_last=tuple(sorted(self.origin_last.items())),
                    accepts=tuple(accepts),
                    leaving=self.state is NodeState.LEAVING,
                )
            )
        )
        for name, state in self.streams.items():
            state.needs_ack = True
            self.dirty[name] = None

    def _promise_now(self, now_ms: int) -> None:
        """Promise to originate nothing stamped before the current millisecond."""
        self.clock.observe(make_seq(now_ms - 1, NODE_ID_MAX, COUNTER_MAX))

    def _expire(self, now_ms: int) -> None:
        while self.pending and (self.pending[0].done or self.pending[0].deadline_ms <= now_ms):
            pending = self.pending.popleft()
            if pending.done:
                continue
            for i, result in enumerate(pending.results):
                if result is None:
                    pending.results[i] = Rejected(
                        errors.TIMEOUT,
                        f"no quorum verified the transaction within "
                        f"{self.params.publish_timeout_ms} ms; retry with the same message id",
                    )
            self._finish(now_ms, pending)

    # --- flush --------------------------------------------------------------------------

    def _flush(self, now_ms: int) -> None:
        self._promise_now(now_ms)
        for name, txs in self.outbox.items():
            if txs:
                self._effects.append(
                    Broadcast(
                        Replicate(name, self.node_id, self.epoch, self.clock.floor, tuple(txs))
                    )
                )
        self.outbox.clear()
        for name in self.dirty:
            state = self.streams.get(name)
            if state is None:
                continue
            state.lanes[self.node_id].claim(self.origin_last.get(name, 0), self.clock.floor)
            state.stabilize(now_ms)
            if state.recompute_verified():
                self._verified(now_ms, name, state)
            else:
                self._resolve(now_ms, name, state)
            if state.needs_ack:
                state.needs_ack = False
                timeline = state.timeline
                self._effects.append(
                    Broadcast(
                        StreamAck(
                            stream=name,
                            sender=self.node_id,
                            epoch=self.epoch,
                            floor=self.clock.floor,
                            origin_last=self.origin_last.get(name, 0),
                            head_seq=timeline.head_seq,
                            head_digest=timeline.head_digest,
                            verified_seq=timeline.verified_seq,
                            reports=state.reports(),
                        )
                    )
                )
        self.dirty.clear()

    def _verified(self, now_ms: int, name: str, state: StreamReplica) -> None:
        self._effects.append(Verified(name, state.verified_seq))
        self._resolve(now_ms, name, state)
        if state.timeline.over_capacity():
            state.timeline.trim(self._oldest_awaited(name))

    def _oldest_awaited(self, name: str) -> int:
        """The lowest seq a waiting publish request of this stream still has to answer with."""
        waiters = self.waiters.get(name)
        pending = [p for _, _, p in waiters.heap if not p.done] if waiters else []
        return min((min(p.seqs) for p in pending), default=SEQ_MAX)

    def _resolve(self, now_ms: int, name: str, state: StreamReplica) -> None:
        """Answer the publish requests whose seqs are all verified now."""
        if self.state is not NodeState.SERVING:
            return  # a fenced node acknowledges nothing
        verified = state.verified_seq
        waiters = self.waiters.get(name)
        if waiters is None:
            return
        heap = waiters.heap
        timeline = state.timeline
        while heap and heap[0][0] <= verified:
            pending = heapq.heappop(heap)[2]
            if pending.done:
                continue
            results = pending.results
            waiting = False
            seqs = timeline.seqs
            j = bisect_left(seqs, min(pending.seqs))
            for i, seq in enumerate(pending.seqs):
                if results[i] is not None:
                    continue
                if j < len(seqs) and seqs[j] > seq:  # not ascending (a retried item): search
                    j = bisect_left(seqs, seq)
                while j < len(seqs) and seqs[j] < seq:  # ascending, as usual: walk
                    j += 1
                if j < len(seqs) and seqs[j] == seq:
                    results[i] = Acked(seq, timeline.digests[j])
                elif seq in state.skipped:  # a duplicate: answer with the original's seq
                    pending.seqs[i] = state.skipped[seq][1]
                    waiting = True
                else:
                    results[i] = Rejected(
                        errors.NOT_COMMITTED,
                        "the transaction's coordinator was cut before a quorum held it; retry",
                    )
            if waiting:
                self._wait(name, pending)
            else:
                self._finish(now_ms, pending)

    def _finish(self, now_ms: int, pending: PendingPublish) -> None:
        pending.done = True
        results = tuple(r for r in pending.results if r is not None)
        self._effects.append(
            Reply(
                pending.client, pending.req_id, PublishResults(results), now_ms - pending.started_ms
            )
        )
