"""Who is in the cluster, in which epoch, and what this node tells them of itself.

How this works: every mesh message first says its sender is alive (``hear``); a peer that
comes back or restarts is followed in every stream it replicates. A peer that falls silent,
stops moving its promise or leaves is *suspected*: it is marked down and every stream cuts
its epoch. This node starts a new epoch of its own when its peers cut the old one, or when a
peer knows a newer epoch of it than it does (its wall clock is behind a previous
incarnation). The heartbeat says this node's epoch, its promise, the claims its peers may
lack, which origins it admits and digests of the streams it shares with each peer; it goes
out every ``heartbeat_ms``, and at once after a new epoch or a shutdown.
"""

from __future__ import annotations

from relay.core.events import Broadcast, Effect, Notice
from relay.core.messages import Heartbeat
from relay.core.origin import Origin
from relay.core.peers import Heard, Peers
from relay.core.streams import StreamSet
from relay.core.timer import Now, RateLimit


class Membership:
    def __init__(
        self,
        node_id: int,
        origin: Origin,
        peers: Peers,
        stream_set: StreamSet,
        heartbeat_ms: int,
    ) -> None:
        self.node_id = node_id
        self.origin = origin
        self.peers = peers
        self.stream_set = stream_set
        self.heartbeat = RateLimit(heartbeat_ms)

    def hear(self, out: list[Effect], elapsed_ms: int, sender: int, epoch: int) -> bool:
        """Note that ``sender`` is alive in ``epoch``; False if the message is stale."""
        heard = self.peers.hear(elapsed_ms, sender, epoch)
        if heard is Heard.STALE:
            return False
        if heard is not Heard.AGAIN:  # rare: the peer came back or restarted
            out.append(Notice("peer_up", f"node {sender} is up (epoch {epoch})"))
            self.stream_set.peer_up(sender, epoch, heard is Heard.NEW_EPOCH)
        return True

    def suspect(self, out: list[Effect], origin: int, why: str) -> None:
        self.peers.down(origin)
        out.append(Notice("peer_down", f"node {origin} {why}; cutting its epoch"))
        self.stream_set.suspect(origin, self.peers.by_id[origin].epoch)

    def start_epoch(self, out: list[Effect], epoch: int, why: str) -> None:
        self.origin.restart(epoch)
        self.stream_set.rejoin(epoch)
        out.append(Notice("epoch", f"{why}; rejoining as epoch {epoch}"))
        self.heartbeat.release()  # announce the new epoch at once

    def announce_soon(self) -> None:
        """The next heartbeat goes out at the next tick."""
        self.heartbeat.release()

    def beat(self, out: list[Effect], now: Now, leaving: bool) -> None:
        """Send a heartbeat if one is due; every active stream then says where it is."""
        if not self.heartbeat.allow(now.elapsed_ms):
            return
        accepts = [(self.node_id, self.origin.epoch)] + [
            (origin, peer.epoch)
            for origin, peer in self.peers.by_id.items()
            if peer.up and self.stream_set.follows(origin, peer.epoch)
        ]
        hb = Heartbeat(
            sender=self.node_id,
            epoch=self.origin.epoch,
            floor=self.origin.promise_now(now.wall_ms),
            origin_last=self.origin.claims(self.stream_set.unheard(self.peers.states)),
            accepts=tuple(accepts),
            leaving=leaving,
            epochs=tuple((n, p.epoch) for n, p in self.peers.by_id.items() if p.epoch),
            shared=tuple(r for peer in self.peers.by_id for r in self.stream_set.digests_for(peer)),
        )
        out.append(Broadcast(hb))
        self.peers.promised(now.elapsed_ms, hb.floor)
        self.stream_set.ack_active()
