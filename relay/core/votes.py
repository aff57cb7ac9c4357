"""Votes and verification: the one place that decides how far a quorum agreed.

How this works: a replica's vote is its stable head ``(seq, digest)``, sent in every
``StreamAck``. A peer's vote *matches* ours at ``s`` when our digest at ``s`` equals its
digest there; since digests chain, a match at ``s`` proves the whole prefix up to ``s``. A vote
ahead of our head is kept (bounded) until our head passes it. A vote that contradicts our
timeline never counts; it is reported so the replica can catch up. A vote names the history
its sender held when it cast it, which a later retreat of that sender (a refold, a sync that
replaced its tail) may have given up: each ack carries the sender's epoch and retreats, and once
a later pair is heard, what the sender matched or kept above our verified seq counts no more
and an ack of an earlier pair is not counted at all. ``verify`` moves the
verified seq to the highest seq a quorum of the stream's replicas (this one counted) matched,
and it is the only code that moves it forward from votes; it says whether it moved.
"""

from __future__ import annotations

from collections import deque

from relay.core.timeline import Timeline

VOTES_PENDING_MAX = 64  # votes ahead of our head kept per peer until our head catches up


class Votes:
    __slots__ = (
        "heads",
        "mark_epochs",
        "marks",
        "matched",
        "mismatches",
        "pending",
        "pending_marks",
        "quorum",
        "rounds",
        "verified",
    )

    def __init__(self, self_id: int, replicas: tuple[int, ...], quorum: int) -> None:
        peers = [r for r in replicas if r != self_id]
        self.quorum = quorum
        self.matched: dict[int, int] = dict.fromkeys(peers, 0)  # highest seq matched per peer
        self.pending: dict[int, deque[tuple[int, bytes]]] = {
            r: deque(maxlen=VOTES_PENDING_MAX) for r in peers
        }
        self.heads: dict[int, int] = {}  # each peer's latest vote (its stable head)
        self.verified: dict[int, int] = {}  # each peer's latest verified seq
        self.marks: dict[int, int] = {}  # each peer's mark (``StreamReplica.mark``)
        self.mark_epochs: dict[int, int] = {}  # the peer epoch each mark was heard in
        # each peer's latest mark above our head, (epoch, mark, digest): it counts once our
        # head reaches it (a peer that folded first marks before our fold)
        self.pending_marks: dict[int, tuple[int, int, bytes]] = {}
        self.rounds: dict[int, tuple[int, int]] = {}  # each peer's (epoch, retreats) last heard
        self.mismatches = 0

    def take_round(self, sender: int, round_: tuple[int, int], timeline: Timeline) -> bool:
        """The round (epoch, retreats) a peer's ack was sent in; False if it was sent before
        a retreat we heard of: its vote and mark name a history the peer gave up, and count
        for nothing."""
        known = self.rounds.get(sender)
        if known is not None and round_ < known:
            return False
        if known is not None and round_ > known and sender in self.matched:
            self._retreated(sender, timeline.verified_seq)
        self.rounds[sender] = round_
        return True

    def take(
        self,
        sender: int,
        head_seq: int,
        digest: bytes,
        verified_seq: int,
        timeline: Timeline,
        counting: bool,
    ) -> bool:
        """Record a peer's vote (of a round ``take_round`` let count); True if it contradicts
        our timeline. A replica that does not know its history yet (``counting`` False) only
        notes where the peer is."""
        if sender not in self.matched:
            return False
        self.heads[sender] = head_seq
        self.verified[sender] = verified_seq
        if not counting or head_seq <= self.matched[sender]:
            return False
        if head_seq <= timeline.head_seq:
            return not self._match(sender, head_seq, digest, timeline)
        self.pending[sender].append((head_seq, digest))
        return False

    def recheck(self, timeline: Timeline) -> bool:
        """Match the kept votes and marks our head has reached; True if a vote contradicts
        us."""
        head = timeline.head_seq
        contradicted = False
        for sender, votes in self.pending.items():
            while votes and votes[0][0] <= head:
                seq, digest = votes.popleft()
                contradicted |= not self._match(sender, seq, digest, timeline)
        for sender, (epoch, mark, digest) in list(self.pending_marks.items()):
            if mark <= head:
                del self.pending_marks[sender]
                self.take_mark(sender, epoch, mark, digest, timeline)
        return contradicted

    def _match(self, sender: int, seq: int, digest: bytes, timeline: Timeline) -> bool:
        ours = timeline.digest_at(seq)
        if ours is None and seq < timeline.trimmed_seq:
            return True  # too old to judge and too old to matter
        if ours != digest:
            self.mismatches += 1
            return False
        if seq > self.matched[sender]:
            self.matched[sender] = seq
        return True

    def take_mark(
        self, sender: int, epoch: int, mark: int, digest: bytes, timeline: Timeline
    ) -> None:
        """A peer's mark: it verified history up to ``mark`` (with ``fsync = "always"``, its
        log records that durably), where its digest is ``digest``. It counts only for the
        history it names: where our digest there is the same (below our memory ring, both are
        verified history, which is one); a mark beyond our head is kept until our head
        reaches it (``recheck``).
        It only grows within an epoch; a restarted peer starts over (what its old
        incarnation marked may not be on its disk any more)."""
        if sender not in self.matched:
            return
        if mark > timeline.head_seq:
            self.pending_marks[sender] = (epoch, mark, digest)
            return
        ours = timeline.digest_at(mark)
        if ours != digest and not (ours is None and mark < timeline.trimmed_seq):
            return  # another history: it counts for nothing
        known = self.mark_epochs.get(sender, 0)
        if epoch > known or (epoch == known and mark > self.marks.get(sender, 0)):
            self.marks[sender], self.mark_epochs[sender] = mark, epoch

    def marked_by_peers(self, seq: int) -> int:
        """How many peers' marks reach ``seq``."""
        return sum(1 for mark in self.marks.values() if mark >= seq)

    def marked(self, own_mark: int) -> int:
        """The seq a quorum's marks cover (this replica counting for ``own_mark``)."""
        marks = sorted([own_mark, *self.marks.values()], reverse=True)
        return marks[self.quorum - 1] if len(marks) >= self.quorum else 0

    def verify(self, timeline: Timeline, own_vote: int) -> bool:
        """Move the verified seq to what a quorum matched (this replica counting for its
        own vote); True if it moved."""
        marks = sorted([own_vote, *self.matched.values()], reverse=True)
        verified = marks[self.quorum - 1]
        if verified <= timeline.verified_seq:
            return False
        timeline.verify_upto(verified)
        return True

    def _retreated(self, peer: int, verified_seq: int) -> None:
        """``peer`` gave up part of its timeline: its votes above what we verified may name
        what it no longer holds (below, they are settled and count no more anyway), and its
        mark may be one it gave back (a rewind, ``TimelineRebuild._rewind``): it counts
        again as its next ack says it."""
        self.matched[peer] = min(self.matched[peer], verified_seq)
        self.pending[peer].clear()
        self.pending_marks.pop(peer, None)
        self.marks.pop(peer, None)
        self.mark_epochs.pop(peer, None)

    def forget_peer(self, peer: int) -> None:
        """``peer`` restarted: what it voted before counts no more; it votes again."""
        if peer in self.matched:
            self.matched[peer] = 0
            self.pending[peer].clear()
            self.pending_marks.pop(peer, None)
            self.heads.pop(peer, None)
            self.verified.pop(peer, None)

    def forget_after(self, seq: int) -> None:
        """Our timeline was cut after ``seq``: matches and marks above it named the history
        it held, and no longer hold."""
        for peer, matched in self.matched.items():
            self.matched[peer] = min(matched, seq)
        for peer, mark in self.marks.items():
            self.marks[peer] = min(mark, seq)

    def ahead_of(self, seq: int, peers: list[int]) -> bool:
        """Whether any of ``peers`` votes a head above ``seq``."""
        return any(self.heads.get(r, 0) > seq for r in peers)

    def verified_ahead_of(self, seq: int, peers: list[int]) -> bool:
        return any(self.verified.get(r, 0) > seq for r in peers)
