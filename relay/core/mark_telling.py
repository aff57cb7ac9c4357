"""When a replica tells its peers its mark: once, and only where their own acks may not.

How this works: every ack is broadcast to every replica of the stream, so a peer usually
learns a quorum of marks from the others' acks. ``MarkTelling`` remembers the mark of the
replica's last ack and when it went out, and when its mark moved past it. A moved mark waits
while the peers whose marks reach it, with the live peers whose votes have not reached it yet,
may make a quorum (each of the latter marks when it folds, and tells every replica); it is told
once no live peer can bring one, or ``again_ms`` after it moved. A peer whose ack shows it
lacking the mark is answered only if the last ack did not carry it and the other peers' marks
do not make a quorum for it, or once that ack is ``again_ms`` old (docs/design.md, Durability,
"A mark is told once").
"""

from __future__ import annotations

from collections.abc import Mapping

from relay.core.votes import Votes

PeerStates = Mapping[int, tuple[bool, int]]  # peer -> (up, epoch)


class MarkTelling:
    __slots__ = ("again_ms", "peers", "quorum", "sent", "sent_ms", "votes", "waits_since")

    def __init__(self, votes: Votes, peers: list[int], quorum: int, again_ms: int) -> None:
        self.votes = votes
        self.peers = peers
        self.quorum = quorum
        self.again_ms = again_ms
        self.sent = 0  # the mark of this node's last ack in the stream
        self.sent_ms = 0  # when it was sent (elapsed ms)
        # when the mark moved past ``sent`` while the peers' own acks may still bring them a
        # quorum of marks without this one; None: nothing waits
        self.waits_since: int | None = None

    def ack_sent(self, mark: int, elapsed_ms: int) -> None:
        self.sent, self.sent_ms = mark, elapsed_ms
        self.waits_since = None

    def moved(self, elapsed_ms: int) -> None:
        """The mark moved: it waits to be told, from now unless it waits already."""
        if self.waits_since is None:
            self.waits_since = elapsed_ms

    def owed(self, mark: int, elapsed_ms: int, peers: PeerStates) -> bool:
        """Whether the waiting mark is to be told now (False if nothing waits)."""
        since = self.waits_since
        if since is None:
            return False
        if self.sent >= mark or self.votes.marked_by_peers(mark) >= self.quorum:
            self.waits_since = None  # told, or the peers' marks make a quorum
            return False
        return elapsed_ms - since >= self.again_ms or not self._may_wait(mark, peers)

    def overdue(self, elapsed_ms: int) -> bool:
        """Whether a waiting mark waited ``again_ms`` (a tick tells it)."""
        since = self.waits_since
        return since is not None and elapsed_ms - since >= self.again_ms

    def lacking(self, readable_seq: int, lacking: int, elapsed_ms: int) -> bool:
        """Whether a peer whose readable seq is ``readable_seq`` lacks a mark at ``lacking``
        that only this replica's ack can bring it."""
        if readable_seq >= lacking:
            return False
        if elapsed_ms - self.sent_ms >= self.again_ms:
            return True  # said long ago, or lost: a peer that lags acks at each heartbeat
        return self.sent < lacking and self.votes.marked_by_peers(lacking) < self.quorum

    def _may_wait(self, mark: int, peers: PeerStates) -> bool:
        votes = self.votes
        coming = sum(
            1
            for r in self.peers
            if peers.get(r, (False, 0))[0]
            and votes.matched[r] < mark
            and votes.marks.get(r, 0) < mark
        )
        return votes.marked_by_peers(mark) + coming >= self.quorum
