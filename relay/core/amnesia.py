"""What a node whose disk was replaced (``relay node --recover``) can vouch for in a cut.

How this works (the argument is in docs/design.md, *A replaced disk*): a cut takes the
highest report of a quorum, so that every tx a quorum held is inside it. A node whose disk was
replaced (a new machine, a lost data directory) may have been one of the quorum that verified
a tx and forgotten it: its report on an epoch that began before it started says
nothing about what that quorum held. So such a node withholds its reports on each origin's
epochs up to the one it first heard that origin in (its own older epochs included), and counts
no report of its own there, in every stream until that stream has *recovered*: the node heard
acks from enough of the stream's other replicas that every quorum it may have been part of
meets them (all but ``quorum - 1`` of the others), and its verified seq reached the highest
head they voted when first heard. Every tx such a quorum verified was at or below one of those
heads, so it is then verified history here, and what the node reports covers it.
"""

from __future__ import annotations


class Amnesia:
    """The node's side: the epoch each origin was first heard in since the node started."""

    __slots__ = ("first_epochs",)

    def __init__(self, self_id: int, epoch: int) -> None:
        self.first_epochs: dict[int, int] = {self_id: epoch - 1}  # its own older epochs too

    def heard(self, origin: int, epoch: int) -> None:
        self.first_epochs.setdefault(origin, epoch)

    def vouches(self, origin: int, epoch: int) -> bool:
        """Whether ``epoch`` of ``origin`` began after this node started."""
        first = self.first_epochs.get(origin)
        return first is not None and epoch > first


class Recovery:
    """One stream's side: until it recovered, the epochs the node cannot vouch for are not
    reported."""

    __slots__ = ("amnesia", "heads", "needed", "target")

    def __init__(self, amnesia: Amnesia, peers: int, quorum: int) -> None:
        self.amnesia = amnesia
        self.needed = min(peers, peers - quorum + 2)  # others that meet every quorum with us
        self.heads: dict[int, int] = {}  # each peer's head when first heard
        self.target = 0 if self.needed <= 0 else -1  # -1: not known yet

    def heard(self, sender: int, head_seq: int) -> None:
        if self.target >= 0 or sender in self.heads:
            return
        self.heads[sender] = head_seq
        if len(self.heads) >= self.needed:
            self.target = max(self.heads.values())

    def done(self, verified_seq: int) -> bool:
        return 0 <= self.target <= verified_seq

    def vouches(self, origin: int, epoch: int) -> bool:
        return self.amnesia.vouches(origin, epoch)
