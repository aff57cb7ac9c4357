"""Every stream this node replicates, which of them are active, and which changed this turn.

How this works: a stream is created on first mention (a publish, a peer's message about it)
if this node replicates it and the bound allows. It is *active* while it has anything to do
(``StreamReplica.at_rest`` says when it has not) and *dirty* when the node must flush it this
turn. Ticks, heartbeats and the lag gauge visit only active streams. The few operations that
concern every stream (a peer restarted, came back or is suspected; this node's epoch ended)
are here too; they are rare.

Streams at rest say nothing, so a node that was away could miss that a stream exists. Each
heartbeat carries, per peer, a digest of the names of the streams both replicate (an XOR of
name hashes, kept up to date as streams appear); a node whose digest for a peer differs from
the peer's for it announces every stream they share (at most once per ``announce_ms``), and
the peer learns the ones it lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from blake3 import blake3

from relay.core.lane import LaneState
from relay.core.params import CoreConfig
from relay.core.routing import Routing, stream_name_problem
from relay.core.stream import PeerStates, StreamLimits, StreamReplica
from relay.core.timer import Timeout


def name_mark(name: str) -> int:
    """A 64-bit hash of a stream name; XORed together they digest a set of names."""
    return int.from_bytes(blake3(name.encode()).digest()[:8], "big")


class StreamSet:
    def __init__(self, config: CoreConfig, limits: StreamLimits) -> None:
        self.config = config
        self.node_id = config.node_id
        self.limits = limits
        self.routing = Routing(config.subscriptions)
        self.by_name: dict[str, StreamReplica] = {}
        self.active: dict[str, None] = {}  # insertion-ordered: replays stay deterministic
        self.dirty: dict[str, None] = {}
        self.shared: dict[int, int] = {}  # peer -> digest of the stream names both replicate
        self.announced: dict[int, Timeout] = {}  # peer -> when we last announced all to it

    def ensure(self, name: str, epoch: int, peers: PeerStates) -> StreamReplica | None:
        """The stream, created if this node replicates it and may hold one more."""
        state = self.by_name.get(name)
        if state is not None:
            return state
        if stream_name_problem(name) or len(self.by_name) >= self.config.params.streams_max:
            return None
        replicas = self.routing.replicas_of(name)
        if self.node_id not in replicas:
            return None
        quorum = self.config.quorum_of(len(replicas))
        state = StreamReplica(name, self.node_id, replicas, quorum, self.limits)
        state.rejoin(epoch)
        for origin in state.peers:
            up, peer_epoch = peers[origin]
            if up:
                state.follow(origin, peer_epoch)
        self.by_name[name] = state
        mark = name_mark(name)
        for peer in state.peers:
            self.shared[peer] = self.shared.get(peer, 0) ^ mark
        self.touch(name)
        return state

    def touch(self, name: str) -> None:
        self.dirty[name] = None
        self.active[name] = None

    def with_origin(self, origin: int) -> Iterator[tuple[str, StreamReplica]]:
        return ((n, s) for n, s in self.by_name.items() if origin in s.lanes)

    def active_streams(self) -> list[StreamReplica]:
        return [self.by_name[name] for name in self.active]

    # --- rare: every stream -------------------------------------------------------------

    def peer_up(self, origin: int, epoch: int) -> None:
        """A peer came back or restarted: follow it and tell it where we are everywhere."""
        for name, state in self.with_origin(origin):
            state.follow(origin, epoch)
            state.needs_ack = True
            self.touch(name)

    def compare(self, peer: int, theirs: int, elapsed_ms: int, announce_ms: int) -> None:
        """``peer`` holds the shared streams whose digest is ``theirs``: if it differs from
        ours, announce every shared stream (rate-limited), so both sides learn what they lack."""
        if theirs == self.shared.get(peer, 0):
            return
        timer = self.announced.setdefault(peer, Timeout(announce_ms))
        if timer.ready(elapsed_ms):
            for name, state in self.with_origin(peer):
                state.needs_ack = True
                self.touch(name)

    def suspect(self, origin: int, epoch: int) -> None:
        for name, state in self.with_origin(origin):
            state.suspect(origin, state.lanes[origin].epoch or epoch)
            self.touch(name)

    def rejoin(self, epoch: int) -> None:
        for name, state in self.by_name.items():
            state.rejoin(epoch)
            self.touch(name)

    # --- questions over the active streams ----------------------------------------------

    def own_epoch_cut(self) -> bool:
        """Peers cut this node's epoch and every cut settled with its txs folded. A stream
        whose own lane is not ACTIVE is never at rest, so the active ones are enough."""
        mine = [s.lanes[self.node_id] for s in self.active_streams()]
        if not any(lane.state is LaneState.CUT for lane in mine):
            return False
        return not any(lane.state is LaneState.CUTTING or lane.queue for lane in mine)

    def follows(self, origin: int, epoch: int) -> bool:
        """Every stream's lane of ``origin`` is ACTIVE in ``epoch`` (streams at rest follow
        every live origin)."""
        return all(
            s.lanes[origin].state is LaneState.ACTIVE and s.lanes[origin].epoch == epoch
            for s in self.active_streams()
            if origin in s.lanes
        )

    def unheard(self, peers: PeerStates) -> Callable[[str, int], bool]:
        """Whether a live replica of a stream may lack this node's claim there (the claims
        a heartbeat repeats, ``Origin.claims``)."""
        return lambda name, claim: self.by_name[name].unheard(claim, peers)

    def rest(self, name: str, peers: PeerStates) -> None:
        """Leave the active set if nothing is left to do."""
        if self.by_name[name].at_rest(peers):
            del self.active[name]
