"""One replica's state for one stream: ordering, stability, digests, votes, verification.

How this works (the argument is in docs/design.md):

1. Every replica of the stream may originate txs; each origin has a ``Lane`` here.
2. The stable watermark is the minimum over lanes of their contribution: no tx at or below
   it can still arrive. Txs at or below it are merged in seq order, deduplicated by
   (producer id, msg id), and folded into the rolling digest: the *stable* timeline.
3. A replica's vote is its stable head ``(seq, digest)``, sent in every ``StreamAck``. A peer's
   vote matches ours at ``s`` when its digest at its head equals ours there; since digests
   chain, a match at ``s`` proves the whole prefix up to ``s``.
4. ``verified_seq`` is the highest seq that a quorum of the stream's replicas (this one
   included) matched. Only the verified prefix is delivered, and a coordinator answers its
   producer only once the producer's seq is verified.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass

from relay.core.digest import fold
from relay.core.flake import seq_unix_ms
from relay.core.lane import Lane, LaneState
from relay.core.messages import OriginReport, Tx
from relay.core.timeline import Timeline

VOTES_PENDING_MAX = 64  # votes ahead of our head kept per peer until our head catches up


@dataclass(frozen=True, slots=True)
class StreamLimits:
    buffer_txs_max: int
    dedup_window_ms: int
    dedup_keys_max: int


class StreamReplica:
    def __init__(
        self,
        stream: str,
        self_id: int,
        replicas: tuple[int, ...],
        quorum: int,
        limits: StreamLimits,
    ) -> None:
        assert self_id in replicas
        self.stream = stream
        self.self_id = self_id
        self.replicas = replicas
        self.quorum = quorum
        self.limits = limits
        self.lanes: dict[int, Lane] = {r: Lane(r, 0, LaneState.WAITING) for r in replicas}
        self.timeline = Timeline(stream, limits.buffer_txs_max)
        self.matched: dict[int, int] = {r: 0 for r in replicas if r != self_id}
        self.pending_votes: dict[int, deque[tuple[int, bytes]]] = {
            r: deque(maxlen=VOTES_PENDING_MAX) for r in replicas if r != self_id
        }
        self.dedup: dict[tuple[str, int], int] = {}  # key -> seq, over the stable timeline
        self.dedup_order: deque[tuple[int, tuple[str, int]]] = deque()  # (seq, key)
        self.pending_keys: dict[tuple[str, int], int] = {}  # key -> seq, not yet stable
        self.skipped: dict[int, tuple[Tx, int]] = {}  # duplicate seq -> (tx, original seq)
        self.needs_ack = False
        self.mismatches = 0
        self.late_txs = 0
        # anti-entropy: a replica is *synced* once it knows where the stream's history is
        self.synced = False
        self.peer_heads: dict[int, int] = {}  # latest vote head per peer
        self.peer_verified: dict[int, int] = {}  # latest verified seq per peer
        self.disagrees = False  # a stable peer vote contradicted our stable timeline
        self.verified_moved_ms = 0

    # --- transactions -------------------------------------------------------------------

    def take(self, tx: Tx) -> bool:
        """A tx of the origin's current epoch arrived (from the origin or a repair)."""
        lane = self.lanes[tx.origin]
        if not lane.accept(tx, self.timeline.head_seq):
            return False
        if tx.producer_id:
            self.pending_keys[(tx.producer_id, tx.msg_id)] = tx.seq
        return True

    def lookup_key(self, producer_id: str, msg_id: int) -> int | None:
        """The seq that already carries (producer id, msg id), stable or pending, if any."""
        key = (producer_id, msg_id)
        seq = self.dedup.get(key)
        return seq if seq is not None else self.pending_keys.get(key)

    def watermark(self) -> int:
        """Admit waiting origins whose floor is above the stable head, then return the mark.

        An admitted origin only ever sends txs above its floor, so nothing it sends can land
        at or below what this replica already made stable.
        """
        head = self.timeline.head_seq
        for lane in self.lanes.values():
            if lane.state is LaneState.WAITING and lane.epoch and lane.promise >= max(head, 1):
                lane.state = LaneState.ACTIVE
                while lane.queue and lane.queue[0].seq <= head:
                    lane.queue.popleft()
                    self.late_txs += 1
        bounds = [c for c in (lane.contribution() for lane in self.lanes.values()) if c is not None]
        return min(bounds) if bounds else head

    def stabilize(self, now_ms: int) -> bool:
        """Fold every tx at or below the watermark into the timeline; True if the head moved."""
        if not self.synced:
            return False
        mark = self.watermark()
        ready: list[Tx] = []
        for lane in self.lanes.values():
            if lane.state is LaneState.WAITING:
                continue
            queue = lane.queue
            while queue and queue[0].seq <= mark:
                ready.append(queue.popleft())
        if not ready:
            return False
        if len(ready) > 1:
            ready.sort(key=_seq_of)
        timeline = self.timeline
        head_seq = timeline.head_seq
        digest = timeline.head_digest
        folded: list[Tx] = []
        digests: list[bytes] = []
        pending_keys, dedup, dedup_order = self.pending_keys, self.dedup, self.dedup_order
        for tx in ready:
            seq = tx.seq
            if seq <= head_seq:
                self.late_txs += 1  # an origin broke its promise; never reorder the past
                continue
            if tx.producer_id:
                key = (tx.producer_id, tx.msg_id)
                pending_keys.pop(key, None)
                original = dedup.get(key)
                if original is not None:
                    self.skipped[seq] = (tx, original)
                    continue
                dedup[key] = seq
                dedup_order.append((seq, key))
            digest = fold(digest, seq, tx.origin, tx.payload)
            folded.append(tx)
            digests.append(digest)
            head_seq = seq
        moved = bool(folded)
        if moved:
            timeline.extend(folded, digests)
        self._evict_dedup(head_seq)
        if moved:
            self.needs_ack = True
            self._recheck_pending_votes()
            self.recompute_verified()
        return moved

    def _evict_dedup(self, head_seq: int) -> None:
        horizon = seq_unix_ms(head_seq) - self.limits.dedup_window_ms
        order = self.dedup_order
        while order and (
            len(order) > self.limits.dedup_keys_max or seq_unix_ms(order[0][0]) < horizon
        ):
            seq, key = order.popleft()
            if self.dedup.get(key) == seq:
                del self.dedup[key]
        if len(self.skipped) > self.limits.dedup_keys_max:
            for seq in sorted(self.skipped)[: len(self.skipped) // 2]:
                del self.skipped[seq]

    # --- votes and verification ---------------------------------------------------------

    def vote(self, sender: int, head_seq: int, head_digest: bytes) -> None:
        """A peer's stable head; count it if it matches our timeline."""
        if sender not in self.matched:
            return
        self.peer_heads[sender] = head_seq
        if head_seq <= self.matched[sender] or not self.synced:
            return
        if head_seq <= self.timeline.head_seq:
            self._match(sender, head_seq, head_digest)
        else:
            self.pending_votes[sender].append((head_seq, head_digest))

    def _match(self, sender: int, seq: int, digest: bytes) -> None:
        ours = self.timeline.digest_at(seq)
        if ours is None and seq < self.timeline.trimmed_seq:
            return  # too old to judge and too old to matter
        if ours == digest:
            if seq > self.matched[sender]:
                self.matched[sender] = seq
        else:
            self.mismatches += 1
            self.disagrees = True

    def _recheck_pending_votes(self) -> None:
        head = self.timeline.head_seq
        for sender, votes in self.pending_votes.items():
            while votes and votes[0][0] <= head:
                seq, digest = votes.popleft()
                self._match(sender, seq, digest)

    def recompute_verified(self) -> bool:
        marks = sorted([self.timeline.head_seq, *self.matched.values()], reverse=True)
        verified = marks[self.quorum - 1]
        if verified > self.timeline.verified_seq:
            self.timeline.verify_upto(verified)
            self.disagrees = False
            return True
        return False

    def take_vote(self, sender: int, head_seq: int, head_digest: bytes) -> bool:
        """Record a vote; True if the verified point moved."""
        self.vote(sender, head_seq, head_digest)
        return self.recompute_verified()

    @property
    def verified_seq(self) -> int:
        return self.timeline.verified_seq

    # --- the cut of a suspected origin --------------------------------------------------

    def suspect(self, origin: int, epoch: int) -> None:
        """Freeze ``origin``'s ``epoch`` here and start agreeing where it ends."""
        lane = self.lanes[origin]
        if epoch < lane.epoch or (
            lane.state in (LaneState.CUTTING, LaneState.CUT) and (lane.epoch == epoch)
        ):
            return
        if lane.epoch != epoch:
            lane.restart(epoch, LaneState.CUTTING)
        else:
            lane.state = LaneState.CUTTING
            lane.cut_reports = {}
            lane.cut_at = None
            lane.cut_final = False
            lane.cut_since_ms = None
        self.needs_ack = True

    def take_report(self, reporter: int, report: OriginReport) -> None:
        if report.origin not in self.lanes or reporter not in self.lanes:
            return
        lane = self.lanes[report.origin]
        if report.epoch > lane.epoch or (
            report.epoch == lane.epoch and lane.state in (LaneState.ACTIVE, LaneState.WAITING)
        ):
            self.suspect(report.origin, report.epoch)
        if lane.epoch != report.epoch:
            return
        if lane.state is LaneState.CUTTING:
            if report.settled and not lane.cut_final:
                # a replica already decided where the epoch ends: follow it, so that a
                # replica that was away (the suspect itself, say) ends it at the same place
                lane.cut_at = report.contig
                lane.cut_final = True
            else:
                lane.cut_reports[reporter] = report.contig

    def settle_cuts(
        self, now_ms: int, up: set[int], grace_ms: int
    ) -> list[tuple[int, int, int, int]]:
        """Advance the cuts: settled once every live replica reported, or a quorum did and
        ``grace_ms`` passed (a replica that restarted knows nothing of the epoch to report).
        The cut is the highest report: every tx a quorum held is in it.

        Returns repair needs as (origin, epoch, after, upto) for cuts beyond what we hold.
        """
        needs: list[tuple[int, int, int, int]] = []
        head = self.timeline.head_seq
        for lane in self.lanes.values():
            if lane.state is not LaneState.CUTTING:
                continue
            if lane.cut_since_ms is None:
                lane.cut_since_ms = now_ms
            if lane.cut_final and lane.cut_at is not None:
                cut = lane.cut_at
            else:
                lane.cut_reports[self.self_id] = lane.contig
                # every live replica, the suspect too if it is back: it holds all it sent
                voters = {r for r in self.replicas if r in up} | {self.self_id}
                reported = voters & lane.cut_reports.keys()
                if len(reported) < self.quorum:
                    continue
                if reported != voters and now_ms - lane.cut_since_ms < grace_ms:
                    continue
                cut = max(lane.cut_reports[r] for r in reported)
                lane.cut_at = cut
                lane.cut_final = True
            if lane.contig >= cut or cut <= head:  # at or below the head all is settled
                while lane.queue and lane.queue[-1].seq > cut:
                    lane.queue.pop()
                lane.contig = min(max(lane.contig, min(cut, head)), cut)
                lane.state = LaneState.CUT
                lane.early.clear()
                self.needs_ack = True
            else:
                needs.append((lane.origin, lane.epoch, lane.contig, cut))
        return needs

    def reports(self) -> tuple[OriginReport, ...]:
        """What we hold of every epoch being cut or cut, so late replicas can settle too."""
        found = []
        for lane in self.lanes.values():
            if lane.state is LaneState.CUTTING and not lane.cut_final:
                found.append(OriginReport(lane.origin, lane.epoch, lane.contig))
            elif lane.state in (LaneState.CUTTING, LaneState.CUT) and lane.cut_at is not None:
                found.append(OriginReport(lane.origin, lane.epoch, lane.cut_at, settled=True))
            elif lane.closed is not None:
                found.append(OriginReport(lane.origin, *lane.closed, settled=True))
        return tuple(found)

    # --- anti-entropy: catching up with the verified timeline ---------------------------

    def sync_wanted(self, now_ms: int, up: set[int], stuck_after_ms: int) -> bool:
        """Whether to ask peers for their verified timeline now.

        An unsynced replica holding nothing becomes synced at genesis once every live peer
        reports that nothing is verified yet (then nothing was delivered or acknowledged, and
        gap repair fetches every tx from the peers), and asks otherwise. A synced one asks
        when a peer's vote contradicts its timeline, or when peers are ahead and its verified
        seq has not moved for ``stuck_after_ms`` (a gap no peer can repair any more).
        """
        peers = [r for r in self.replicas if r != self.self_id and r in up]
        heads = [self.peer_heads[r] for r in peers if r in self.peer_heads]
        if not self.synced:
            verified = [self.peer_verified[r] for r in peers if r in self.peer_verified]
            if any(verified):
                return True
            if len(verified) == len(peers) and len(verified) + 1 >= self.quorum:
                self.synced = True
                self.verified_moved_ms = now_ms
            return False
        if self.disagrees:
            return True
        ahead = any(h > self.timeline.verified_seq for h in heads)
        if not ahead:
            self.verified_moved_ms = now_ms
            return False
        return now_ms - self.verified_moved_ms >= stuck_after_ms

    def rebuild_wanted(self, now_ms: int, up: set[int], stuck_after_ms: int) -> bool:
        """No quorum on a digest: peers hold other timelines past our verified seq, none of
        them verified further, and nothing moved for twice ``stuck_after_ms``."""
        if not self.synced or now_ms - self.verified_moved_ms < 2 * stuck_after_ms:
            return False
        peers = [r for r in self.replicas if r != self.self_id and r in up]
        verified = self.timeline.verified_seq
        if any(self.peer_verified.get(r, 0) > verified for r in peers):
            return False  # someone can sync us
        return any(self.peer_heads.get(r, 0) > verified for r in peers) or (
            self.timeline.head_seq > verified
        )

    def rebuild(self, now_ms: int) -> int:
        """Give up the stable but unverified tail: requeue it and fold again from the
        verified seq, fetching what peers hold by gap repair, so that replicas that diverged
        without a quorum converge on the same txs in the same order. Nothing unverified was
        ever delivered or acknowledged. Returns how many txs were requeued."""
        verified = self.timeline.verified_seq
        dropped = self._truncate(verified, False, b"")
        self._reposition_lanes(dropped)
        self.disagrees = False
        self.verified_moved_ms = now_ms
        self.needs_ack = True
        return len(dropped)

    def sync_slice(self, after_seq: int, limit: int) -> tuple[int, bytes, list[int], bool] | None:
        """What to answer a sync request: (base seq, base digest, indexes, is a snapshot)."""
        timeline = self.timeline
        if not self.synced or timeline.verified_seq <= after_seq:
            return None
        base_digest = timeline.digest_at(after_seq) if after_seq else None
        if after_seq == 0 and timeline.trimmed_seq == 0:
            base_digest = timeline.trimmed_digest  # genesis
        snapshot = base_digest is None
        base_seq = timeline.trimmed_seq if snapshot else after_seq
        start, indexes = timeline.read_verified(base_seq, limit)
        return base_seq, timeline.digest_before(start), indexes, snapshot

    def adopt(
        self,
        now_ms: int,
        base_seq: int,
        base_digest: bytes,
        txs: tuple[Tx, ...],
        digests: tuple[bytes, ...],
        dedup: tuple[tuple[str, int, int], ...],
    ) -> str:
        """Take a peer's verified slice; returns what happened (for the operator)."""
        timeline = self.timeline
        anchor = timeline.verified_seq if self.synced else 0
        chain = base_digest
        for tx, digest in zip(txs, digests, strict=True):
            chain = fold(chain, tx.seq, tx.origin, tx.payload)
            if chain != digest:
                return f"refused a sync slice whose digests do not chain at seq {tx.seq}"
        reset = not self.synced or base_seq > anchor or timeline.digest_at(base_seq) is None
        if reset and self.synced and base_seq < anchor:
            return "refused a sync slice older than what this replica holds"
        if not reset:
            if timeline.digest_at(base_seq) != base_digest:
                return "refused a sync slice that contradicts this replica's verified timeline"
            skip = [i for i, tx in enumerate(txs) if tx.seq <= anchor]
            for i in skip:
                if timeline.digest_at(txs[i].seq) != digests[i]:
                    return "refused a sync slice that contradicts this replica's verified timeline"
            txs, digests = txs[len(skip) :], digests[len(skip) :]
            if not txs:
                return ""
        requeue = self._truncate(base_seq if reset else anchor, reset, base_digest)
        if reset:
            self.dedup.clear()
            self.dedup_order.clear()
            for pid, mid, seq in dedup:
                self.dedup[(pid, mid)] = seq
                self.dedup_order.append((seq, (pid, mid)))
        for tx in txs:
            if tx.producer_id:
                key = (tx.producer_id, tx.msg_id)
                self.dedup[key] = tx.seq
                self.dedup_order.append((tx.seq, key))
        timeline.extend(list(txs), list(digests))
        timeline.verify_upto(timeline.head_seq)
        self._reposition_lanes(requeue)
        self.synced = True
        self.disagrees = False
        self.verified_moved_ms = now_ms
        self.needs_ack = True
        return f"adopted {len(txs)} verified txs up to seq {timeline.head_seq}" + (
            f" (snapshot from seq {base_seq})" if reset else ""
        )

    def _truncate(self, keep_upto: int, reset: bool, base_digest: bytes) -> list[Tx]:
        """Cut the stable timeline after ``keep_upto``; the txs cut off, for requeueing."""
        timeline = self.timeline
        if reset:
            dropped = list(timeline.txs)
            timeline.seqs.clear()
            timeline.digests.clear()
            timeline.txs.clear()
            timeline.trimmed_seq = keep_upto
            timeline.trimmed_digest = base_digest
            timeline.verified_seq = keep_upto
        else:
            cut = bisect_right(timeline.seqs, keep_upto)
            dropped = timeline.txs[cut:]
            del timeline.seqs[cut:], timeline.digests[cut:], timeline.txs[cut:]
        while self.dedup_order and self.dedup_order[-1][0] > keep_upto:
            seq, key = self.dedup_order.pop()
            if self.dedup.get(key) == seq:
                del self.dedup[key]
        for seq in [s for s in self.skipped if s > keep_upto]:
            dropped.append(self.skipped.pop(seq)[0])
        for peer, seq in self.matched.items():
            self.matched[peer] = min(seq, keep_upto)
        return dropped

    def _reposition_lanes(self, dropped: list[Tx]) -> None:
        """After the timeline changed under them, put every lane right after its last stable
        tx of its epoch and take back every held tx above the new head."""
        timeline = self.timeline
        head = timeline.head_seq
        held = list(dropped)
        for lane in self.lanes.values():
            held.extend(lane.queue)
            held.extend(lane.early.values())
            lane.queue.clear()
            lane.early.clear()
            lane.contig = head  # everything at or below the head is settled now
            if lane.cut_at is not None and lane.contig > lane.cut_at:
                lane.cut_at = lane.contig
        self.pending_keys.clear()
        for tx in sorted(held, key=_seq_of):
            if tx.seq > head:
                self.take(tx)

    # --- repair answers -----------------------------------------------------------------

    def txs_of(
        self, origin: int, epoch: int, after_seq: int, upto_seq: int, limit: int
    ) -> list[Tx]:
        """What we hold of ``origin``'s ``epoch`` in ``(after_seq, upto_seq]``, in seq order."""
        lane = self.lanes.get(origin)
        if lane is None:
            return []
        found = [tx for tx in self.timeline.txs_between(after_seq, upto_seq) if tx.origin == origin]
        found.extend(
            tx
            for tx, _ in self.skipped.values()
            if tx.origin == origin and after_seq < tx.seq <= upto_seq
        )
        if lane.epoch == epoch:
            found.extend(tx for tx in lane.queue if after_seq < tx.seq <= upto_seq)
        found.sort(key=_seq_of)
        return found[:limit]


def _seq_of(tx: Tx) -> int:
    return tx.seq
