"""A relay node's brain: events in, effects out; no clock, sockets or randomness.

How this works: ``handle(now, events)`` hands each event to the part that owns its concern
(mesh messages to ``MeshIntake``, publishes to ``PublishIntake``, the disk's answers to
``LogEvents``, fetches to the reads), runs the timers on ticks, then *flushes*: it broadcasts
the txs this node coordinated, folds what became stable in each stream that changed, sends one
``StreamAck`` per stream that has something to say, announces verified advances, answers the
producers whose txs a quorum verified and wakes parked fetches. Batching by whatever arrived
together is what keeps the wire cost per transaction low under load. Each part appends the
effects it makes to the turn's list, and this class checks the node's invariants at the end of
every ``handle``.

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
    PeerFault,
    Persisted,
    PersistFailed,
    PublishReply,
    PublishRequested,
    PublishResults,
    ReadReply,
    ReadResult,
    Redirect,
    Rejected,
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
from relay.core.log_events import LogEvents
from relay.core.membership import Membership
from relay.core.mesh_intake import MeshIntake
from relay.core.messages import FETCH_BYTES_MAX, RepairRequest, StreamAck, SyncRequest
from relay.core.origin import Origin
from relay.core.params import CoreConfig
from relay.core.peers import Peers
from relay.core.publish import Publishes
from relay.core.publish_intake import Gate, PublishIntake
from relay.core.routing import stream_name_problem
from relay.core.status import NodeStatus
from relay.core.stream import StreamLimits, StreamReplica
from relay.core.streams import StreamSet
from relay.core.timeline import Timeline
from relay.core.timer import Now, Timeout, WallGuard

Answer = ReadResult | LogRead | Redirect | Rejected


class NodeCore:
    def __init__(
        self,
        config: CoreConfig,
        epoch: int,
        floor: int = 0,
        reserved: int = SEQ_MAX,
        forgot: bool = False,
    ) -> None:
        """``forgot``: the node's disk was replaced or lost (``relay node --recover``): it may
        have voted for what it no longer holds (``amnesia``)."""
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
            mark_again_ms=params.mark_again_ms,
        )
        self.stream_set = StreamSet(config, limits, forgot)
        self.streams = self.stream_set.by_name  # every stream this node replicates
        self.active = self.stream_set.active  # the streams not at rest
        self.routing = self.stream_set.routing
        self.publishes = Publishes(params.publish_timeout_ms)
        self.parked = reads.ParkedFetches()
        self.membership = Membership(
            self.node_id, self.origin, self.peers, self.stream_set, params.heartbeat_ms
        )
        self.mesh_intake = MeshIntake(
            self.node_id, params, self.origin, self.peers, self.stream_set, self.membership
        )
        self.publish_intake = PublishIntake(
            self.node_id, params, self.origin, self.peers, self.stream_set, self.publishes
        )
        self.log_events = LogEvents(self.origin, self.peers, self.stream_set)
        self.state = NodeState.FENCED  # until it hears a quorum of the cluster
        self.wall = WallGuard()
        self.elapsed_ms = 0

    @property
    def epoch(self) -> int:
        return self.origin.epoch

    @property
    def storage_error(self) -> str:
        """What the disk refused last, until a write succeeds ("" if none)."""
        return self.log_events.storage_error

    # --- the one entry point ------------------------------------------------------------

    def handle(self, now: Now, events: Iterable[Event]) -> list[Effect]:
        assert now.elapsed_ms >= self.elapsed_ms, "elapsed time never goes back"
        self.elapsed_ms = elapsed = now.elapsed_ms
        wall_ms = self.wall.read(now)
        out: list[Effect] = []
        upkeep = False
        for event in events:
            if isinstance(event, MeshReceived):
                self.mesh_intake.take(out, event.message, elapsed, wall_ms)
            elif isinstance(event, PublishRequested):
                self.publish_intake.take(out, now, self._gate(wall_ms), event)
            elif isinstance(event, FetchRequested):
                fetch, answer = self._seek(event)
                self._answer(out, fetch, answer, park=True)
            elif isinstance(event, Persisted | PersistFailed | Restored | Retained):
                self.log_events.take(out, event)
            elif isinstance(event, Reserved):
                self.origin.reserved_upto(event.seq)
            elif isinstance(event, ShutdownRequested):
                self._fence_input(out, FenceInput.SHUTDOWN)
                self.membership.announce_soon()
                upkeep = True
            elif isinstance(event, Tick):
                self.peers.behind(elapsed, event.behind)
                upkeep = True
        if upkeep:  # timers, cuts and repairs run on ticks, not on every message
            self._tick(out, now)
        self._flush(out, now, wall_ms)
        self._check(out)
        return out

    def _gate(self, wall_ms: int) -> Gate:
        return Gate(self.state, self.log_events.storage_error, wall_ms)

    def _check(self, effects: list[Effect]) -> None:
        """Invariants that hold after every batch."""
        if self.state is not NodeState.SERVING:
            for e in effects:
                assert not (
                    isinstance(e, PublishReply)
                    and isinstance(e.body, PublishResults)
                    and any(isinstance(r, Acked) for r in e.body.results)
                ), "a node that does not serve acknowledges nothing"
        assert 0 <= self.parked.count <= reads.PARKED_FETCHES_MAX
        self.publish_intake.check()
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

    def ring_entries(
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

    # --- fetches ------------------------------------------------------------------------

    def _seek(self, fetch: FetchRequested) -> tuple[FetchRequested, Answer]:
        """A fetch from a dense index, as a fetch after a seq (``reads.seek``), and its answer."""
        if fetch.from_index is None:
            return fetch, self._read_of(fetch)
        timeline = self._readable(fetch.stream)
        if not isinstance(timeline, Timeline):
            return fetch, timeline
        found = reads.seek(timeline, fetch.stream, fetch)
        if isinstance(found, LogRead):
            return fetch, found
        return found, self._read_of(found)

    def _read_of(self, fetch: FetchRequested) -> Answer:
        return self.read(fetch.stream, fetch.after_seq, fetch.limit, fetch.bytes_max)

    def _answer(
        self,
        out: list[Effect],
        fetch: FetchRequested,
        answer: Answer,
        park: bool,
        deadline: Timeout | None = None,
    ) -> None:
        if (
            park
            and isinstance(answer, ReadResult | LogRead)
            and reads.worth_parking(answer, fetch)
            and self.parked.park(self.elapsed_ms, fetch, deadline)
        ):
            return
        out.append(ReadReply(fetch.client, fetch.req_id, answer))

    # --- upkeep -------------------------------------------------------------------------

    def _tick(self, out: list[Effect], now: Now) -> None:
        elapsed = self.elapsed_ms
        self._fence_input(out, self.peers.fence_input(elapsed))
        if self.state is NodeState.SERVING:  # a fenced node is the likely culprit: no cuts
            for origin, silent_ms in self.peers.silent(elapsed):
                self.membership.suspect(out, origin, f"was silent for {silent_ms} ms")
            for origin, floor in self.peers.frozen(elapsed):
                out.append(PeerFault(origin, f"kept its promise at {floor}, behind this node's"))
                self.membership.suspect(out, origin, "did not move its promise")
        self.stream_set.pay(elapsed)
        states = self.peers.states
        for name in list(self.stream_set.active):
            state = self.streams[name]
            upkeep = state.on_tick(elapsed, states)
            for origin, epoch, after, upto in upkeep.repairs:
                ask = RepairRequest(name, self.node_id, origin, epoch, after, upto)
                out.append(Broadcast(ask))
            if upkeep.sync_after is not None:
                out.append(Broadcast(SyncRequest(name, self.node_id, upkeep.sync_after)))
            if upkeep.refolded is not None:
                out.append(
                    Notice(
                        "rebuild",
                        f"{name}: no quorum agreed past seq {state.verified_seq}; "
                        f"refolding {upkeep.refolded} txs",
                    )
                )
            self.stream_set.ticked(name, states)
        if self.stream_set.own_epoch_cut():
            epoch = max(now.wall_ms, self.epoch + 1)
            self.membership.start_epoch(out, epoch, "this node was cut")
        self.membership.beat(out, now, leaving=self.state is NodeState.LEAVING)
        out.extend(self.publishes.expire(elapsed))
        for fetch in self.parked.expired(elapsed):
            self._answer(out, fetch, self._read_of(fetch), park=False)

    def _fence_input(self, out: list[Effect], event: FenceInput) -> None:
        before = self.state
        self.state = next_state(before, event)
        if self.state is before:
            return
        if self.state is NodeState.SERVING:
            self.peers.forgive_silence(self.elapsed_ms)
        change = f"node {self.node_id}: {before.value} -> {self.state.value} ({event.value})"
        out.append(Notice("state", change))
        if self.state is not NodeState.SERVING:  # nothing can be acknowledged or read here
            others = tuple(sorted(self.peers.by_id))
            why = f"node {self.node_id} is {self.state.value}"
            refused = Rejected(errors.UNAVAILABLE, why, others)
            out.extend(self.publishes.fail_all(refused))
            for fetch in self.parked.all():
                self._answer(out, fetch, self._read_of(fetch), park=False)

    # --- flush --------------------------------------------------------------------------

    def _flush(self, out: list[Effect], now: Now, wall_ms: int) -> None:
        if self.publish_intake.on_hold:
            self.publish_intake.release(out, now, self._gate(wall_ms))
        floor = self.origin.promise_now(now.wall_ms)
        reserve = self.origin.to_reserve(now.wall_ms)
        if reserve is not None:
            out.append(Reserve(reserve))
        out.extend(Broadcast(m) for m in self.origin.replicates())
        elapsed = self.elapsed_ms
        floors = self.peers.floors
        states = self.peers.states
        serving = self.state is NodeState.SERVING
        for name in self.stream_set.take_dirty():
            state = self.streams[name]
            claim = self.origin.last.get(name, 0)
            state.lanes[self.node_id].claim(claim, floor)
            state.stabilize(floors, elapsed)
            moved = state.verify(elapsed, states)
            persist = state.to_persist()  # after verify: its mark goes out this turn
            if persist is not None:
                out.append(persist)
            if moved:  # after to_persist: a trim never takes what the log is yet to be told
                self._verified(out, name, state)
            if serving:  # a node that does not serve acknowledges nothing
                out.extend(self.publishes.resolve(state))
            if state.owes_ack:
                out.append(Broadcast(self._ack(now, name, state, floor, claim)))
        self.stream_set.shed(
            self.params.rings_bytes_max, self.publishes.oldest_awaited, self.elapsed_ms
        )

    def _ack(self, now: Now, name: str, state: StreamReplica, floor: int, claim: int) -> StreamAck:
        vote_seq, vote_digest = state.vote()
        promise = self.origin.promise(name, floor, now)
        state.ack_sent(promise, state.mark, self.elapsed_ms)
        return StreamAck(
            stream=name,
            sender=self.node_id,
            epoch=self.epoch,
            floor=floor,
            promise=promise,
            origin_last=claim,
            head_seq=vote_seq,
            head_digest=vote_digest,
            verified_seq=state.verified_seq,
            marked_seq=state.mark,
            marked_digest=state.timeline.digest_at(state.mark) or b"",
            readable_seq=state.timeline.readable_seq,
            retreats=state.timeline.retreats,
            synced=state.catchup.synced,
            reports=state.reports(),
        )

    def _verified(self, out: list[Effect], name: str, state: StreamReplica) -> None:
        out.append(Verified(name, state.timeline.readable_seq))
        for fetch, deadline in self.parked.wake(name):
            self._answer(out, fetch, self._read_of(fetch), park=True, deadline=deadline)
        if state.timeline.over_capacity():
            state.trim(self.publishes.oldest_awaited(name))
