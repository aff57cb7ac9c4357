"""What a node does with each mesh message.

How this works: a heartbeat, a ``Replicate`` or an ack first says its sender is alive
(``Membership.hear``); one of an older epoch than the sender's latest is stale and dropped.
Each kind then goes to the part that owns it: txs into their stream's lanes, acks to the
stream's votes and cuts, repair and sync asks answered from what the stream holds, heartbeats
to the peers' promises and claims. A message that breaks the protocol is dropped and reported
(``PeerFault``), naming the sender.
"""

from __future__ import annotations

from relay.core import claims
from relay.core.events import Broadcast, Effect, LogSync, Notice, PeerFault
from relay.core.membership import Membership
from relay.core.messages import (
    Heartbeat,
    MeshMessage,
    RepairData,
    RepairRequest,
    Replicate,
    StreamAck,
    SyncData,
    SyncRequest,
    epoch_of,
    origin_of,
    sender_of,
    seq_of,
)
from relay.core.origin import Origin
from relay.core.params import CoreParams
from relay.core.peers import Peers
from relay.core.rebuild import SliceRefused
from relay.core.streams import StreamSet


class MeshIntake:
    def __init__(
        self,
        node_id: int,
        params: CoreParams,
        origin: Origin,
        peers: Peers,
        stream_set: StreamSet,
        membership: Membership,
    ) -> None:
        self.node_id = node_id
        self.params = params
        self.origin = origin
        self.peers = peers
        self.stream_set = stream_set
        self.membership = membership

    def take(self, out: list[Effect], message: MeshMessage, elapsed_ms: int, wall_ms: int) -> None:
        """Handle one message; ``wall_ms`` is what its claims are judged against."""
        problem = claims.too_far_ahead(message, wall_ms, self.node_id)
        if problem:
            out.append(PeerFault(sender_of(message), problem))
        elif isinstance(message, Replicate):
            self._on_replicate(out, message, elapsed_ms)
        elif isinstance(message, StreamAck):
            self._on_ack(out, message, elapsed_ms)
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(out, message, elapsed_ms)
        elif isinstance(message, RepairData):
            self._on_repair_data(message)
        elif isinstance(message, SyncData):
            self._on_sync_data(out, message, elapsed_ms)
        else:
            self._on_ask(out, message)

    def _on_heartbeat(self, out: list[Effect], hb: Heartbeat, elapsed_ms: int) -> None:
        if not self.membership.hear(out, elapsed_ms, hb.sender, hb.epoch):
            return
        self.peers.admits(hb.sender, frozenset(hb.accepts))
        self.origin.clock.observe(hb.floor)
        known = max((e for n, e in hb.epochs if n == self.node_id), default=0)
        if known > self.origin.epoch and not self.origin.last:
            # a previous incarnation of this node had a higher epoch (the wall clock is
            # behind it): peers would take this one for a stale message forever
            self.membership.start_epoch(out, known + 1, f"a peer knows epoch {known} of this node")
        stream_set = self.stream_set
        for name, last in hb.origin_last:  # the claims first, then the promise they cover
            state = stream_set.ensure(name, self.origin.epoch, self.peers.states)
            lane = state.lanes.get(hb.sender) if state else None
            if state is None or lane is None or lane.epoch != hb.epoch:
                continue
            if last > lane.claimed_last:
                lane.claim(last, 0)
            elif name in stream_set.active:
                continue  # it says where it is at our next heartbeat anyway
            else:  # at rest: the origin may never have heard our vote past its claim
                state.owe_ack()
            stream_set.touch(name)
        theirs = {bucket: d for n, bucket, d in hb.shared if n == self.node_id}
        stream_set.compare(hb.sender, theirs, elapsed_ms, self.params.suspect_after_ms)
        self.peers.promise(hb.sender, hb.floor)
        stream_set.flush_with(hb.sender)
        if hb.leaving:
            self.membership.suspect(out, hb.sender, "left the cluster")

    def _on_replicate(self, out: list[Effect], msg: Replicate, elapsed_ms: int) -> None:
        if not self.membership.hear(out, elapsed_ms, msg.origin, msg.epoch) or not msg.txs:
            return
        state = self.stream_set.ensure(msg.stream, self.origin.epoch, self.peers.states)
        lane = state.lanes.get(msg.origin) if state else None
        if state is None or lane is None or lane.epoch != msg.epoch:
            return
        origins, epochs = set(map(origin_of, msg.txs)), set(map(epoch_of, msg.txs))
        if origins != {msg.origin} or epochs != {msg.epoch}:
            why = f"sent txs of another origin or epoch in {msg.stream}"
            out.append(PeerFault(msg.origin, why))
            return
        state.take_chain(msg.origin, msg.txs)
        last = max(map(seq_of, msg.txs))
        self.origin.clock.observe(last)
        state.lanes[msg.origin].claim(last, msg.floor)
        if last > state.promise_sent:  # promise past it, unless a lead did
            state.owe_ack()
        self.stream_set.touch(msg.stream)

    def _on_ack(self, out: list[Effect], ack: StreamAck, elapsed_ms: int) -> None:
        if not self.membership.hear(out, elapsed_ms, ack.sender, ack.epoch):
            return
        state = self.stream_set.ensure(ack.stream, self.origin.epoch, self.peers.states)
        if state is None or ack.sender not in state.lanes:
            return
        self.origin.clock.observe(ack.floor)
        state.take_ack(ack, elapsed_ms)
        claim = self.origin.last.get(ack.stream, 0)
        if ack.head_seq < min(claim, state.timeline.head_seq):  # it may lack our last tx
            self.origin.repeat_claim(ack.stream)
        self.stream_set.touch(ack.stream)

    def _on_ask(self, out: list[Effect], ask: RepairRequest | SyncRequest) -> None:
        """A peer asks for txs (repair) or for the verified timeline (sync)."""
        state = self.stream_set.by_name.get(ask.stream)
        if state is not None and ask.requester != self.node_id:
            answer = state.answer(ask, self.params.repair_batch_txs_max)
            if isinstance(answer, LogSync):
                out.append(answer)
            elif answer is not None:
                out.append(Broadcast(answer))

    def _on_repair_data(self, data: RepairData) -> None:
        state = self.stream_set.by_name.get(data.stream)
        last = state.take_repair(data) if state else 0
        if last:
            self.origin.clock.observe(last)
            self.stream_set.touch(data.stream)

    def _on_sync_data(self, out: list[Effect], data: SyncData, elapsed_ms: int) -> None:
        state = self.stream_set.by_name.get(data.stream)
        if data.requester != self.node_id or state is None:
            return
        outcome, more = state.take_sync(data, elapsed_ms, self.params.repair_batch_txs_max)
        if isinstance(outcome, SliceRefused):
            out.append(PeerFault(data.sender, f"{data.stream}: refused {outcome.why}"))
        elif outcome is not None:
            out.append(Notice("sync", f"{data.stream}: {outcome} from {data.sender}"))
            self.stream_set.touch(data.stream)
        if more is not None:
            out.append(Broadcast(more))
