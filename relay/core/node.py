"""A relay node's brain: events in, effects out; no clock, sockets or randomness.

How this works: ``handle(now, events)`` dispatches a batch of events (mesh messages, publish
and fetch requests, ticks) to the room that owns each concern, then *flushes*: it broadcasts
the txs this node coordinated, folds what became stable in each stream that changed, sends one
``StreamAck`` per stream that has something to say, announces verified advances, answers the
producers whose txs a quorum verified and wakes parked fetches. Batching by whatever arrived
together is what keeps the wire cost per transaction low under load. This class is the only
builder of effects, and it checks its invariants at the end of every ``handle``.

Cost follows activity, not the number of streams: a stream *at rest* leaves the active set,
and ticks and heartbeats visit only active streams (docs/design.md, "Cost follows activity").
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
    LogRead,
    LogSpan,
    MeshReceived,
    Notice,
    Persisted,
    PersistFailed,
    PublishRequested,
    PublishResults,
    ReadReply,
    ReadResult,
    Redirect,
    Rejected,
    Reply,
    Reserve,
    Reserved,
    Restored,
    Retained,
    ShutdownRequested,
    SpanResult,
    Tick,
    Verified,
)
from relay.core.fencing import FenceInput, NodeState, next_state
from relay.core.flake import SEQ_MAX
from relay.core.intake import MeshIntake
from relay.core.log_events import LogEvents
from relay.core.messages import FETCH_BYTES_MAX, Heartbeat, RepairRequest, StreamAck, SyncRequest
from relay.core.origin import Origin
from relay.core.params import CoreConfig
from relay.core.peers import Peers
from relay.core.publish import Publishes
from relay.core.publish_intake import HELD_BYTES_MAX, HELD_MAX, Held, PublishIntake
from relay.core.routing import stream_name_problem
from relay.core.status import NodeStatus
from relay.core.stream import StreamLimits, StreamReplica
from relay.core.streams import StreamSet
from relay.core.timeline import Timeline
from relay.core.timer import Now, Timeout

Answer = ReadResult | LogRead | Redirect | Rejected


class NodeCore(MeshIntake, PublishIntake, LogEvents):
    def __init__(
        self, config: CoreConfig, epoch: int, floor: int = 0, reserved: int = SEQ_MAX
    ) -> None:
        params = config.params
        self.config = config
        self.params = params
        self.node_id = config.node_id
        self.origin = Origin(config.node_id, epoch, floor, reserved, params.promise_lead_ms)
        ids = [s.node_id for s in config.subscriptions]
        self.peers = Peers(self.node_id, ids, params.fence_after_ms, params.suspect_after_ms)
        limits = StreamLimits(
            buffer_txs_max=params.buffer_txs_max,
            buffer_bytes_max=params.buffer_bytes_max,
            dedup_window_ms=params.dedup_window_ms,
            dedup_keys_max=params.dedup_keys_max,
            repair_after_ms=params.repair_after_ms,
            cut_grace_ms=params.suspect_after_ms,
            stuck_after_ms=params.stuck_after_ms,
            votes_wait=params.votes_wait_for_disk,
        )
        self.stream_set = StreamSet(config, limits)
        self.streams = self.stream_set.by_name  # every stream this node replicates
        self.active = self.stream_set.active  # the streams not at rest
        self.routing = self.stream_set.routing
        self.publishes = Publishes(params.publish_timeout_ms)
        self.on_hold: dict[str, Held] = {}
        self.held_count = self.held_bytes = 0
        self.parked = reads.ParkedFetches()
        self.heartbeat = Timeout(params.heartbeat_ms)
        self.storage_error = ""  # what the disk refused last, until a write succeeds
        self.state = NodeState.FENCED  # until it hears a quorum of the cluster
        self.elapsed_ms = self.wall_ms = self.wall_at_zero = 0
        self._effects: list[Effect] = []

    # --- the one entry point ------------------------------------------------------------

    def handle(self, now: Now, events: Iterable[Event]) -> list[Effect]:
        assert now.elapsed_ms >= self.elapsed_ms, "elapsed time never goes back"
        self.elapsed_ms = now.elapsed_ms
        if not self.wall_at_zero:
            self.wall_at_zero = now.wall_ms - now.elapsed_ms
        # what peers' claims are judged against: a step back of the wall clock since this
        # node started must not make honest peers look far ahead (see claims.py)
        self.wall_ms = max(now.wall_ms, now.elapsed_ms + self.wall_at_zero)
        upkeep = False
        for event in events:
            if isinstance(event, MeshReceived):
                self._on_mesh(event.message)
            elif isinstance(event, PublishRequested):
                self._on_publish(now, event)
            elif isinstance(event, FetchRequested):
                self._answer(event, self._read_of(event), park=True)
            elif isinstance(event, Persisted):
                self._on_persisted(event)
            elif isinstance(event, PersistFailed):
                self._on_persist_failed(event)
            elif isinstance(event, Restored):
                self._on_restored(event)
            elif isinstance(event, Retained):
                self._on_retained(event)
            elif isinstance(event, Reserved):
                self.origin.reserved_upto(event.seq)
            elif isinstance(event, ShutdownRequested):
                self._fence_input(FenceInput.SHUTDOWN)
                self.heartbeat.stop()  # announce it at once
                upkeep = True
            elif isinstance(event, Tick):
                self.peers.behind(self.elapsed_ms, event.behind)
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
        assert self.held_count == sum(map(len, self.on_hold.values())) <= HELD_MAX
        assert 0 <= self.held_bytes <= HELD_BYTES_MAX
        assert not self.stream_set.dirty and not self.origin.outbox

    # --- queries (no state change) ------------------------------------------------------

    def read(
        self, stream: str, after_seq: int, limit: int, bytes_max: int = FETCH_BYTES_MAX
    ) -> Answer:
        timeline = self._readable(stream)
        if not isinstance(timeline, Timeline):
            return timeline
        state = self.streams.get(stream)
        log_base = state.log.base_seq if state else 0
        return reads.read(timeline, stream, after_seq, limit, log_base, bytes_max)

    def span(
        self, stream: str, after_seq: int, upto_seq: int, max_txs: int, parts: int
    ) -> SpanResult | LogSpan | Redirect | Rejected:
        timeline = self._readable(stream)
        if not isinstance(timeline, Timeline):
            return timeline
        state = self.streams.get(stream)
        log_base = state.log.base_seq if state else 0
        return reads.span(timeline, stream, after_seq, upto_seq, max_txs, parts, log_base)

    def held(
        self, stream: str, after_seq: int, upto_seq: int, max_txs: int
    ) -> tuple[list[int], list[bytes]]:
        """The seqs and digests the memory ring holds in (``after_seq``, ``upto_seq``]."""
        state = self.streams.get(stream)
        if state is None:
            return [], []
        return reads.entries(state.timeline, after_seq, upto_seq, max_txs)

    def _readable(self, stream: str) -> Timeline | Redirect | Rejected:
        problem = stream_name_problem(stream)
        if problem:
            return Rejected(errors.BAD_REQUEST, problem)
        state = self.streams.get(stream)
        return reads.readable(
            stream,
            self.routing.replicas_of(stream),
            self.node_id,
            self.peers.up_nodes(),
            None if self.state is NodeState.SERVING else self.state.value,
            state.timeline if state else None,
            state is not None and state.catchup.synced,
        )

    def replicates(self, stream: str) -> bool:
        return self.node_id in self.routing.replicas_of(stream)

    def status(self, streams: bool = True) -> NodeStatus:
        """The node's status; with ``streams`` false, none of its streams (a status of
        10,000 streams costs the loop a fraction of a second)."""
        ups = {n: p.up for n, p in self.peers.by_id.items()}
        held = self.streams if streams else {}
        return NodeStatus.of(
            self.node_id, self.epoch, self.state.value, ups, held, self.storage_error
        )

    def state_name(self) -> str:
        return self.state.value

    # --- publish and fetch --------------------------------------------------------------

    def _read_of(self, fetch: FetchRequested) -> Answer:
        return self.read(fetch.stream, fetch.after_seq, fetch.limit, fetch.bytes_max)

    def _answer(
        self, fetch: FetchRequested, answer: Answer, park: bool, deadline: Timeout | None = None
    ) -> None:
        if (
            park
            and isinstance(answer, ReadResult | LogRead)
            and reads.worth_parking(answer, fetch)
            and self.parked.park(self.elapsed_ms, fetch, deadline)
        ):
            return
        self._effects.append(ReadReply(fetch.client, fetch.req_id, answer))

    # --- upkeep -------------------------------------------------------------------------

    def _tick(self, now: Now) -> None:
        elapsed = self.elapsed_ms
        self._fence_input(self.peers.fence_input(elapsed))
        if self.state is NodeState.SERVING:  # a fenced node is the likely culprit: no cuts
            for origin, silent_ms in self.peers.silent(elapsed):
                self._suspect(origin, f"was silent for {silent_ms} ms")
            for origin, floor in self.peers.frozen(elapsed):
                self._peer_fault(origin, f"kept its promise at {floor}, behind this node's")
                self._suspect(origin, "did not move its promise")
        self.stream_set.pay(elapsed)
        states = self.peers.states
        for name in list(self.active):
            state = self.streams[name]
            upkeep = state.on_tick(elapsed, states)
            for origin, epoch, after, upto in upkeep.repairs:
                ask = RepairRequest(name, self.node_id, origin, epoch, after, upto)
                self._effects.append(Broadcast(ask))
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
                self.stream_set.dirty[name] = None
            else:
                self.stream_set.rest(name, states)
        if self.stream_set.own_epoch_cut():
            self._start_epoch(max(now.wall_ms, self.epoch + 1), "this node was cut")
        if self.heartbeat.ready(elapsed):
            self._heartbeat(now)
        self._effects.extend(self.publishes.expire(elapsed))
        for fetch in self.parked.expired(elapsed):
            self._answer(fetch, self._read_of(fetch), park=False)

    def _fence_input(self, event: FenceInput) -> None:
        before = self.state
        self.state = next_state(before, event)
        if self.state is before:
            return
        if self.state is NodeState.SERVING:
            self.peers.forgive_silence(self.elapsed_ms)
        change = f"node {self.node_id}: {before.value} -> {self.state.value} ({event.value})"
        self._effects.append(Notice("state", change))
        if self.state is not NodeState.SERVING:  # nothing can be acknowledged or read here
            others = tuple(sorted(self.peers.by_id))
            why = f"node {self.node_id} is {self.state.value}"
            refused = Rejected(errors.UNAVAILABLE, why, others)
            self._effects.extend(self.publishes.fail_all(self.elapsed_ms, refused))
            for fetch in self.parked.all():
                self._answer(fetch, self._read_of(fetch), park=False)

    def _heartbeat(self, now: Now) -> None:
        accepts = [(self.node_id, self.epoch)] + [
            (origin, peer.epoch)
            for origin, peer in self.peers.by_id.items()
            if peer.up and self.stream_set.follows(origin, peer.epoch)
        ]
        hb = Heartbeat(
            sender=self.node_id,
            epoch=self.epoch,
            floor=self.origin.promise_now(now.wall_ms),
            origin_last=self.origin.claims(self.stream_set.unheard(self.peers.states)),
            accepts=tuple(accepts),
            leaving=self.state is NodeState.LEAVING,
            epochs=tuple((n, p.epoch) for n, p in self.peers.by_id.items() if p.epoch),
            shared=tuple(r for peer in self.peers.by_id for r in self.stream_set.digests_for(peer)),
        )
        self._effects.append(Broadcast(hb))
        self.peers.promised(self.elapsed_ms, hb.floor)
        for state in self.stream_set.active_streams():  # what is not at rest says it again
            state.needs_ack = True
            self.stream_set.dirty[state.stream] = None

    # --- flush --------------------------------------------------------------------------

    def _flush(self, now: Now) -> None:
        if self.on_hold:
            self._release_held(now)
        floor = self.origin.promise_now(now.wall_ms)
        reserve = self.origin.to_reserve(now.wall_ms)
        if reserve is not None:
            self._effects.append(Reserve(reserve))
        self._effects.extend(Broadcast(m) for m in self.origin.replicates())
        elapsed = self.elapsed_ms
        floors = self.peers.floors
        serving = self.state is NodeState.SERVING
        for name in self.stream_set.dirty:
            state = self.streams[name]
            claim = self.origin.last.get(name, 0)
            state.lanes[self.node_id].claim(claim, floor)
            state.stabilize(floors, elapsed)
            moved = state.verify(elapsed)
            persist = state.to_persist()  # after verify: its mark goes out this turn
            if persist is not None:
                self._effects.append(persist)
            if moved:  # after to_persist: a trim never takes what the log is yet to be told
                self._verified(name, state)
            if serving:  # a node that does not serve acknowledges nothing
                self._effects.extend(self.publishes.resolve(elapsed, state))
            if state.needs_ack:
                state.needs_ack = False
                vote_seq, vote_digest = state.vote()
                state.promise_sent = promise = self.origin.promise(name, floor, now)
                ack = StreamAck(
                    stream=name,
                    sender=self.node_id,
                    epoch=self.epoch,
                    floor=floor,
                    promise=promise,
                    origin_last=claim,
                    head_seq=vote_seq,
                    head_digest=vote_digest,
                    verified_seq=state.verified_seq,
                    marked_seq=state.log.durable_mark,
                    marked_digest=state.timeline.digest_at(state.log.durable_mark) or b"",
                    readable_seq=state.timeline.readable_seq,
                    reports=state.reports(),
                )
                self._effects.append(Broadcast(ack))
        self.stream_set.dirty.clear()
        self.stream_set.shed(
            self.params.rings_bytes_max, self.publishes.oldest_awaited, self.elapsed_ms
        )

    def _verified(self, name: str, state: StreamReplica) -> None:
        self._effects.append(Verified(name, state.timeline.readable_seq))
        for fetch, deadline in self.parked.wake(name):
            self._answer(fetch, self._read_of(fetch), park=True, deadline=deadline)
        if state.timeline.over_capacity():
            state.trim(self.publishes.oldest_awaited(name))
