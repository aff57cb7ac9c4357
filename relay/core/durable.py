"""What a stream's log on disk has been asked to hold, and what it holds durably.

How this works: the core never touches the disk. After each change to a stream's stable
timeline it hands the shell a ``Persist`` effect: "after ``base_seq`` the log holds these txs"
(cutting whatever the log held above ``base_seq``; with ``reset``, dropping all of it first).
The shell writes, syncs per its ``fsync`` setting, and answers ``Persisted``: everything of
write generation ``generation`` up to ``seq`` is on disk. Every cut or reset of the timeline
starts a new generation, so a late answer about a log that has since been cut never counts.

With ``votes_wait`` (``fsync = "always"``) a replica's vote is its durable head, not its stable
head: it never tells a peer it holds what a power loss could take from it, so a quorum's
agreement means a quorum's disks. Otherwise the vote is the stable head and the log trails it.
"""

from __future__ import annotations

from relay.core.events import Persist
from relay.core.timeline import Timeline


class LogCursor:
    __slots__ = (
        "durable_seq",
        "generation",
        "reset",
        "votes_wait",
        "written_seq",
        "written_verified",
    )

    def __init__(self, votes_wait: bool) -> None:
        self.votes_wait = votes_wait
        self.generation = 0
        self.written_seq = 0  # the head handed to the log in this generation
        self.durable_seq = 0  # the head the log reported durable in this generation
        self.written_verified = 0
        self.reset = False  # the next Persist starts the log over

    def restored(self, head_seq: int) -> None:
        """The timeline was rebuilt from the log itself: all of it is there."""
        self.written_seq = self.durable_seq = head_seq

    def cut(self, after_seq: int) -> None:
        """The timeline was cut after ``after_seq``."""
        if after_seq < self.written_seq:
            self.generation += 1
            self.written_seq = after_seq
        self.durable_seq = min(self.durable_seq, after_seq)

    def restart(self, base_seq: int) -> None:
        """The timeline starts over at ``base_seq`` (a peer's snapshot)."""
        self.generation += 1
        self.reset = True
        self.written_seq = self.durable_seq = base_seq

    def pending(self, stream: str, timeline: Timeline) -> Persist | None:
        """What the log has yet to be told; None if nothing."""
        head = timeline.head_seq
        verified = timeline.verified_seq
        if head == self.written_seq and not self.reset and verified == self.written_verified:
            return None
        base = self.written_seq
        txs = tuple(timeline.txs_between(base, head))
        digests = tuple(timeline.digests[len(timeline.digests) - len(txs) :]) if txs else ()
        base_digest = timeline.digest_at(base)
        assert base_digest is not None, "the log's head is always held"
        persist = Persist(
            stream, self.generation, base, base_digest, self.reset, txs, digests, verified
        )
        self.written_seq, self.written_verified, self.reset = head, verified, False
        return persist

    def persisted(self, generation: int, seq: int) -> bool:
        """The shell's answer; True if the durable head moved."""
        if generation != self.generation or seq <= self.durable_seq:
            return False
        self.durable_seq = min(seq, self.written_seq)
        return True

    def vote_seq(self, timeline: Timeline) -> int:
        """The seq this replica may vote for: its durable head, or with no wait its head."""
        return min(self.durable_seq, timeline.head_seq) if self.votes_wait else timeline.head_seq
