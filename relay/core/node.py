"""A relay node's brain: events in, effects out; no clock, sockets or randomness.

How this works: ``handle(now, events)`` dispatches a batch of events (mesh messages, publish
and fetch requests, ticks) to the room that owns each concern, then *flushes*: it broadcasts
the txs this node coordinated, folds what became stable in each stream that changed, sends one
``StreamAck`` per stream that has something to say, announces verified advances, answers the
producers whose txs a quorum verified and wakes parked fetches. Batching by whatever arrived
together is what keeps the wire cost per transaction low under load. This class is the only
builder of effects, and it checks its invariants at the end of every ``handle``.

Cost follows activity, not the number of streams: a stream that is *at rest* (everything
folded and verified, every lane following its origin) leaves the active set, and ticks and
heartbeats visit only active streams. Only rare events (a peer restarts, is suspected, or this
node's epoch ends) touch every stream.
"""

from __future__ import annotations

from collections.abc import Iterable

from relay import errors
from relay.core import reads
from relay.core.events import (
    Acked,
    Broadcast,
    Effect,
    Event,
    FetchRequested,
    MeshReceived,
    Notice,
    PublishRequested,
    PublishResults,
    ReadReply,
    ReadResult,
    Redirect,
    Rejected,
    Reply,
    ShutdownRequested,
    SpanResult,
    Tick,
    Verified,
)
from relay.core.fencing import FenceInput, NodeState, next_state
from relay.core.flake import COUNTER_MAX, NODE_ID_MAX, FlakeClock, make_seq
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
from relay.core.peers import Heard, Peers
from relay.core.publish import Publishes, request_problem
from relay.core.routing import Routing, stream_name_problem
from relay.core.status import NodeStatus, StreamStatus
from relay.core.stream import StreamLimits, StreamReplica
from relay.core.timeline import Timeline
from relay.core.timer import Now, Timeout

CLAIM_HEARTBEATS = 10  # heartbeats that repeat a stream's last originated seq after it changed


class NodeCore:
    def __init__(self, config: CoreConfig, epoch: int, floor: int = 0) -> None:
        params = config.params
        self.config = config
        self.params = params
        self.node_id = config.node_id
        self.epoch = epoch
        self.clock = FlakeClock(config.node_id, floor)
        self.routing = Routing(config.subscriptions)
        self.peers = Peers(
            self.node_id,
            [s.node_id for s in config.subscriptions],
            params.fence_after_ms,
            params.suspect_after_ms,
        )
        self.streams: dict[str, StreamReplica] = {}
        self.active: dict[str, None] = {}  # streams not at rest, in insertion order
        self.dirty: dict[str, None] = {}  # streams to flush this turn
        self.origin_last: dict[str, int] = {}  # stream -> last seq this node originated
        self.claimed_at: dict[str, int] = {}  # stream -> heartbeat count when it changed
        self.outbox: dict[str, list[Tx]] = {}
        self.publishes = Publishes(params.publish_timeout_ms)
        self.parked = reads.ParkedFetches()
        self.heartbeat = Timeout(params.heartbeat_ms)
        self.heartbeats_sent = 0
        self.state = NodeState.FENCED  # until it hears a quorum of the cluster
        self.elapsed_ms = 0
        self._effects: list[Effect] = []
        self._limits = StreamLimits(
            buffer_txs_max=params.buffer_txs_max,
            dedup_window_ms=params.dedup_window_ms,
            dedup_keys_max=params.dedup_keys_max,
            repair_after_ms=params.repair_after_ms,
            cut_grace_ms=params.suspect_after_ms,
            stuck_after_ms=params.stuck_after_ms,
        )

    # --- the one entry point ------------------------------------------------------------

    def handle(self, now: Now, events: Iterable[Event]) -> list[Effect]:
        assert now.elapsed_ms >= self.elapsed_ms, "elapsed time never goes back"
        self.elapsed_ms = now.elapsed_ms
        upkeep = False
        for event in events:
            if isinstance(event, MeshReceived):
                self._on_mesh(now, event.message)
            elif isinstance(event, PublishRequested):
                self._on_publish(now, event)
            elif isinstance(event, FetchRequested):
                self._on_fetch(event, self._read_of(event), park=True)
            elif isinstance(event, ShutdownRequested):
                self._fence_input(FenceInput.SHUTDOWN)
                self.heartbeat.stop()  # announce it at once
                upkeep = True
            elif isinstance(event, Tick):
                upkeep = True
        if upkeep:  # timers, cuts and repairs run on ticks, not on every message
            self._tick(now)
        self._flush(now)
        effects, self._effects = self._effects, []
        self._check(effects)
        return effects

    def _check(self, effects: list[Effect]) -> None:
        """Invariants that hold after every batch."""
        if self.state is not NodeState.SERVING:
            for e in effects:
                assert not (
                    isinstance(e, Reply)
                    and isinstance(e.body, PublishResults)
                    and any(isinstance(r, Acked) for r in e.body.results)
                ), "a node that does not serve acknowledges nothing"
        assert 0 <= self.parked.count <= reads.PARKED_FETCHES_MAX
        assert not self.dirty and not self.outbox

    # --- queries (no state change) ------------------------------------------------------

    def read(
        self, stream: str, after_seq: int, limit: int, strict: bool
    ) -> ReadResult | Redirect | Rejected:
        timeline = self._readable(stream)
        if not isinstance(timeline, Timeline):
            return timeline
        return reads.read(timeline, stream, after_seq, limit, strict)

    def span(
        self, stream: str, after_seq: int, upto_seq: int, max_txs: int, parts: int, strict: bool
    ) -> SpanResult | Redirect | Rejected:
        timeline = self._readable(stream)
        if not isinstance(timeline, Timeline):
            return timeline
        return reads.span(timeline, stream, after_seq, upto_seq, max_txs, parts, strict)

    def _readable(self, stream: str) -> Timeline | Redirect | Rejected:
        """The stream's timeline if this node may serve reads of it; else the answer to give."""
        problem = stream_name_problem(stream)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        replicas = self.routing.replicas_of(stream)
        up = self.peers.up_nodes()
        if self.node_id not in replicas:
            return reads.redirect(stream, replicas, up)
        if self.state is not NodeState.SERVING:
            return reads.unavailable(f"this node is {self.state.value}", replicas, self.node_id, up)
        state = self.streams.get(stream)
        if state is None:
            return Timeline(stream, 1)  # a stream nobody published to yet: empty
        if not state.catchup.synced:
            why = "this node is catching up with the stream"
            return reads.unavailable(why, replicas, self.node_id, up)
        return state.timeline

    def replicates(self, stream: str) -> bool:
        return self.node_id in self.routing.replicas_of(stream)

    def status(self) -> NodeStatus:
        by_id = self.peers.by_id
        return NodeStatus(
            node=self.node_id,
            epoch=self.epoch,
            state=self.state.value,
            peers_up=tuple(sorted(n for n, p in by_id.items() if p.up)),
            peers_down=tuple(sorted(n for n, p in by_id.items() if not p.up)),
            streams=tuple(StreamStatus.of(s) for _, s in sorted(self.streams.items())),
        )

    def state_name(self) -> str:
        return self.state.value

    # --- mesh ---------------------------------------------------------------------------

    def _on_mesh(self, now: Now, message: MeshMessage) -> None:
        if isinstance(message, Replicate):
            self._on_replicate(message)
        elif isinstance(message, StreamAck):
            self._on_ack(message)
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(message)
        elif isinstance(message, RepairRequest):
            self._on_repair_request(message)
        elif isinstance(message, RepairData):
            self._on_repair_data(message)
        elif isinstance(message, SyncRequest):
            self._on_sync_request(message)
        elif isinstance(message, SyncData):
            self._on_sync_data(message)

    def _hear(self, sender: int, epoch: int) -> bool:
        """Note that ``sender`` is alive in ``epoch``; False if the message is stale."""
        heard = self.peers.hear(self.elapsed_ms, sender, epoch)
        if heard is Heard.STALE:
            return False
        if heard is not Heard.AGAIN:  # rare: the peer came back or restarted
            self._effects.append(Notice("peer_up", f"node {sender} is up (epoch {epoch})"))
            for name, state in self.streams.items():
                if sender in state.lanes:  # tell it where we are, even in streams at rest
                    state.follow(sender, epoch)
                    state.needs_ack = True
                    self._touch(name)
        return True

    def _on_heartbeat(self, hb: Heartbeat) -> None:
        if not self._hear(hb.sender, hb.epoch):
            return
        self.peers.by_id[hb.sender].accepts = frozenset(hb.accepts)
        self.clock.observe(hb.floor)
        known = max((e for n, e in hb.epochs if n == self.node_id), default=0)
        if known > self.epoch and not self.origin_last:
            # a previous incarnation of this node had a higher epoch (the wall clock is
            # behind it): peers would take this one for a stale message forever
            self._start_epoch(known + 1, f"a peer knows epoch {known} of this node")
        for name, last in hb.origin_last:  # the claims first, then the promise they cover
            state = self._stream(name)
            if state is not None and hb.sender in state.lanes:
                lane = state.lanes[hb.sender]
                if lane.epoch == hb.epoch and last > lane.claimed_last:
                    lane.claim(last, 0)
                    self._touch(name)
        self.peers.promise(hb.sender, hb.floor)
        for name in self.active:  # a promise only matters where something waits to fold
            if hb.sender in self.streams[name].lanes:
                self.dirty[name] = None
        if hb.leaving:
            self._suspect(hb.sender, "left the cluster")

    def _on_replicate(self, msg: Replicate) -> None:
        if not self._hear(msg.origin, msg.epoch) or not msg.txs:
            return
        state = self._stream(msg.stream)
        if state is None or msg.origin not in state.lanes:
            return
        lane = state.lanes[msg.origin]
        if lane.epoch != msg.epoch:
            return
        last = 0
        for tx in msg.txs:
            if tx.origin == msg.origin and tx.epoch == msg.epoch:
                state.take(tx)
                last = max(last, tx.seq)
        self.clock.observe(last)
        state.lanes[msg.origin].claim(last, msg.floor)
        state.needs_ack = True
        self._touch(msg.stream)

    def _on_ack(self, ack: StreamAck) -> None:
        if not self._hear(ack.sender, ack.epoch):
            return
        state = self._stream(ack.stream)
        if state is None or ack.sender not in state.lanes:
            return
        self.clock.observe(ack.floor)
        state.take_ack(ack, self.elapsed_ms)
        self._touch(ack.stream)

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
        if state is None or data.origin not in state.lanes:
            return
        if state.lanes[data.origin].epoch != data.origin_epoch:
            return
        taken = False
        for tx in data.txs:
            if tx.origin == data.origin and state.take(tx):
                taken = True
                self.clock.observe(tx.seq)
        if taken:
            state.needs_ack = True
            self._touch(data.stream)

    def _on_sync_request(self, req: SyncRequest) -> None:
        state = self.streams.get(req.stream)
        if state is None or req.requester == self.node_id:
            return
        found = state.sync_slice(req.after_seq, self.params.repair_batch_txs_max)
        if found is None:
            return
        base_seq, base_digest, indexes, snapshot = found
        timeline = state.timeline
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
                    state.dedup.keys_upto(base_seq) if snapshot else (),
                )
            )
        )

    def _on_sync_data(self, data: SyncData) -> None:
        if data.requester != self.node_id:
            return
        state = self.streams.get(data.stream)
        if state is None:
            return
        outcome = state.adopt(
            self.elapsed_ms, data.base_seq, data.base_digest, data.txs, data.digests, data.dedup
        )
        if outcome:
            self._effects.append(
                Notice("sync", f"{data.stream}: {outcome} from node {data.sender}")
            )
        if outcome.startswith("adopted"):
            self._touch(data.stream)
            if len(data.txs) >= self.params.repair_batch_txs_max:  # more to come: ask now
                state.asks.sync.stop()
                self._ask_sync(data.stream, state.verified_seq)

    def _ask_sync(self, stream: str, after_seq: int) -> None:
        if self.streams[stream].asks.sync.ready(self.elapsed_ms):
            self._effects.append(Broadcast(SyncRequest(stream, self.node_id, after_seq)))

    # --- publish ------------------------------------------------------------------------

    def _on_publish(self, now: Now, req: PublishRequested) -> None:
        refusal = self._publish_refusal(req)
        if refusal is not None:
            self._effects.append(Reply(req.client, req.req_id, refusal, 0))
            return
        state = self.streams[req.stream]
        pending = self.publishes.start(self.elapsed_ms, req)
        outbox = self.outbox.setdefault(req.stream, [])
        seqs = pending.seqs
        producer_id = req.producer_id
        prev = self.origin_last.get(req.stream, 0)
        next_seq = self.clock.next_seq
        take = state.take
        for msg_id, payload in req.items:
            seq = state.lookup_key(producer_id, msg_id) if producer_id else None
            if seq is None:
                seq = next_seq(now.wall_ms)
                tx = Tx(seq, prev, self.node_id, self.epoch, producer_id, msg_id, payload)
                taken = take(tx)
                assert taken, "a node's own txs always extend its lane"
                prev = seq
                outbox.append(tx)
            seqs.append(seq)
        if prev != self.origin_last.get(req.stream, 0):
            self.origin_last[req.stream] = prev
            self.claimed_at[req.stream] = self.heartbeats_sent
        self.publishes.wait(req.stream, pending)
        self._touch(req.stream)

    def _publish_refusal(self, req: PublishRequested) -> Rejected | Redirect | None:
        problem = stream_name_problem(req.stream) or request_problem(req, self.params)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        replicas = self.routing.replicas_of(req.stream)
        up = self.peers.up_nodes()
        if self.node_id not in replicas:
            return reads.redirect(req.stream, replicas, up)
        if self.state is not NodeState.SERVING:
            why = (
                "fenced: it cannot hear a quorum of the cluster"
                if self.state is NodeState.FENCED
                else "shutting down"
            )
            return reads.unavailable(f"this node is {why}", replicas, self.node_id, up)
        state = self._stream(req.stream)
        if state is None:
            return reads.unavailable("this node holds too many streams", replicas, self.node_id, up)
        live = [r for r in replicas if r in up]
        if len(live) < state.quorum:
            why = (
                f"only {len(live)} of the stream's {len(replicas)} replicas are reachable "
                f"from here; a quorum is {state.quorum}"
            )
            return reads.unavailable(why, replicas, self.node_id, up)
        if state.lanes[self.node_id].state is not LaneState.ACTIVE:
            why = "this node is rejoining the stream"
            return reads.unavailable(why, replicas, self.node_id, up)
        me = (self.node_id, self.epoch)
        by_id = self.peers.by_id
        unaware = [r for r in live if r != self.node_id and me not in by_id[r].accepts]
        if unaware:
            why = f"replicas {unaware} have not admitted this node yet"
            return reads.unavailable(why, replicas, self.node_id, up)
        return None

    # --- fetches ------------------------------------------------------------------------

    def _read_of(self, fetch: FetchRequested) -> ReadResult | Redirect | Rejected:
        return self.read(fetch.stream, fetch.after_seq, fetch.limit, fetch.strict)

    def _on_fetch(
        self,
        fetch: FetchRequested,
        answer: ReadResult | Redirect | Rejected,
        park: bool,
        deadline: Timeout | None = None,
    ) -> None:
        if (
            park
            and isinstance(answer, ReadResult)
            and reads.worth_parking(answer, fetch)
            and self.parked.park(self.elapsed_ms, fetch, deadline)
        ):
            return
        self._effects.append(ReadReply(fetch.client, fetch.req_id, answer))

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
        state.rejoin(self.epoch)
        for origin in state.peers:
            up, epoch = self.peers.states[origin]
            if up:
                state.follow(origin, epoch)
        self.streams[name] = state
        self._touch(name)
        return state

    def _touch(self, name: str) -> None:
        self.dirty[name] = None
        self.active[name] = None

    def _suspect(self, origin: int, why: str) -> None:
        self.peers.down(origin)
        self._effects.append(Notice("peer_down", f"node {origin} {why}; cutting its epoch"))
        epoch = self.peers.by_id[origin].epoch
        for name, state in self.streams.items():
            if origin in state.lanes:
                state.suspect(origin, state.lanes[origin].epoch or epoch)
                self._touch(name)

    # --- upkeep -------------------------------------------------------------------------

    def _tick(self, now: Now) -> None:
        elapsed = self.elapsed_ms
        self._fence_input(self.peers.fence_input(elapsed))
        if self.state is NodeState.SERVING:  # a fenced node is the likely culprit: no cuts
            for origin, silent_ms in self.peers.silent(elapsed):
                self._suspect(origin, f"was silent for {silent_ms} ms")
        states = self.peers.states
        for name in list(self.active):
            state = self.streams[name]
            upkeep = state.on_tick(elapsed, states)
            for origin, epoch, after, upto in upkeep.repairs:
                self._effects.append(
                    Broadcast(RepairRequest(name, self.node_id, origin, epoch, after, upto))
                )
            if upkeep.sync_after is not None:
                self._effects.append(Broadcast(SyncRequest(name, self.node_id, upkeep.sync_after)))
            if upkeep.refolded is not None:
                self._effects.append(
                    Notice(
                        "rebuild",
                        f"{name}: no quorum agreed past seq {state.verified_seq}; "
                        f"refolding {upkeep.refolded} txs",
                    )
                )
            if state.needs_ack:
                self.dirty[name] = None
            elif state.at_rest(states):
                del self.active[name]
        self._end_epoch_if_cut(now)
        if self.heartbeat.ready(elapsed):
            self._heartbeat(now)
        self._effects.extend(self.publishes.expire(elapsed))
        for fetch in self.parked.expired(elapsed):
            self._on_fetch(fetch, self._read_of(fetch), park=False)

    def _fence_input(self, event: FenceInput) -> None:
        before = self.state
        self.state = next_state(before, event)
        if self.state is before:
            return
        if self.state is NodeState.SERVING:
            self.peers.forgive_silence(self.elapsed_ms)
        self._effects.append(
            Notice(
                "state",
                f"node {self.node_id}: {before.value} -> {self.state.value} ({event.value})",
            )
        )
        if self.state is not NodeState.SERVING:  # nothing can be acknowledged or read here
            refused = Rejected(
                errors.UNAVAILABLE,
                f"node {self.node_id} is {self.state.value}",
                tuple(sorted(self.peers.by_id)),
            )
            self._effects.extend(self.publishes.fail_all(self.elapsed_ms, refused))
            for fetch in self.parked.all():
                self._on_fetch(fetch, self._read_of(fetch), park=False)

    def _end_epoch_if_cut(self, now: Now) -> None:
        """If the others cut this node's epoch and every cut settled, start a new epoch.
        A stream whose own lane is not ACTIVE is never at rest, so looking at the active
        streams is enough."""
        mine = [self.streams[name].lanes[self.node_id] for name in self.active]
        if not any(lane.state is LaneState.CUT for lane in mine):
            return
        if any(lane.state is LaneState.CUTTING or lane.queue for lane in mine):
            return  # wait until every cut settled and the txs within it are folded
        self._start_epoch(max(now.wall_ms, self.epoch + 1), "this node was cut")

    def _start_epoch(self, epoch: int, why: str) -> None:
        self.epoch = epoch
        self.origin_last.clear()
        self.claimed_at.clear()
        self.outbox.clear()  # txs of the old epoch not sent yet: they can never commit
        for name, state in self.streams.items():
            state.rejoin(self.epoch)
            self._touch(name)
        self._effects.append(Notice("epoch", f"{why}; rejoining as epoch {self.epoch}"))
        self.heartbeat.stop()  # announce the new epoch at once

    def _heartbeat(self, now: Now) -> None:
        self._promise_now(now)
        accepts = [(self.node_id, self.epoch)]
        for origin, peer in self.peers.by_id.items():
            if peer.up and all(
                state.lanes[origin].state is LaneState.ACTIVE
                and state.lanes[origin].epoch == peer.epoch
                for state in (self.streams[name] for name in self.active)
                if origin in state.lanes
            ):
                accepts.append((origin, peer.epoch))
        recent = self.heartbeats_sent - CLAIM_HEARTBEATS
        for name in [n for n, at in self.claimed_at.items() if at < recent]:
            del self.claimed_at[name]
        self._effects.append(
            Broadcast(
                Heartbeat(
                    sender=self.node_id,
                    epoch=self.epoch,
                    floor=self.clock.floor,
                    origin_last=tuple(sorted((n, self.origin_last[n]) for n in self.claimed_at)),
                    accepts=tuple(accepts),
                    leaving=self.state is NodeState.LEAVING,
                    epochs=tuple((n, p.epoch) for n, p in self.peers.by_id.items() if p.epoch),
                )
            )
        )
        self.heartbeats_sent += 1
        for name in self.active:  # what is not at rest says where it is again
            self.streams[name].needs_ack = True
            self.dirty[name] = None

    def _promise_now(self, now: Now) -> None:
        """Promise to originate nothing stamped before the current millisecond."""
        self.clock.observe(make_seq(now.wall_ms - 1, NODE_ID_MAX, COUNTER_MAX))

    # --- flush --------------------------------------------------------------------------

    def _flush(self, now: Now) -> None:
        self._promise_now(now)
        floor = self.clock.floor
        for name, txs in self.outbox.items():
            if txs:
                self._effects.append(
                    Broadcast(Replicate(name, self.node_id, self.epoch, floor, tuple(txs)))
                )
        self.outbox.clear()
        elapsed = self.elapsed_ms
        floors = self.peers.floors
        serving = self.state is NodeState.SERVING
        for name in self.dirty:
            state = self.streams[name]
            origin_last = self.origin_last.get(name, 0)
            state.lanes[self.node_id].claim(origin_last, floor)
            state.stabilize(floors, elapsed)
            if state.verify(elapsed):
                self._verified(name, state)
            if serving:  # a node that does not serve acknowledges nothing
                self._effects.extend(self.publishes.resolve(elapsed, state))
            if state.needs_ack:
                state.needs_ack = False
                timeline = state.timeline
                self._effects.append(
                    Broadcast(
                        StreamAck(
                            stream=name,
                            sender=self.node_id,
                            epoch=self.epoch,
                            floor=floor,
                            origin_last=origin_last,
                            head_seq=timeline.head_seq,
                            head_digest=timeline.head_digest,
                            verified_seq=timeline.verified_seq,
                            reports=state.reports(),
                        )
                    )
                )
        self.dirty.clear()

    def _verified(self, name: str, state: StreamReplica) -> None:
        self._effects.append(Verified(name, state.verified_seq))
        for fetch, deadline in self.parked.wake(name):
            self._on_fetch(fetch, self._read_of(fetch), park=True, deadline=deadline)
        if state.timeline.over_capacity():
            state.timeline.trim(self.publishes.oldest_awaited(name))
