"""Every stream this node replicates, which of them are active, and which changed this turn.

How this works: a stream is created on first mention (a publish, a peer's message about it)
if this node replicates it and the bound allows. It is *active* while it has anything to do
(``StreamReplica.at_rest`` says when it has not) and *dirty* when the node must flush it this
turn. Ticks, heartbeats and the lag gauge visit only active streams. The few operations that
concern every stream (a peer restarted, came back or is suspected; this node's epoch ended)
are here too; they are rare.

Streams at rest say nothing, so a node that was away could miss that a stream exists. Each
heartbeat carries, per peer, digests of the names of the streams both replicate, in
``BUCKETS`` buckets by name hash (an XOR of name hashes per bucket). A bucket whose two
digests (ours, the peer's) differ and stay the same for ``announce_ms`` is announced: every
stream the two share in it is acked (at most once per ``announce_ms`` per peer and bucket), and
the peer learns the ones it lacks. Streams being created make the digests differ only while
their first messages are on the way, and each new one changes them, so a burst of new streams
costs no announcement; a stream one node lacks costs one bucket's acks, not every stream's.
Under steady creation a bucket's digests may never rest: one that has differed without a
break for ``DIFFER_ANNOUNCES`` times ``announce_ms`` is announced all the same, one bucket per
peer in that time (while every bucket changes at every heartbeat, a stream the peer lacks is
found within ``BUCKETS`` such periods, at the cost of one bucket's acks per period).
Such acks, those owed to a peer that came back and those of streams restored at start are
paced (``pay``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from itertools import islice

from blake3 import blake3

from relay.core.flake import SEQ_MAX
from relay.core.lane import LaneState
from relay.core.mark_telling import PeerStates
from relay.core.messages import tx_bytes
from relay.core.params import CoreConfig
from relay.core.routing import Routing, stream_name_problem
from relay.core.stream import StreamLimits, StreamReplica
from relay.core.timeline import RingBytes
from relay.core.timer import RateLimit

BUCKETS = 16  # the shared-stream digests a heartbeat carries per peer
OWED_ACKS_PER_S = 2000  # how fast owed acks are paid (a peer came back, a restart)
OWED_ACKS_BURST = 64  # and at most this many in one turn
SHED_RETRY_MS = 100  # a shed of the rings that fell short is tried again this much later
DIFFER_ANNOUNCES = 8  # a bucket differing this many announce_ms without a break is announced


def name_mark(name: str) -> int:
    """A 64-bit hash of a stream name; XORed together they digest a set of names, and its
    low bits pick the name's bucket."""
    return int.from_bytes(blake3(name.encode()).digest()[:8], "big")


class StreamSet:
    def __init__(self, config: CoreConfig, limits: StreamLimits, forgot: bool = False) -> None:
        self.config = config
        self.forgot = forgot  # the node's disk was replaced (``amnesia``)
        self.node_id = config.node_id
        self.limits = limits
        self.routing = Routing(config.subscriptions, config.rules)
        self.by_name: dict[str, StreamReplica] = {}
        self.active: dict[str, None] = {}  # insertion-ordered: replays stay deterministic
        self.dirty: dict[str, None] = {}
        self.owed: dict[str, None] = {}  # streams that owe their peers an ack, paid by ``pay``
        self.paid_at = 0  # elapsed ms of the last payment
        # (peer, bucket) -> digest of the names of the streams both replicate
        self.shared: dict[tuple[int, int], int] = {}
        # (peer, bucket) -> (ours, theirs, since when both are so, since when they differ or
        # were last announced) while they differ
        self.differ: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        self.announced: dict[tuple[int, int], RateLimit] = {}  # (peer, bucket) -> last announced
        self.restless: dict[int, RateLimit] = {}  # peer -> last bucket announced still changing
        self.ring = RingBytes()  # what every stream's timeline holds
        self.shed_retry_at = 0  # after a shed that fell short, the elapsed ms to try again

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
        state = StreamReplica(
            name, self.node_id, replicas, quorum, self.limits, self.ring, self.forgot
        )
        state.rejoin(epoch)
        for origin in state.peers:
            up, peer_epoch = peers[origin]
            if up:
                state.follow(origin, peer_epoch)
        self.by_name[name] = state
        mark = name_mark(name)
        bucket = mark % BUCKETS
        for peer in state.peers:
            self.shared[peer, bucket] = self.shared.get((peer, bucket), 0) ^ mark
        self.touch(name)
        return state

    def digests_for(self, peer: int) -> list[tuple[int, int, int]]:
        """(peer, bucket, digest) of the buckets where this node shares streams with ``peer``."""
        return [(peer, b, d) for b in range(BUCKETS) if (d := self.shared.get((peer, b), 0))]

    def take_dirty(self) -> dict[str, None]:
        """The streams to flush this turn, in the order they changed; none after."""
        dirty, self.dirty = self.dirty, {}
        return dirty

    def touch(self, name: str) -> None:
        self.dirty[name] = None
        self.active[name] = None

    def with_origin(self, origin: int) -> Iterator[tuple[str, StreamReplica]]:
        return ((n, s) for n, s in self.by_name.items() if origin in s.lanes)

    def active_streams(self) -> list[StreamReplica]:
        return [self.by_name[name] for name in self.active]

    def ack_active(self) -> None:
        """Every stream not at rest says where it is again (at each heartbeat)."""
        for name in self.active:
            self.by_name[name].owe_ack()
            self.dirty[name] = None

    def flush_with(self, origin: int) -> None:
        """Flush every active stream ``origin`` replicates: its promise may let txs fold."""
        for name in self.active:
            if origin in self.by_name[name].lanes:
                self.dirty[name] = None

    # --- rare: every stream -------------------------------------------------------------

    def shed(self, ring_bytes_max: int, keep_from: Callable[[str], int], elapsed_ms: int) -> None:
        """Over ``ring_bytes_max`` together, the timelines drop their oldest entries that may
        go (the log on disk still holds them) until they are under seven eighths of it. The
        cut is one seq for every stream (seqs are times: the oldest entries of the node go
        first), found by merging the streams' droppable prefixes until they add up to what
        must go, so a shed costs the entries it drops and one visit per stream. What a
        publish waiting for its answer needs (``keep_from``) stays; a shed that fell short
        is tried again ``SHED_RETRY_MS`` later."""
        total = self.ring.total
        if total <= ring_bytes_max or elapsed_ms < self.shed_retry_at:
            return
        wanted = total - ring_bytes_max * 7 // 8
        keeps: dict[str, int] = {}
        prefixes = []
        for name, state in self.by_name.items():
            timeline = state.timeline
            if not timeline.txs:
                continue
            keep = keeps[name] = state.kept_from(keep_from(name))
            end = timeline.sheddable(keep)
            if end:
                sizes = map(tx_bytes, islice(timeline.txs, end))
                prefixes.append(zip(islice(timeline.seqs, end), sizes, strict=False))
        cutoff, freed = SEQ_MAX, 0
        for seq, size in heapq.merge(*prefixes):
            freed += size
            if freed >= wanted:
                cutoff = seq + 1
                break
        for name, keep in keeps.items():
            self.by_name[name].timeline.shed_before(min(keep, cutoff))
        self.shed_retry_at = elapsed_ms + SHED_RETRY_MS if freed < wanted else 0

    def peer_up(self, origin: int, epoch: int, restarted: bool) -> None:
        """A peer came back or restarted: follow it, and owe it where we are everywhere. A
        restarted peer votes again: its votes spoke for the incarnation that cast them (one on
        a replaced disk no longer holds what it voted for)."""
        for name, state in self.with_origin(origin):
            state.follow(origin, epoch)
            if restarted:
                state.votes.forget_peer(origin)
            self.owed[name] = None

    def restored(self, name: str) -> None:
        """A stream restored from the log acks its peers when its turn comes (``pay``), not
        in the first turn with every other one; until then it waits outside the active set
        (it holds nothing a timer could need before its peers answer)."""
        self.by_name[name].clear_ack()
        self.dirty.pop(name, None)
        self.active.pop(name, None)
        self.owed[name] = None

    def pay(self, elapsed_ms: int) -> None:
        """Ack some of the streams that owe their peers an ack, the oldest debts first, at
        ``OWED_ACKS_PER_S``: a peer that restarts, or comes back, among thousands of streams
        hears of them over a few seconds, and nobody's heartbeats wait behind every stream's
        ack."""
        owed = self.owed
        due = (elapsed_ms - self.paid_at) * OWED_ACKS_PER_S // 1000
        if not owed or due < 1:
            if not owed:
                self.paid_at = elapsed_ms
            return
        self.paid_at = elapsed_ms
        for name in list(islice(owed, min(due, OWED_ACKS_BURST))):
            del owed[name]
            self.by_name[name].owe_ack()
            self.touch(name)

    def compare(self, peer: int, theirs: dict[int, int], elapsed_ms: int, announce_ms: int) -> None:
        """``peer`` digests the streams it shares with this node as ``theirs`` (bucket ->
        digest): a bucket whose digests have differed, unchanged, for ``announce_ms``, or
        changing for ``DIFFER_ANNOUNCES`` times as long (the one that has differed longest,
        one per peer in that time), is announced, so both sides learn what they lack."""
        restless_ms = DIFFER_ANNOUNCES * announce_ms
        restless: tuple[int, int] | None = None  # (since when, bucket) of the longest differing
        for bucket in range(BUCKETS):
            at = (peer, bucket)
            ours, their = self.shared.get(at, 0), theirs.get(bucket, 0)
            if ours == their:
                self.differ.pop(at, None)
                continue
            was = self.differ.get(at)
            if was is None:
                self.differ[at] = (ours, their, elapsed_ms, elapsed_ms)
                continue
            unchanged_since, differ_since = was[2], was[3]
            if was[:2] != (ours, their):
                unchanged_since = elapsed_ms
            self.differ[at] = (ours, their, unchanged_since, differ_since)
            if elapsed_ms - unchanged_since >= announce_ms:
                if self.announced.setdefault(at, RateLimit(announce_ms)).allow(elapsed_ms):
                    self._announce(peer, bucket, elapsed_ms)
            elif elapsed_ms - differ_since >= restless_ms:
                restless = min(restless or (differ_since, bucket), (differ_since, bucket))
        limit = self.restless.setdefault(peer, RateLimit(restless_ms))
        if restless is not None and limit.allow(elapsed_ms):
            self._announce(peer, restless[1], elapsed_ms)

    def _announce(self, peer: int, bucket: int, elapsed_ms: int) -> None:
        """Owe ``peer`` an ack of every stream the two share in ``bucket``."""
        at = (peer, bucket)
        self.differ[at] = (*self.differ[at][:3], elapsed_ms)
        for name, _ in self.with_origin(peer):
            if name_mark(name) % BUCKETS == bucket:
                self.owed[name] = None

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

    def ticked(self, name: str, peers: PeerStates) -> None:
        """After a tick of an active stream: flush it if it owes an ack, or let it leave the
        active set if nothing is left to do."""
        state = self.by_name[name]
        if state.owes_ack:
            self.dirty[name] = None
        elif state.at_rest(peers):
            del self.active[name]
