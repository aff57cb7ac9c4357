"""How a replica's stable timeline is rebuilt: from a peer's verified slice (sync), from its
own log on disk (restore), or by giving up an unverified tail no quorum agreed on (refold).

How this works: each path replaces part of the timeline and then *repositions* the lanes: every
lane continues right after the new head, and every tx held above it is taken back, so that
nothing a peer may still need is lost and folding resumes from the new head. Each cut or reset
tells the log cursor, so the log on disk follows the timeline. A ``StreamReplica`` owns one
``TimelineRebuild`` over its own parts, and owes its peers an ack after each path (``adopt``
says what it took, ``refold`` how many txs it gave up).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from relay.core.catchup import Catchup, CatchupInput, Vouchers, slice_for, slice_problem
from relay.core.dedup import DedupIndex
from relay.core.durable import LogCursor
from relay.core.lane import Lane
from relay.core.messages import ANSWER_BYTES_MAX, KeyRecord, Tx, seq_of, within_bytes
from relay.core.timeline import Timeline
from relay.core.votes import Votes

DedupKeys = tuple[KeyRecord, ...]
SyncSlice = tuple[int, bytes, tuple[Tx, ...], tuple[bytes, ...], DedupKeys, int]
CONTRADICTS = "a sync slice that contradicts this replica's verified timeline"


@dataclass(frozen=True, slots=True)
class SliceRefused:
    """A peer's sync slice breaks the protocol: it does not chain, contradicts what this
    replica verified, or is older than what it holds."""

    why: str


@dataclass(frozen=True, slots=True)
class SliceAdopted:
    txs: int  # verified txs taken from the slice
    head_seq: int
    snapshot_from: int | None  # the base of a slice that replaced the whole timeline

    def __str__(self) -> str:
        text = f"adopted {self.txs} verified txs up to seq {self.head_seq}"
        if self.snapshot_from is None:
            return text
        return f"{text} (snapshot from seq {self.snapshot_from})"


@dataclass(frozen=True, slots=True)
class HeldVerified:
    """The slice verified txs this replica held already."""

    txs: int
    upto_seq: int

    def __str__(self) -> str:
        return f"verified {self.txs} held txs up to seq {self.upto_seq}"


# None: nothing taken yet (the slice waits for a second peer's voice, or adds nothing)
SliceOutcome = SliceRefused | SliceAdopted | HeldVerified | None


class TimelineRebuild:
    def __init__(
        self,
        lanes: dict[int, Lane],
        timeline: Timeline,
        dedup: DedupIndex,
        votes: Votes,
        catchup: Catchup,
        vouchers: Vouchers,
        log: LogCursor,
        retake: Callable[[Tx], bool],
    ) -> None:
        self.lanes = lanes
        self.timeline = timeline
        self.dedup = dedup
        self.votes = votes
        self.catchup = catchup
        self.vouchers = vouchers
        self.log = log
        self.retake = retake  # the replica takes back a tx held above the new head

    def restore(
        self,
        base_seq: int,
        base_digest: bytes,
        txs: tuple[Tx, ...],
        digests: tuple[bytes, ...],
        verified_seq: int,
        dedup_keys: DedupKeys,
        base_count: int,
    ) -> None:
        """Start from this replica's own log (after a restart): its stable timeline as the
        disk holds it, verified as far as the log recorded (``base_count``: the txs of the
        stream's history up to ``base_seq``). What is past the verified seq is stable but
        unverified, and the votes settle it as they would have."""
        problem = slice_problem(base_digest, txs, digests)
        assert not problem, problem  # the shell re-checked the chain when it read the log
        timeline = self.timeline
        timeline.restart_at(base_seq, base_digest, base_count)
        self.dedup.restore(dedup_keys)
        self.dedup.add_verified(txs, digests)
        if txs:
            timeline.extend(list(txs), list(digests))
        timeline.verify_upto(min(max(verified_seq, base_seq), timeline.head_seq))
        self.log.restored(timeline.head_seq, timeline.verified_seq)
        self._reposition([])
        self.catchup.apply(CatchupInput.ADOPTED, 0)

    def sync_slice(self, after_seq: int, limit: int) -> SyncSlice | None:
        """What to answer a sync request after ``after_seq``: (base seq, base digest, txs,
        digests, dedup keys, base count); a snapshot carries the keys of the window before its
        base, and every slice the count of txs of the stream's history up to its base."""
        if not self.catchup.synced:
            return None
        found = slice_for(self.timeline, after_seq, limit)
        if found is None:
            return None
        base_seq, base_digest, indexes, snapshot = found
        timeline = self.timeline
        held = timeline.txs
        indexes = indexes[: within_bytes([held[i] for i in indexes], ANSWER_BYTES_MAX)]
        return (
            base_seq,
            base_digest,
            tuple(timeline.txs[i] for i in indexes),
            tuple(timeline.digests[i] for i in indexes),
            self.dedup.keys_upto(base_seq) if snapshot else (),
            timeline.count_at(base_seq),
        )

    def adopt(
        self,
        elapsed_ms: int,
        sender: int,
        base_seq: int,
        base_digest: bytes,
        txs: tuple[Tx, ...],
        digests: tuple[bytes, ...],
        dedup_keys: DedupKeys,
        base_count: int,
    ) -> SliceOutcome:
        """Take a peer's verified slice; returns what happened. A slice
        extends a verified digest this replica holds; or, where it holds none there, its base
        (with ``base_count``, the txs of the stream's history up to it) is genesis (nothing
        held is replaced) or vouched for by enough peers (``Vouchers``)."""
        problem = slice_problem(base_digest, txs, digests)
        if problem:
            return SliceRefused(problem)
        timeline = self.timeline
        synced = self.catchup.synced
        anchor = timeline.verified_seq if synced else 0
        held_base = timeline.digest_at(base_seq)
        reset = not synced or base_seq > anchor or held_base is None
        if reset and synced and base_seq < anchor:
            return SliceRefused("a sync slice older than what this replica holds")
        from_genesis = (
            not synced
            and base_seq == 0
            and base_digest == timeline.trimmed_digest
            and not base_count
        )
        base = (base_seq, base_digest, base_count)
        if reset and not from_genesis and not self.vouchers.vouch(sender, *base):
            return None  # not adopted until another peer offers the same base
        if not reset:
            if held_base != base_digest:
                # peers verified another history below our verified seq: after a power loss of
                # every node, or in the open gap of docs/design.md (Anti-entropy), they may
                # hold one without txs this replica verified and never made readable.
                # Diverged, it asks again from what it made readable, where the two join
                # (``_rewind``); a replica behind every vote would otherwise ask from its
                # verified seq, be refused there, and never learn it diverged
                self.catchup.apply(CatchupInput.CONTRADICTED, elapsed_ms)
                return SliceRefused(CONTRADICTS)
            agree = self._agreeing(txs, digests, anchor)
            joint_seq = txs[agree - 1].seq if agree else base_seq
            joint = digests[agree - 1] if agree else base_digest
            txs, digests = txs[agree:], digests[agree:]
            if not txs:  # all we hold, as far as it goes: the next sync asks on from there
                self.vouchers.ask_next_after(joint_seq)  # (a diverged replica walks a peer's log
                return None  # up to where the histories part, or past its own verified seq)
            if joint_seq != anchor:  # the slice leaves our verified history after joint_seq
                if joint_seq < timeline.readable_seq:
                    return SliceRefused(CONTRADICTS)
                if not self.vouchers.vouch(sender, joint_seq, joint, timeline.count_at(joint_seq)):
                    return None  # not adopted until another peer offers the same
                self._rewind(joint_seq)
                anchor = joint_seq
            held = self._held_prefix(txs, digests)
            if held:  # our own tail holds that much of the slice: it stays, and our votes
                timeline.verify_upto(txs[held - 1].seq)
                anchor = timeline.verified_seq
                txs, digests = txs[held:], digests[held:]
            if not txs:
                self.catchup.apply(CatchupInput.ADOPTED, elapsed_ms)
                return HeldVerified(held, anchor)
        if reset:
            requeue = timeline.restart_at(base_seq, base_digest, base_count)
            self.log.restart(base_seq)
            requeue += self.dedup.truncate(base_seq)
            self.dedup.restore(dedup_keys)
            self.votes.forget_after(base_seq)
        else:
            requeue = self._truncate(anchor)
        self.dedup.add_verified(txs, digests)
        if txs:  # a snapshot of a peer that holds nothing past its base has none
            timeline.extend(list(txs), list(digests))
        timeline.verify_upto(timeline.head_seq)
        self._reposition(requeue)
        self.catchup.apply(CatchupInput.ADOPTED, elapsed_ms)
        self.vouchers.clear()
        return SliceAdopted(len(txs), timeline.head_seq, base_seq if reset else None)

    def _agreeing(self, txs: tuple[Tx, ...], digests: tuple[bytes, ...], anchor: int) -> int:
        """How many leading entries of a slice agree with our verified history (to ``anchor``)."""
        digest_at = self.timeline.digest_at
        agree = 0
        for tx, digest in zip(txs, digests, strict=True):
            if tx.seq > anchor or digest_at(tx.seq) != digest:
                break
            agree += 1
        return agree

    def _rewind(self, joint_seq: int) -> None:
        """Give up the verified txs after ``joint_seq`` for a slice that leaves them out.
        Honest peers hold a verified history without txs this replica verified in two cases:
        after a power loss of every node (it marked them, no quorum did, so they were never
        acknowledged, and the others refolded them), and in the open gap of a vote counted
        before its voter retreated (docs/design.md, Anti-entropy). So the slice needs the
        voices of enough peers (``Vouchers``), and never takes back what readers may have
        seen."""
        self.timeline.rewind_to(joint_seq)
        self.log.rewind(joint_seq)

    def _held_prefix(self, txs: tuple[Tx, ...], digests: tuple[bytes, ...]) -> int:
        """How many leading entries of a verified slice our timeline holds as they are."""
        timeline = self.timeline
        held = 0
        for tx, digest in zip(txs, digests, strict=True):
            if tx.seq > timeline.head_seq or timeline.digest_at(tx.seq) != digest:
                break
            held += 1
        return held

    def refold(self, elapsed_ms: int) -> int:
        """Give up the stable but unverified tail: requeue it and fold again from the
        verified seq, fetching what peers hold by gap repair, so that replicas that diverged
        without a quorum converge on the same txs in the same order. Nothing unverified was
        ever delivered or acknowledged. Returns how many txs were requeued."""
        dropped = self._truncate(self.timeline.verified_seq)
        self._reposition(dropped)
        self.catchup.apply(CatchupInput.REFOLDED, elapsed_ms)
        return len(dropped)

    def _truncate(self, keep_upto: int) -> list[Tx]:
        """Cut the stable timeline after ``keep_upto``; the txs cut off, for requeueing."""
        dropped = self.timeline.truncate_after(keep_upto)
        self.log.cut(keep_upto)
        dropped += self.dedup.truncate(keep_upto)
        self.votes.forget_after(keep_upto)
        return dropped

    def _reposition(self, dropped: list[Tx]) -> None:
        """After the timeline changed under them, put every lane right after the new head
        and take back every held tx above it."""
        head = self.timeline.head_seq
        held = list(dropped)
        for lane in self.lanes.values():
            held += lane.resume_after(head)
        self.dedup.forget_pending()
        for tx in sorted(held, key=seq_of):
            if tx.seq > head:
                self.retake(tx)
