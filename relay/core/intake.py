"""What a node does with each mesh message, and with the peers and epochs they reveal.

How this works: every message first says its sender is alive (``Peers.hear``); a message of an
older epoch than the sender's latest is stale and dropped. Each kind then goes to the room that
owns it: txs into their stream's lanes, acks to the stream's votes and cuts, repair and sync
asks answered from what the stream holds, heartbeats to the peers' promises and claims. A
message that breaks the protocol is dropped and reported (``peer_fault``), naming the sender.
``NodeCore`` is this class plus dispatch, ticks and the flush.
"""

from __future__ import annotations

from relay.core import claims
from relay.core.events import Broadcast, LogSync, Notice
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
from relay.core.parts import NodeParts
from relay.core.peers import Heard
from relay.core.timer import Timeout


class MeshIntake(NodeParts):
    heartbeat: Timeout
    wall_ms: int

    def _on_mesh(self, message: MeshMessage) -> None:
        problem = claims.too_far_ahead(message, self.wall_ms, self.node_id)
        if problem:
            self._peer_fault(sender_of(message), problem)
        elif isinstance(message, Replicate):
            self._on_replicate(message)
        elif isinstance(message, StreamAck):
            self._on_ack(message)
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(message)
        elif isinstance(message, RepairData):
            self._on_repair_data(message)
        elif isinstance(message, SyncData):
            self._on_sync_data(message)
        else:
            self._on_ask(message)

    def _hear(self, sender: int, epoch: int) -> bool:
        """Note that ``sender`` is alive in ``epoch``; False if the message is stale."""
        heard = self.peers.hear(self.elapsed_ms, sender, epoch)
        if heard is Heard.STALE:
            return False
        if heard is not Heard.AGAIN:  # rare: the peer came back or restarted
            self._effects.append(Notice("peer_up", f"node {sender} is up (epoch {epoch})"))
            self.stream_set.peer_up(sender, epoch)
        return True

    def _on_heartbeat(self, hb: Heartbeat) -> None:
        if not self._hear(hb.sender, hb.epoch):
            return
        self.peers.by_id[hb.sender].accepts = frozenset(hb.accepts)
        self.origin.clock.observe(hb.floor)
        known = max((e for n, e in hb.epochs if n == self.node_id), default=0)
        if known > self.epoch and not self.origin.last:
            # a previous incarnation of this node had a higher epoch (the wall clock is
            # behind it): peers would take this one for a stale message forever
            self._start_epoch(known + 1, f"a peer knows epoch {known} of this node")
        for name, last in hb.origin_last:  # the claims first, then the promise they cover
            state = self._stream(name)
            lane = state.lanes.get(hb.sender) if state else None
            if state is None or lane is None or lane.epoch != hb.epoch:
                continue
            if last > lane.claimed_last:
                lane.claim(last, 0)
            elif name in self.stream_set.active:
                continue  # it says where it is at our next heartbeat anyway
            else:  # at rest: the origin may never have heard our vote past its claim
                state.needs_ack = True
            self._touch(name)
        theirs = {bucket: d for n, bucket, d in hb.shared if n == self.node_id}
        self.stream_set.compare(hb.sender, theirs, self.elapsed_ms, self.params.suspect_after_ms)
        self.peers.promise(hb.sender, hb.floor)
        for state in self.stream_set.active_streams():  # where something may wait to fold
            if hb.sender in state.lanes:
                self.stream_set.dirty[state.stream] = None
        if hb.leaving:
            self._suspect(hb.sender, "left the cluster")

    def _on_replicate(self, msg: Replicate) -> None:
        if not self._hear(msg.origin, msg.epoch) or not msg.txs:
            return
        state = self._stream(msg.stream)
        lane = state.lanes.get(msg.origin) if state else None
        if state is None or lane is None or lane.epoch != msg.epoch:
            return
        origins, epochs = set(map(origin_of, msg.txs)), set(map(epoch_of, msg.txs))
        if origins != {msg.origin} or epochs != {msg.epoch}:
            self._peer_fault(msg.origin, f"sent txs of another origin or epoch in {msg.stream}")
            return
        state.take_chain(msg.origin, msg.txs)
        last = max(map(seq_of, msg.txs))
        self.origin.clock.observe(last)
        state.lanes[msg.origin].claim(last, msg.floor)
        state.needs_ack |= last > state.promise_sent  # promise past it, unless a lead did
        self._touch(msg.stream)

    def _on_ack(self, ack: StreamAck) -> None:
        if not self._hear(ack.sender, ack.epoch):
            return
        state = self._stream(ack.stream)
        if state is None or ack.sender not in state.lanes:
            return
        self.origin.clock.observe(ack.floor)
        state.take_ack(ack, self.elapsed_ms)
        claim = self.origin.last.get(ack.stream, 0)
        if ack.head_seq < min(claim, state.timeline.head_seq):  # it may lack our last tx
            self.origin.unheard[ack.stream] = None  # our heartbeats repeat the claim
        self._touch(ack.stream)

    def _on_ask(self, ask: RepairRequest | SyncRequest) -> None:
        """A peer asks for txs (repair) or for the verified timeline (sync)."""
        state = self.streams.get(ask.stream)
        if state is not None and ask.requester != self.node_id:
            answer = state.answer(ask, self.params.repair_batch_txs_max)
            if isinstance(answer, LogSync):
                self._effects.append(answer)
            elif answer is not None:
                self._effects.append(Broadcast(answer))

    def _on_repair_data(self, data: RepairData) -> None:
        state = self.streams.get(data.stream)
        last = state.take_repair(data) if state else 0
        if last:
            self.origin.clock.observe(last)
            self._touch(data.stream)

    def _on_sync_data(self, data: SyncData) -> None:
        state = self.streams.get(data.stream)
        if data.requester != self.node_id or state is None:
            return
        outcome, more = state.take_sync(data, self.elapsed_ms, self.params.repair_batch_txs_max)
        if outcome.startswith("refused"):
            self._peer_fault(data.sender, f"{data.stream}: {outcome}")
        elif outcome:
            self._effects.append(Notice("sync", f"{data.stream}: {outcome} from {data.sender}"))
            self._touch(data.stream)
        if more is not None:
            self._effects.append(Broadcast(more))

    def _peer_fault(self, peer: int, what: str) -> None:
        """A peer broke the protocol: its message is dropped, and the operator told who."""
        self._effects.append(Notice("peer_fault", f"node {peer} {what}", peer))

    # --- peers and epochs ---------------------------------------------------------------

    def _suspect(self, origin: int, why: str) -> None:
        self.peers.down(origin)
        self._effects.append(Notice("peer_down", f"node {origin} {why}; cutting its epoch"))
        self.stream_set.suspect(origin, self.peers.by_id[origin].epoch)

    def _start_epoch(self, epoch: int, why: str) -> None:
        self.origin.restart(epoch)
        self.stream_set.rejoin(epoch)
        self._effects.append(Notice("epoch", f"{why}; rejoining as epoch {epoch}"))
        self.heartbeat.stop()  # announce the new epoch at once
