"""A node whose disk was replaced (``relay node --recover``): when each stream has recovered.

How this works (the argument is in docs/design.md, *A replaced disk*): a cut takes the
highest report of a quorum, and a verification a quorum's votes, so that every tx a quorum
held stays. A node whose disk was replaced (a new machine, a lost data directory) may have been
one of the quorum that verified a tx and forgotten it. So, in each stream until it has
*recovered*, such a node sends no cut report and counts none of its own, and votes no further
than its verified seq: the others cut and verify without it, as if it were down. The stream
has recovered once the node heard acks from n - quorum + 1 of the stream's other replicas
(enough to meet every quorum it may have been part of) and its verified seq, verified by the
others, reached the highest floor or head those first acks carried. Where the quorum is every
replica, a node that forgot meets no quorum without the others, and nothing is needed.
"""

from __future__ import annotations


class Recovery:
    __slots__ = ("bounds", "needed", "target")

    def __init__(self, peers: int, quorum: int) -> None:
        # the others that meet every quorum with this node (n - quorum + 1)
        self.needed = min(peers, peers - quorum + 2)
        self.bounds: dict[int, int] = {}  # each peer's first bound heard (``heard``)
        self.target: int | None = None

    @staticmethod
    def needed_for(peers: int, quorum: int) -> bool:
        """Whether a replica that forgot must recover: the others alone make a quorum."""
        return peers >= quorum

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
