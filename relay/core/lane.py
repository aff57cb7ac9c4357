"""One origin's lane in one stream, as one replica sees it.

How this works: an origin chains its transactions in a stream with ``prev`` links, so a
replica knows it holds every tx of that origin up to ``contig`` and can tell a gap from a
late arrival. With each message the origin also promises a ``floor``: it will never
originate a seq at or below it. The lane's *contribution* to the stream's stable watermark
is the highest seq below which no tx of this origin can still arrive:

- ACTIVE: its floor, if we hold everything it claimed to have sent; else ``contig``.
- CUTTING: the origin is suspected dead; its epoch is frozen at ``contig`` until the
  replicas agree on the cut (the highest ``contig`` any live replica holds).
- CUT: the epoch is closed; the lane no longer holds the watermark back.
- WAITING: a (re)joining origin; it is admitted once its floor is above the watermark,
  so none of its future txs can land below what is already stable.
"""

from __future__ import annotations

from collections import deque
from enum import Enum

from relay.core.messages import Tx

EARLY_TXS_MAX = 4096  # out-of-order txs held per lane while a gap is open


class LaneState(Enum):
    ACTIVE = "active"
    CUTTING = "cutting"
    CUT = "cut"
    WAITING = "waiting"


class Lane:
    __slots__ = (
        "claimed_last",
        "closed",
        "contig",
        "cut_at",
        "cut_final",
        "cut_reports",
        "cut_since_ms",
        "early",
        "epoch",
        "gap_since_ms",
        "origin",
        "promise",
        "queue",
        "state",
    )

    def __init__(self, origin: int, epoch: int, state: LaneState) -> None:
        self.origin = origin
        self.epoch = epoch  # 0: no epoch of this origin seen yet
        self.state = state
        self.contig = 0  # every tx of this epoch up to here is held
        self.claimed_last = 0  # the origin's last sent seq, as it last claimed
        self.promise = 0  # the origin's floor, sent together with claimed_last
        self.queue: deque[Tx] = deque()  # contiguous, not yet stable
        self.early: dict[int, Tx] = {}  # prev -> tx, waiting for the gap before it
        self.cut_reports: dict[int, int] = {}  # reporter -> its contig, while CUTTING
        self.cut_at: int | None = None  # the agreed cut, once known
        self.cut_since_ms: int | None = None
        self.cut_final = False  # cut_at is decided (here or by a settled report)
        self.gap_since_ms: int | None = None
        self.closed: tuple[int, int] | None = None  # (epoch, cut) of the last closed epoch

    def restart(self, epoch: int, state: LaneState) -> None:
        """Forget the current epoch and follow a new one, remembering where a cut one ended."""
        closed = (
            (self.epoch, self.cut_at or self.contig)
            if self.state is LaneState.CUT
            else (self.closed)
        )
        self.__init__(self.origin, epoch, state)  # type: ignore[misc]
        self.closed = closed

    def contribution(self) -> int | None:
        """The seq at or below which this lane holds every tx it will ever have; None: no bound."""
        if self.state is LaneState.ACTIVE:
            return self.promise if self.claimed_last <= self.contig else self.contig
        if self.state is LaneState.CUTTING:
            return self.contig
        return None

    def claim(self, last: int, floor: int) -> None:
        if last > self.claimed_last:
            self.claimed_last = last
        if floor > self.promise:
            self.promise = floor

    def accept(self, tx: Tx, stable_head: int) -> bool:
        """Take a tx of this lane's epoch; False if it was a duplicate or cannot be placed.

        A tx chains when its ``prev`` is ``contig``, or when both are at or below the stable
        head: an origin's chain is linear, so no tx of it lies between ``prev`` and this one,
        and everything at or below the stable head is settled already. That rule is what lets
        a replica that caught up from a snapshot follow every origin without knowing where
        each one's chain was.
        """
        if tx.seq <= self.contig or tx.epoch != self.epoch or tx.seq <= stable_head:
            return False
        if self.cut_at is not None and tx.seq > self.cut_at:
            return False
        if self.state is LaneState.CUTTING and self.cut_at is None:
            return False  # frozen until the replicas agree where the epoch ends
        if tx.prev != self.contig and not (tx.prev <= stable_head and self.contig <= stable_head):
            if len(self.early) < EARLY_TXS_MAX:
                self.early[tx.prev] = tx
            return False
        self.queue.append(tx)
        self.contig = tx.seq
        while self.early:
            nxt = self.early.pop(self.contig, None)
            if nxt is None:
                break
            self.queue.append(nxt)
            self.contig = nxt.seq
        if self.early and min(self.early) < self.contig:
            self.early = {p: t for p, t in self.early.items() if t.seq > self.contig}
        return True

    def missing_range(self) -> tuple[int, int] | None:
        """(after, upto) of txs we know exist but do not hold, or None."""
        upto = self.claimed_last
        if self.early:
            upto = max(upto, max(t.seq for t in self.early.values()))
        if self.cut_at is not None:  # a cut epoch: exactly up to the cut
            upto = self.cut_at
        return (self.contig, upto) if upto > self.contig else None
