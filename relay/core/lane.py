"""One origin's lane in one stream, as one replica sees it, and the table that moves it.

How this works: an origin chains its transactions in a stream with ``prev`` links, so a
replica knows it holds every tx of that origin up to ``contig`` and can tell a gap from a
late arrival. With each message the origin also promises a ``floor``: it will never
originate a seq at or below it. The lane's *contribution* to the stream's stable watermark
is the highest seq below which no tx of this origin can still arrive:

- NEW: no epoch of this origin seen yet; it holds nothing back.
- ACTIVE: its floor, if we hold everything it claimed to have sent; else ``contig``.
- CUTTING: the origin is suspected dead; its epoch is frozen at ``contig`` until the
  replicas agree on the cut (the highest ``contig`` any live replica holds).
- CUT: the epoch is closed; the lane no longer holds the watermark back (reopened to
  CUTTING, keeping its cut, if the timeline is taken back below the cut).
- WAITING: a (re)joining origin; it is admitted once its floor is above the stable head,
  so none of its future txs can land below what is already stable.

Every state change goes through ``Lane.apply`` and the ``TRANSITIONS`` table; an input that
starts a newer epoch makes a successor lane (``Lane.successor``) that remembers where the
last cut epoch ended.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from enum import Enum

from relay.core.messages import Tx, prev_of, seq_of
from relay.core.timer import Timeout

EARLY_TXS_MAX = 4096  # out-of-order txs held per lane while a gap is open


class LaneState(Enum):
    NEW = "new"
    WAITING = "waiting"
    ACTIVE = "active"
    CUTTING = "cutting"
    CUT = "cut"

    __hash__ = object.__hash__  # members are singletons: a C hash for the tables' keys


class LaneInput(Enum):
    ADMITTED = "admitted"  # the origin's promise passed the stable head
    SUSPECTED = "suspected"  # this lane's epoch is suspected dead: agree where it ends
    NEWER_SUSPECTED = "newer suspected"  # a newer epoch than this lane's is being cut
    CUT_SETTLED = "cut settled"  # the replicas agreed where the epoch ends; we hold it all
    NEWER_EPOCH = "newer epoch"  # the origin announced a newer epoch
    REJOINED = "rejoined"  # (this node's own lane) the node starts a new epoch
    UNSETTLED = "unsettled"  # the timeline went back below the cut: hold its txs again

    __hash__ = object.__hash__  # members are singletons: a C hash for the tables' keys


ST, IN = LaneState, LaneInput
# (state, input) -> (next state, whether the next state belongs to a newer epoch)
TRANSITIONS: dict[tuple[LaneState, LaneInput], tuple[LaneState, bool]] = {
    (ST.NEW, IN.ADMITTED): (ST.NEW, False),
    (ST.NEW, IN.SUSPECTED): (ST.NEW, False),  # no epoch seen: nothing to cut
    (ST.NEW, IN.NEWER_SUSPECTED): (ST.CUTTING, True),
    (ST.NEW, IN.CUT_SETTLED): (ST.NEW, False),
    (ST.NEW, IN.NEWER_EPOCH): (ST.ACTIVE, True),  # first sight: nothing of it is stable yet
    (ST.NEW, IN.REJOINED): (ST.ACTIVE, True),
    (ST.NEW, IN.UNSETTLED): (ST.NEW, False),
    (ST.WAITING, IN.ADMITTED): (ST.ACTIVE, False),
    (ST.WAITING, IN.SUSPECTED): (ST.CUTTING, False),
    (ST.WAITING, IN.NEWER_SUSPECTED): (ST.CUTTING, True),
    (ST.WAITING, IN.CUT_SETTLED): (ST.WAITING, False),
    (ST.WAITING, IN.NEWER_EPOCH): (ST.CUTTING, False),  # end the old epoch first
    (ST.WAITING, IN.REJOINED): (ST.ACTIVE, True),
    (ST.WAITING, IN.UNSETTLED): (ST.WAITING, False),
    (ST.ACTIVE, IN.ADMITTED): (ST.ACTIVE, False),
    (ST.ACTIVE, IN.SUSPECTED): (ST.CUTTING, False),
    (ST.ACTIVE, IN.NEWER_SUSPECTED): (ST.CUTTING, True),
    (ST.ACTIVE, IN.CUT_SETTLED): (ST.ACTIVE, False),
    (ST.ACTIVE, IN.NEWER_EPOCH): (ST.CUTTING, False),  # end the old epoch first
    (ST.ACTIVE, IN.REJOINED): (ST.ACTIVE, True),
    (ST.ACTIVE, IN.UNSETTLED): (ST.ACTIVE, False),
    (ST.CUTTING, IN.ADMITTED): (ST.CUTTING, False),
    (ST.CUTTING, IN.SUSPECTED): (ST.CUTTING, False),
    (ST.CUTTING, IN.NEWER_SUSPECTED): (ST.CUTTING, True),
    (ST.CUTTING, IN.CUT_SETTLED): (ST.CUT, False),
    (ST.CUTTING, IN.NEWER_EPOCH): (ST.CUTTING, False),  # the cut settles first
    (ST.CUTTING, IN.REJOINED): (ST.CUTTING, False),  # the cut settles first
    (ST.CUTTING, IN.UNSETTLED): (ST.CUTTING, False),
    (ST.CUT, IN.ADMITTED): (ST.CUT, False),
    (ST.CUT, IN.SUSPECTED): (ST.CUT, False),
    (ST.CUT, IN.NEWER_SUSPECTED): (ST.CUTTING, True),
    (ST.CUT, IN.CUT_SETTLED): (ST.CUT, False),
    (ST.CUT, IN.NEWER_EPOCH): (ST.WAITING, True),  # admitted once its floor passes the head
    (ST.CUT, IN.REJOINED): (ST.ACTIVE, True),
    (ST.CUT, IN.UNSETTLED): (ST.CUTTING, False),  # the decided cut stays; repair up to it
}
del ST, IN


class Lane:
    __slots__ = (
        "claimed_last",
        "closed",
        "contig",
        "cut_at",
        "cut_grace",
        "cut_reports",
        "early",
        "epoch",
        "gap",
        "newer_cut",
        "origin",
        "promise",
        "queue",
        "state",
    )

    def __init__(
        self,
        origin: int,
        repair_after_ms: int,
        cut_grace_ms: int,
        epoch: int = 0,
        state: LaneState = LaneState.NEW,
        closed: tuple[int, int] | None = None,
    ) -> None:
        self.origin = origin
        self.epoch = epoch  # 0: no epoch of this origin seen yet
        self.state = state
        self.contig = 0  # every tx of this epoch up to here is held
        self.claimed_last = 0  # the origin's last sent seq, as it last claimed
        self.promise = 0  # the origin's floor, sent together with claimed_last
        self.queue: deque[Tx] = deque()  # contiguous, not yet stable
        self.early: dict[int, Tx] = {}  # prev -> tx, waiting for the gap before it
        self.cut_reports: dict[int, int] = {}  # reporter -> its contig, while CUTTING
        self.cut_at: int | None = None  # the agreed cut, once decided or adopted
        self.cut_grace = Timeout(cut_grace_ms)  # runs while CUTTING
        self.gap = Timeout(repair_after_ms)  # runs while a gap is open
        self.closed = closed  # (epoch, cut) of the last closed epoch
        self.newer_cut = 0  # a newer epoch reported cut while this cut one still held txs

    def apply(self, event: LaneInput, epoch: int = 0) -> Lane:
        """The lane after ``event``: this one, or a successor following ``epoch``."""
        state, newer = TRANSITIONS[(self.state, event)]
        if newer:
            return self.successor(epoch, state)
        if (
            state is LaneState.CUTTING
            and self.state is not LaneState.CUTTING
            and event is not LaneInput.UNSETTLED  # reopened: the cut was decided already
        ):
            self.cut_reports = {}
            self.cut_at = None
            self.cut_grace.stop()
        self.state = state
        return self

    def successor(self, epoch: int, state: LaneState) -> Lane:
        """A lane following ``epoch``, remembering where this one ended if it was cut."""
        closed = (self.epoch, self.cut_at or self.contig) if self.state is LaneState.CUT else None
        return Lane(
            self.origin,
            self.gap.after_ms,
            self.cut_grace.after_ms,
            epoch,
            state,
            closed or self.closed,
        )

    def contribution(self, floor: int, head: int) -> int | None:
        """The seq at or below which this lane holds every tx it will ever have; None: no
        bound. ``floor`` is the origin's latest promise heard for its current epoch; a claim
        at or below the stable ``head`` is settled (a lane that began after a restart)."""
        if self.state is LaneState.ACTIVE:
            if self.claimed_last > max(self.contig, head):
                return self.contig
            return max(self.promise, floor)
        if self.state is LaneState.CUTTING:
            return self.contig
        return None

    def claim(self, last: int, floor: int) -> None:
        if last > self.claimed_last:
            self.claimed_last = last
        if floor > self.promise:
            self.promise = floor

    def accept(self, tx: Tx, stable_head: int, restoring: bool = False) -> bool:
        """Take a tx of this lane's epoch; False if it was a duplicate or cannot be placed.
        ``restoring`` puts back a tx this lane held before the timeline changed under it:
        a lane frozen for a cut takes nothing new, but it keeps what it held.

        A tx chains when its ``prev`` is at or below ``contig`` (every tx of the epoch up to
        ``contig`` is held, so its predecessor is; a ``prev`` below it is one a log linked past
        skipped copies, ``DedupIndex.as_logged``, or a ``contig`` raised past txs that do not
        exist), or when both are at or below the stable head: an origin's chain is linear, so
        no tx of it lies between ``prev`` and this one, and everything at or below the stable
        head is settled already. That rule is what lets a replica that caught up from a
        snapshot follow every origin without knowing where each one's chain was.
        """
        if tx.seq <= self.contig or tx.epoch != self.epoch or tx.seq <= stable_head:
            return False
        if self.cut_at is not None and tx.seq > self.cut_at:
            return False
        if self.state is LaneState.CUTTING and self.cut_at is None and not restoring:
            return False  # frozen until the replicas agree where the epoch ends
        if tx.prev > self.contig and not (tx.prev <= stable_head and self.contig <= stable_head):
            if len(self.early) < EARLY_TXS_MAX:
                self.early[tx.prev] = tx
            return False
        self.queue.append(tx)
        self.contig = tx.seq
        early = self.early
        while early:
            nxt = early.pop(self.contig, None)
            if nxt is None:  # the lowest early tx whose prev the lane passed chains next
                passed = [p for p in early if p < self.contig]
                if not passed:
                    break
                nxt = early.pop(min(passed, key=lambda p: early[p].seq))
                if nxt.seq <= self.contig:
                    continue  # held already
            self.queue.append(nxt)
            self.contig = nxt.seq
        return True

    def accept_chain(self, txs: Sequence[Tx], stable_head: int) -> Sequence[Tx]:
        """Take txs of this lane's epoch in seq order, as ``accept`` would one by one: the
        txs taken. A chain that extends the lane (each one's ``prev`` the one before) is
        taken in one step."""
        first = self.accept(txs[0], stable_head)
        if (
            first
            and self.contig == txs[0].seq
            and self.cut_at is None
            and not self.early
            and list(map(prev_of, txs[1:])) == list(map(seq_of, txs[:-1]))
        ):
            self.queue.extend(txs[1:])
            self.contig = txs[-1].seq
            return txs
        rest = [tx for tx in txs[1:] if self.accept(tx, stable_head)]
        return [txs[0], *rest] if first else rest

    def missing_range(self, head: int) -> tuple[int, int] | None:
        """(after, upto) of txs we know exist but do not hold, or None; nothing at or below
        the stable ``head`` is missing (it could not be placed any more)."""
        upto = self.claimed_last
        if self.early:
            upto = max(upto, max(t.seq for t in self.early.values()))
        if self.cut_at is not None:  # a cut epoch: exactly up to the cut
            upto = self.cut_at
        after = max(self.contig, head)
        return (after, upto) if upto > after else None

    def resume_after(self, head: int) -> list[Tx]:
        """The timeline changed under this lane: it continues right after the new ``head``
        (everything at or below it is settled now). Returns every tx it held, to be placed
        again."""
        held = self.release_held()
        self.contig = head
        if self.cut_at is not None and self.contig > self.cut_at:
            self.cut_at = self.contig
        if self.state is LaneState.CUT and self.cut_at is not None and self.cut_at > head:
            # the cut settled on a head that is gone (an unverified tail folded past the
            # epoch's txs, some never held here): hold them again, repaired, before the
            # lane stops holding the watermark back
            self.apply(LaneInput.UNSETTLED)
        if self.closed is not None and self.closed[1] > head:
            # a lane of a newer epoch cannot take back what a closed epoch held above the
            # head: that is gone from here, so the epoch ends at the head, and the settled
            # report says so (replicas still cutting it settle on the lowest)
            self.closed = (self.closed[0], head)
        return held

    def complete_upto(self, seq: int) -> bool:
        """Every tx of this epoch up to ``seq`` is held (a repair said there are no more);
        True if that moved ``contig``."""
        if seq <= self.contig:
            return False
        self.contig = seq
        return True

    def take_newer_cut(self) -> int:
        """The newer epoch reported cut while this lane still held txs (0: none), once."""
        newer, self.newer_cut = self.newer_cut, 0
        return newer

    def release_held(self) -> list[Tx]:
        """Give up every held tx (queued and early) so it can be placed again."""
        held = [*self.queue, *self.early.values()]
        self.queue.clear()
        self.early.clear()
        return held
