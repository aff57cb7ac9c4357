"""What a node whose disk was replaced (``relay node --recover``) can vouch for in a cut.

How this works (the argument is in docs/design.md, *A replaced disk*): a cut takes the
highest report of a quorum, so that every tx a quorum held is inside it. A node whose disk was
replaced (a new machine, a lost data directory) may have been one of the quorum that verified
a tx and forgotten it: its report on an epoch that began before it started says
nothing about what that quorum held. So such a node withholds its reports on each origin's
epochs up to the one it first heard that origin in (its own older epochs included), counts no
report of its own there, and votes no further than its verified seq (the others verify without
it), in every stream until that stream has *recovered*: the node heard acks from enough of the
stream's other replicas that every quorum it may have been part of meets them (n - quorum + 1
of them), and its verified seq, verified by the others, reached the highest floor or head they
sent first. Every tx such a quorum verified was held by one of them, at or below that bound,
so it is then verified history here, and the node is a replica like any other.
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
    """One stream's side: until the stream recovered, the node vouches for no epoch older than
    its start and its vote stands for no more than its verified seq."""

    __slots__ = ("amnesia", "bounds", "needed", "target")

    def __init__(self, amnesia: Amnesia, peers: int, quorum: int) -> None:
        self.amnesia = amnesia
        # the others that meet every quorum this node may have been in: n - quorum + 1
        self.needed = min(peers, peers - quorum + 2)
        self.bounds: dict[int, int] = {}  # each peer's first bound heard (``heard``)
        self.target: int | None = 0 if self.needed <= 0 else None

    def heard(self, sender: int, floor: int, head_seq: int) -> None:
        """A peer's first ack since the node started: every tx it held then is at or below its
        floor (its clock observed the seq) or its head (a tx it took by a sync is verified,
        and never refolded)."""
        if self.target is not None or sender in self.bounds:
            return
        self.bounds[sender] = max(floor, head_seq)
        if len(self.bounds) >= self.needed:
            self.target = max(self.bounds.values())

    def done(self, verified_seq: int) -> bool:
        return self.target is not None and verified_seq >= self.target
