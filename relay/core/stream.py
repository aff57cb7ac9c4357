"""One replica's state for one stream: the composition of its parts.

How this works: txs arrive into per-origin ``Lane``s (``lane``); what is stable is folded
into the ``Timeline`` (``ordering``), deduplicated (``dedup``); peers' votes verify a prefix
(``votes``); suspected origins are cut (``cut``); gaps are repaired (``repair``); a replica
that lacks or contradicts the verified history catches up (``catchup``) and rebuilds its
timeline (``rebuild``). This class wires them together, answers the node's questions and
owns whether the replica owes its peers an ack; each rule lives in its own module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from relay.core import cut, ordering, repair
from relay.core.amnesia import Recovery
from relay.core.catchup import (
    Catchup,
    CatchupAction,
    CatchupInput,
    CatchupState,
    PeerView,
    Vouchers,
)
from relay.core.dedup import DedupIndex
from relay.core.durable import LogCursor
from relay.core.events import LogSync, Persist
from relay.core.lane import Lane, LaneInput, LaneState
from relay.core.mark_telling import MarkTelling, PeerStates
from relay.core.messages import (
    OriginReport,
    RepairData,
    RepairRequest,
    StreamAck,
    SyncData,
    SyncRequest,
    Tx,
)
from relay.core.ordering import Floors
from relay.core.rebuild import (
    DedupKeys,
    HeldVerified,
    SliceAdopted,
    SliceOutcome,
    SliceRefused,
    SyncSlice,
    TimelineRebuild,
)
from relay.core.timeline import RingBytes, Timeline
from relay.core.votes import Votes


@dataclass(frozen=True, slots=True)
class StreamLimits:
    buffer_txs_max: int
    dedup_window_ms: int
    dedup_keys_max: int
    buffer_bytes_max: int = 64 << 20
    repair_after_ms: int = 200
    cut_grace_ms: int = 1000
    stuck_after_ms: int = 1000
    votes_wait: bool = False  # a vote waits for the disk (fsync = "always")
    mark_again_ms: int = 20  # a mark the peers may lack is said again after this long


@dataclass(frozen=True, slots=True, init=False)
class Upkeep:
    """What one tick of a stream asks of the node."""

    repairs: tuple[cut.RepairNeed, ...] = ()
    sync_after: int | None = None  # ask peers for their verified timeline after this seq
    refolded: int | None = None  # the unverified tail was given up: how many txs

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        repairs: tuple[cut.RepairNeed, ...] = (),
        sync_after: int | None = None,
        refolded: int | None = None,
    ) -> None:
        object.__setattr__(self, "repairs", repairs)
        object.__setattr__(self, "sync_after", sync_after)
        object.__setattr__(self, "refolded", refolded)


class StreamReplica:
    def __init__(
        self,
        stream: str,
        self_id: int,
        replicas: tuple[int, ...],
        quorum: int,
        limits: StreamLimits,
        ring: RingBytes | None = None,
        forgot: bool = False,
    ) -> None:
        """``forgot``: this node's disk was replaced (``amnesia``)."""
        assert self_id in replicas
        self.stream = stream
        self.self_id = self_id
        self.replicas = replicas
        self.peers = [r for r in replicas if r != self_id]
        self.quorum = quorum
        self.lanes: dict[int, Lane] = {
            r: Lane(r, limits.repair_after_ms, limits.cut_grace_ms) for r in replicas
        }
        self.timeline = Timeline(stream, limits.buffer_txs_max, limits.buffer_bytes_max, ring)
        self.dedup = DedupIndex(limits.dedup_window_ms, limits.dedup_keys_max)
        self.votes = Votes(self_id, replicas, quorum)
        self.catchup = Catchup(limits.stuck_after_ms)
        self.vouchers = Vouchers(quorum)
        self.log = LogCursor(limits.votes_wait)
        self.asks = repair.RepairAsks(limits.repair_after_ms)
        self.announced_seq = 0  # the readable seq last reported by ``verify``
        self.verified_noted = 0  # the verified seq ``verify`` last saw
        self.rebuild = TimelineRebuild(
            self.lanes,
            self.timeline,
            self.dedup,
            self.votes,
            self.catchup,
            self.vouchers,
            self.log,
            self._retake,
        )
        self._ack_owed = False  # this replica's next flush sends its peers an ack
        self.promise_sent = 0  # the promise of this node's last ack in the stream
        self.marks_told = MarkTelling(self.votes, self.peers, quorum, limits.mark_again_ms)
        self.late_txs = 0
        self.owed_reports: dict[tuple[int, int], int] = {}  # (origin, epoch) -> highest held
        self.waiting_answers = cut.WaitingAnswers(limits.repair_after_ms)
        # the replicas heard since this one began (itself counted): it folds nothing until a
        # quorum of them told it what their restored tails hold (``take_restored``)
        self.heard: set[int] | None = {self_id} if quorum > 1 else None
        self.restored_tail: tuple[OriginReport, ...] = ()  # told until verified passes it
        self.restored_head = 0
        self.rejoin_epoch = 0  # this node's epoch, while its lane cuts an older one first
        # on a node whose disk was replaced: until the stream recovered, it counts for nothing
        recovers = forgot and Recovery.needed_for(len(self.peers), quorum)
        self.recovery = Recovery(len(self.peers), quorum) if recovers else None

    # --- the ack it owes ----------------------------------------------------------------

    @property
    def owes_ack(self) -> bool:
        return self._ack_owed

    def owe_ack(self) -> None:
        """Tell the peers where this replica is at the next flush."""
        self._ack_owed = True

    def clear_ack(self) -> None:
        """The ack is left to the node's pacing (a restored stream)."""
        self._ack_owed = False

    def ack_sent(self, promise: int, mark: int, elapsed_ms: int) -> None:
        """The node's flush sent the ack, promising ``promise`` and telling ``mark``."""
        self._ack_owed = False
        self.promise_sent = promise
        self.marks_told.ack_sent(mark, elapsed_ms)

    # --- transactions -------------------------------------------------------------------

    def take(self, tx: Tx, restoring: bool = False) -> bool:
        """A tx of the origin's current epoch arrived (from the origin or a repair), or is
        put back after the timeline changed (``restoring``)."""
        if not self.lanes[tx.origin].accept(tx, self.timeline.head_seq, restoring):
            return False
        self.dedup.note_pending((tx,))
        return True

    def _retake(self, tx: Tx) -> bool:
        """Put back a tx held above a head the timeline was rebuilt to. A tx of an epoch its
        lane left behind is given up: peers still cutting that epoch hear what this replica
        holds of it now (it may have told them it held more)."""
        if self.take(tx, restoring=True):
            return True
        if tx.epoch != self.lanes[tx.origin].epoch:
            key = (tx.origin, tx.epoch)
            self.owed_reports[key] = self.timeline.last_of(tx.origin, tx.epoch)
            self._ack_owed = True
        return False

    def take_chain(self, origin: int, txs: Sequence[Tx]) -> None:
        """An origin's txs of its current epoch in seq order (a ``Replicate``, or this
        node's own new txs)."""
        taken = self.lanes[origin].accept_chain(txs, self.timeline.head_seq)
        self.dedup.note_pending(taken)

    def lookup_key(self, producer_id: str, msg_id: int) -> tuple[int, int] | None:
        """(seq, content tag) of the tx that already carries the key, if any."""
        return self.dedup.lookup(producer_id, msg_id, self.timeline.head_seq)

    def stabilize(self, floors: Floors, elapsed_ms: int) -> bool:
        """Fold every tx at or below the watermark into the timeline; True if the head moved."""
        if not self.catchup.synced or self.heard is not None:
            return False
        moved, late = ordering.fold_stable(self.lanes, floors, self.timeline, self.dedup)
        self.late_txs += late
        if moved:
            # the vote moved, unless it waits for the disk (``persisted`` then says so)
            self._ack_owed |= not self.log.votes_wait
            if self.votes.recheck(self.timeline):
                self.catchup.apply(CatchupInput.CONTRADICTED, elapsed_ms)
        return moved

    # --- votes and verification ---------------------------------------------------------

    def take_ack(self, ack: StreamAck, elapsed_ms: int) -> None:
        """A peer's promise, vote and cut reports for this stream."""
        lane = self.lanes[ack.sender]
        if lane.epoch == ack.epoch:
            lane.claim(ack.origin_last, max(ack.floor, ack.promise))
        for report in ack.reports:
            if report.restored:
                self.take_restored(report)
                continue
            before = self.lanes.get(report.origin)
            if cut.take_report(self.lanes, ack.sender, report):
                self._ack_owed = True
                self._took_epoch(report.origin, before)
            if cut.owed(self.lanes, report, self.timeline):
                key = (report.origin, report.epoch)
                held = self.timeline.last_of(report.origin, report.epoch)
                if not report.settled or self.waiting_answers.due(key, held, elapsed_ms):
                    self.owed_reports[key] = held
                    self._ack_owed = True
        if self.recovery is not None:
            self.recovery.heard(ack.sender, ack.floor, ack.head_seq)
        if self.heard is not None:
            self.heard.add(ack.sender)
            if len(self.heard) >= self.quorum:
                self.heard = None  # a quorum told what it restored: folding may start
        votes = self.votes
        if votes.take_round(ack.sender, (ack.epoch, ack.retreats), self.timeline):
            votes.take_mark(ack.sender, ack.epoch, ack.marked_seq, ack.marked_digest, self.timeline)
            contradicted = votes.take(
                ack.sender,
                ack.head_seq,
                ack.head_digest,
                ack.verified_seq,
                self.timeline,
                self.catchup.synced,
            )
            if contradicted:
                self.catchup.apply(CatchupInput.CONTRADICTED, elapsed_ms)
        # the peer is behind what we vote, or lacks our mark: tell it (our stable head may run
        # ahead of our vote, which waits for the disk, and an ack cannot tell it more)
        behind = ack.head_seq < self.log.vote_seq(self.timeline)
        behind |= ack.verified_seq < self.verified_seq
        # a peer that does not know the history yet waits for every live replica's word, even
        # where nothing is verified (an empty stream): say it again, lest a lost ack hold it
        behind |= not ack.synced and self.catchup.synced
        lacking = min(self.mark, ack.verified_seq)  # what both verified
        if behind or self.marks_told.lacking(ack.readable_seq, lacking, elapsed_ms):
            self._ack_owed = True

    def verify(self, elapsed_ms: int, peers: PeerStates) -> bool:
        """Let the votes move the verified seq, and a quorum's marks the readable seq; True
        if the readable seq moved since the last call (announce it). The node's flush is the
        only caller."""
        timeline = self.timeline
        self.votes.verify(timeline, self._vote_seq())
        if timeline.verified_seq > self.verified_noted:  # by votes or by an adopted slice
            self.verified_noted = timeline.verified_seq
            self.catchup.apply(CatchupInput.VERIFIED_MOVED, elapsed_ms)
            if not self.log.votes_wait:
                self.marks_told.moved(elapsed_ms)  # the mark moved: peers count it
        if not self._ack_owed and self.marks_told.owed(self.mark, elapsed_ms, peers):
            self._ack_owed = True
        if self.recovery is not None and self.recovery.done(timeline.verified_seq):
            self.recovery = None  # its reports and its vote count from now on
            self._ack_owed = True
        readable = self.acked_seq
        if readable <= self.announced_seq:
            return False
        timeline.make_readable(readable)
        self.announced_seq = readable
        return True

    @property
    def verified_seq(self) -> int:
        return self.timeline.verified_seq

    @property
    def acked_seq(self) -> int:
        """How far a publish may be acknowledged and a reader served: the verified seq, no
        further than a quorum's marks."""
        return min(self.timeline.verified_seq, self.votes.marked(self.mark))

    @property
    def mark(self) -> int:
        """How far this replica tells its peers it verified the timeline: with ``votes_wait``,
        as far as its log durably records that; otherwise its verified seq (nothing is
        durable, but a peer's vote counted before it retreated is never a mark:
        docs/design.md, "Marks for every fsync")."""
        return self.log.durable_mark if self.log.votes_wait else self.timeline.verified_seq

    def vote(self) -> tuple[int, bytes]:
        """This replica's vote: its stable head, or with ``votes_wait`` its durable head;
        while it recovers (``amnesia``), its verified seq."""
        seq = self._vote_seq()
        digest = self.timeline.digest_at(seq)
        assert digest is not None, "the timeline keeps what it has not yet made durable"
        return seq, digest

    def _vote_seq(self) -> int:
        seq = self.log.vote_seq(self.timeline)
        return seq if self.recovery is None else min(seq, self.timeline.verified_seq)

    # --- the log on disk ----------------------------------------------------------------

    def to_persist(self) -> Persist | None:
        """What the log on disk has yet to be told (the node's flush asks after folding)."""
        return self.log.pending(self.stream, self.timeline, self.dedup.as_logged)

    def persisted(self, generation: int, seq: int, mark: int) -> None:
        """The disk's answer. Only with ``votes_wait`` does it move what an ack tells: the
        vote (the durable head) and the durable mark that acknowledgements wait for; otherwise
        the vote is the stable head and the mark the verified seq, which no disk moves, so
        nothing is said again."""
        if self.log.persisted(generation, seq, mark) and self.log.votes_wait:
            self._ack_owed = True

    def persist_failed(self, sync: bool) -> None:
        """The disk refused the last write (or, with ``sync``, a sync): it is made again
        (``LogCursor.failed``). Without ``votes_wait`` the node held back the ack of the
        turn that wrote it (its vote was not in the page cache): it is owed again, and goes
        out with the next flush's write if the disk takes it."""
        self.log.failed(sync, self.timeline)
        self._ack_owed |= not self.log.votes_wait

    def log_starts_after(self, base_seq: int, chained_seq: int = 0) -> None:
        """The log holds nothing at or below ``base_seq`` (restored, or retention), and
        chains from ``chained_seq`` (compaction)."""
        self.log.based_at(base_seq)
        self.log.chained_seq = chained_seq

    def trim(self, keep_from: int) -> None:
        """Let the timeline drop entries beyond its bounds, but none ``keep_from`` needs."""
        self.timeline.trim(self.kept_from(keep_from))

    def kept_from(self, keep_from: int) -> int:
        """The first seq the timeline must keep: ``keep_from``, and what the vote or the log
        still needs (a refused write is made again from what the log held)."""
        needed = min(self.log.vote_seq(self.timeline), self.log.confirmed_seq)
        return min(keep_from, needed + 1)

    # --- origins: their epochs and cuts -------------------------------------------------

    def suspect(self, origin: int, epoch: int) -> None:
        before = self.lanes[origin]
        if cut.suspect(self.lanes, origin, epoch):
            self._ack_owed = True
            self._took_epoch(origin, before)

    def _took_epoch(self, origin: int, before: Lane | None) -> None:
        """The lane of ``origin`` may have moved on to cut a newer epoch: what the timeline
        holds of that epoch (restored from the log) is held, and its cut report says so."""
        lane = self.lanes.get(origin)
        if lane is not None and lane is not before and lane.state is LaneState.CUTTING:
            lane.contig = max(lane.contig, self.timeline.last_of(origin, lane.epoch))

    def take_restored(self, report: OriginReport) -> None:
        """A restarted replica's log held ``report.origin``'s ``report.epoch`` up to
        ``report.contig`` past its verified mark: a quorum may hold those txs durably, so
        nothing folds past them here without them. The lane of that epoch claims them (gap
        repair fetches them); an epoch not seen here is cut, so that the replicas agree where
        it ends and fetch it whole; a lane that already followed a newer epoch, while this
        replica has folded nothing yet, goes back to cut the restored one first."""
        origin, epoch = report.origin, report.epoch
        lane = self.lanes.get(origin)
        if lane is None:
            return
        mine = origin == self.self_id  # this node's own older epoch, which it may have lost
        if epoch == lane.epoch:
            if lane.state is LaneState.ACTIVE and not mine:
                lane.claim(report.contig, 0)
            return
        if epoch > lane.epoch:
            if not mine:
                self.suspect(origin, epoch)
            return
        if self.heard is not None and (lane.closed is None or lane.closed[0] < epoch):
            self.cut_first(origin, epoch)

    def cut_first(self, origin: int, epoch: int) -> None:
        """Before ``origin``'s lane follows its newer epoch, cut the older ``epoch``, whose
        txs a quorum may hold (a restored tail): the lane goes back to cut it, holding what
        the timeline holds of it, and follows the newer one again once the cut settled
        (``on_tick``; this node's own lane rejoins its epoch). Only a lane that holds
        nothing yet goes back: the replica has folded nothing since it began."""
        lane = self.lanes[origin]
        if lane.state is not LaneState.ACTIVE or lane.queue or lane.early:
            return
        if origin == self.self_id:
            self.rejoin_epoch = lane.epoch
        cutting = Lane(origin, lane.gap.after_ms, lane.cut_grace.after_ms, epoch, LaneState.CUTTING)
        cutting.contig = self.timeline.last_of(origin, epoch)
        self.lanes[origin] = cutting
        self._ack_owed = True

    def follow(self, origin: int, epoch: int) -> None:
        """The origin announced ``epoch`` and is up: make its lane follow it."""
        lane = self.lanes[origin]
        if epoch <= lane.epoch or cut.holds_cut_txs(lane):
            return  # a cut epoch's last txs fold first
        self.lanes[origin] = lane.apply(LaneInput.NEWER_EPOCH, epoch)
        self._ack_owed = True

    def rejoin(self, epoch: int) -> None:
        """This node starts ``epoch`` as an origin (once its lane's cut settled, if it is
        cutting an older epoch of this node)."""
        lane = self.lanes[self.self_id] = self.lanes[self.self_id].apply(LaneInput.REJOINED, epoch)
        self.rejoin_epoch = epoch if lane.epoch < epoch else 0
        self._ack_owed = True

    def reports(self) -> tuple[OriginReport, ...]:
        """The cut reports for the next ack; reports owed to a peer are sent once."""
        found = cut.reports(self.lanes, self.owed_reports)
        self.owed_reports.clear()
        if self.recovery is not None:
            found = ()  # it holds what it holds since it started: not evidence for a cut
        if self.restored_tail:
            if self.verified_seq >= self.restored_head:
                self.restored_tail = ()
            return (*found, *self.restored_tail)
        return found

    # --- upkeep -------------------------------------------------------------------------

    def on_tick(self, elapsed_ms: int, peers: PeerStates) -> Upkeep:
        """Timers of this stream: cuts, gap repair, catching up."""
        for origin, deferring in list(self.lanes.items()):  # suspicions it deferred
            if deferring.newer_cut and not cut.holds_cut_txs(deferring):
                self.suspect(origin, deferring.take_newer_cut())
        for origin, (up, epoch) in peers.items():
            lane = self.lanes.get(origin)
            if lane is not None and up and epoch > lane.epoch:
                self.follow(origin, epoch)
        live = [r for r in self.peers if peers.get(r, (False, 0))[0]]
        voters = {*live, self.self_id}
        settled, needs = cut.settle(
            self.lanes,
            self.self_id,
            voters,
            self.quorum,
            self.timeline.head_seq,
            elapsed_ms,
            counts_itself=self.recovery is None,
        )
        if settled:
            self._ack_owed = True
        if self.marks_told.overdue(elapsed_ms):
            self._ack_owed = True  # the peers' own marks did not come: this one is told
        own = self.lanes[self.self_id]
        if self.rejoin_epoch and own.state is LaneState.CUT and not own.queue:
            if own.epoch < self.rejoin_epoch:
                self.rejoin(self.rejoin_epoch)  # the restored epoch of this node is cut
            else:  # peers cut the epoch it was to rejoin: it starts a new one (``own_epoch_cut``)
                self.rejoin_epoch = 0
        if self.catchup.synced:
            needs += repair.open_gaps(self.lanes, self.self_id, self.timeline.head_seq, elapsed_ms)
        repairs = tuple(n for n in needs if self.asks.allow_repair(n[0], elapsed_ms))
        verified = self.verified_seq
        view = PeerView(
            live=len(live),
            verified_known=sum(1 for r in live if r in self.votes.verified),
            any_verified=any(self.votes.verified.get(r, 0) for r in live),
            verified_ahead=self.votes.verified_ahead_of(verified, live),
            heads_ahead=self.votes.ahead_of(verified, live),
        )
        tail = self.timeline.head_seq > verified
        action = self.catchup.on_tick(elapsed_ms, view, self.quorum, tail)
        self._ack_owed |= action is CatchupAction.GENESIS
        if action is CatchupAction.REFOLD:
            self._ack_owed = True
            return Upkeep(repairs, refolded=self.rebuild.refold(elapsed_ms))
        if action is CatchupAction.SYNC and self.asks.sync.allow(elapsed_ms):
            vouched = self.vouchers.next_ask()
            after = 0 if not self.catchup.synced else verified
            if self.catchup.state is CatchupState.DIVERGED:  # peers may have given up a tail
                timeline = self.timeline  # we verified but never acknowledged
                after = max(timeline.readable_seq, timeline.trimmed_seq)
            after = vouched if vouched is not None else after
            return Upkeep(repairs, sync_after=after)
        return Upkeep(repairs)

    def at_rest(self, peers: PeerStates) -> bool:
        """Nothing left to do until something arrives: no timer of this stream can fire."""
        timeline = self.timeline
        if self.catchup.state is not CatchupState.SYNCED or self._ack_owed:
            return False
        if self.marks_told.waits_since is not None:
            return False  # a tick may have to tell the mark
        head, verified = timeline.head_seq, timeline.verified_seq
        if head != verified or verified != self.announced_seq:
            return False
        if self.log.vote_seq(timeline) != head or self.log.written_seq != head:
            return False
        for origin, lane in self.lanes.items():
            if lane.queue or lane.early or lane.newer_cut or lane.claimed_last > lane.contig:
                return False
            if origin == self.self_id:
                if lane.state is not LaneState.ACTIVE:
                    return False
                continue
            up, epoch = peers.get(origin, (False, 0))
            if up and (lane.state is not LaneState.ACTIVE or lane.epoch != epoch):
                return False
            if not up and lane.state not in (LaneState.CUT, LaneState.NEW):
                return False
            if up and self.votes.heads.get(origin, 0) > head:
                return False  # we may be behind: the stuck clock must run

        return not any(self.votes.pending.values())

    def unheard(self, claim: int, peers: PeerStates) -> bool:
        """Whether a live peer may not hold this node's last tx here (``claim``): it is not
        folded here yet, or a live peer votes below it (below our head, if the fold skipped
        it as a retry). A peer that lost it and is at rest learns of it from nothing else."""
        if self.lanes[self.self_id].queue:
            return True
        target = min(claim, self.timeline.head_seq)
        heads = self.votes.heads
        return any(peers.get(r, (False, 0))[0] and heads.get(r, 0) < target for r in self.peers)

    # --- answering peers -----------------------------------------------------------------

    def answer(
        self, ask: RepairRequest | SyncRequest, limit: int
    ) -> RepairData | SyncData | LogSync | None:
        """What to send a peer that asks for txs (repair) or the verified timeline (sync);
        a sync from below the memory ring is answered from the log (``LogSync``)."""
        if isinstance(ask, RepairRequest):
            txs, complete = self.txs_of(
                ask.origin, ask.origin_epoch, ask.after_seq, ask.upto_seq, limit
            )
            if not txs and not complete:
                return None
            return RepairData(
                self.stream,
                self.self_id,
                ask.origin,
                ask.origin_epoch,
                tuple(txs),
                ask.after_seq,
                complete,
            )
        trimmed = self.timeline.trimmed_seq
        chained = max(self.log.base_seq, self.log.chained_seq)  # a peer folds only a chain
        if chained <= ask.after_seq < trimmed and self.catchup.synced:
            return LogSync(self.stream, ask.requester, ask.after_seq, trimmed, limit)
        found = self.sync_slice(ask.after_seq, limit)
        return SyncData(self.stream, self.self_id, ask.requester, *found) if found else None

    def take_sync(
        self, data: SyncData, elapsed_ms: int, limit: int
    ) -> tuple[SliceOutcome, SyncRequest | None]:
        """Adopt a peer's slice: (what happened, the next ask when more is to come)."""
        base, base_digest = data.base_seq, data.base_digest
        outcome = self.adopt(
            elapsed_ms,
            data.sender,
            base,
            base_digest,
            data.txs,
            data.digests,
            data.dedup,
            data.base_count,
        )
        progress = isinstance(outcome, SliceAdopted | HeldVerified)
        ahead = self.votes.verified_ahead_of(self.verified_seq, self.peers)
        if not progress or (len(data.txs) < limit and not ahead):  # a slice cut by bytes
            return outcome, None  # is shorter than the limit: more follows while peers are ahead
        self.asks.sync.hold(elapsed_ms)
        return outcome, SyncRequest(self.stream, self.self_id, self.verified_seq)

    # --- rebuilding the timeline ---------------------------------------------------------

    def restore(
        self,
        base_seq: int,
        base_digest: bytes,
        txs: tuple[Tx, ...],
        digests: tuple[bytes, ...],
        verified_seq: int,
        dedup_keys: DedupKeys,
        base_count: int = 0,
    ) -> None:
        """Start from this replica's own log (``TimelineRebuild.restore``); its first ack
        is paced (``StreamSet.restored``)."""
        self.rebuild.restore(
            base_seq, base_digest, txs, digests, verified_seq, dedup_keys, base_count
        )
        verified = self.verified_seq
        last: dict[int, tuple[int, int]] = {}  # origin -> (epoch, seq) of its last tx past it
        for tx in txs:
            if tx.seq > verified and (tx.epoch, tx.seq) > last.get(tx.origin, (0, 0)):
                last[tx.origin] = (tx.epoch, tx.seq)
        self.restored_tail = tuple(
            OriginReport(origin, epoch, seq, restored=True)
            for origin, (epoch, seq) in sorted(last.items())
        )
        self.restored_head = self.timeline.head_seq
        own = last.get(self.self_id)
        if own is not None and own[0] < self.lanes[self.self_id].epoch:
            self.cut_first(self.self_id, own[0])  # the txs of its last life end first

    def adopt(
        self,
        elapsed_ms: int,
        sender: int,
        base_seq: int,
        base_digest: bytes,
        txs: tuple[Tx, ...],
        digests: tuple[bytes, ...],
        dedup_keys: DedupKeys,
        base_count: int = 0,
    ) -> SliceOutcome:
        """Take a peer's verified slice (``TimelineRebuild.adopt``)."""
        outcome = self.rebuild.adopt(
            elapsed_ms, sender, base_seq, base_digest, txs, digests, dedup_keys, base_count
        )
        if outcome is not None and not isinstance(outcome, SliceRefused):
            self._ack_owed = True
        return outcome

    def sync_slice(self, after_seq: int, limit: int) -> SyncSlice | None:
        return self.rebuild.sync_slice(after_seq, limit)

    # --- repair -------------------------------------------------------------------------

    def take_repair(self, data: RepairData) -> int:
        """A peer's answer to a repair ask: the highest seq taken (0: nothing new)."""
        lane = self.lanes.get(data.origin)
        if lane is None or lane.epoch != data.origin_epoch:
            return 0
        head = self.timeline.head_seq
        held_from = max(lane.contig, head)
        ours = [tx for tx in data.txs if tx.origin == data.origin and tx.epoch == lane.epoch]
        taken = [tx.seq for tx in ours if self.take(tx)]
        if taken:
            self._ack_owed = True
        lane = self.lanes[data.origin]
        whole = held_from >= data.after_seq and all(tx.seq <= max(lane.contig, head) for tx in ours)
        if whole and data.complete_upto and lane.cut_at is not None:
            # every tx of the epoch up to complete_upto is held now: a cut up to there needs
            # no more repair (nobody may hold a tx there; the cut can be above the last one)
            reach = min(data.complete_upto, lane.cut_at)
            if lane.complete_upto(reach):
                self._ack_owed = True
                return reach
        return max(taken, default=0)

    def txs_of(
        self, origin: int, epoch: int, after_seq: int, upto_seq: int, limit: int
    ) -> tuple[list[Tx], int]:
        return repair.txs_held(
            self.lanes, self.timeline, self.dedup, origin, epoch, after_seq, upto_seq, limit
        )
