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

Every ``Persist`` also records how far the timeline is verified (a *mark*); the disk reports
which mark each sync covered, so the cursor knows which mark is durable (``durable_mark``) and,
with ``votes_wait``, the replica reports it in its acks (otherwise its mark is its verified
seq: ``StreamReplica.mark``). The head a sync covered does not tell it: a mark written, with no
new records, while an earlier sync of that head was running is not covered by that sync, and
counting it would let a reader be served a seq that a power loss of every node takes back. A
publish is acknowledged only once a quorum's marks cover it: with ``votes_wait``, whatever
crashes, every quorum that comes back holds a node that knows the tx is verified, and verified
history is never given up (docs/design.md, invariant 8).
"""

from __future__ import annotations

from collections.abc import Callable

from relay.core.events import Persist
from relay.core.messages import Tx
from relay.core.timeline import Timeline

Txs = tuple[Tx, ...]


class LogCursor:
    __slots__ = (
        "base_seq",
        "chained_seq",
        "confirmed_seq",
        "durable_mark",
        "durable_seq",
        "generation",
        "handed",
        "mark_again",
        "marks_from",
        "reset",
        "rewound",
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
        self.rewound = False  # the next Persist cuts below the verified mark
        self.base_seq = 0  # the log holds every seq after this (retention moves it up)
        self.chained_seq = 0  # and chains from this one on (compaction moves it up)
        self.durable_mark = 0  # the verified seq the log holds durably
        self.marks_from = 0  # the first generation whose reported marks count (after a rewind
        # or a new log, an older report names a mark the log no longer holds)
        self.confirmed_seq = 0  # the log holds this much: every earlier write was answered
        self.handed: tuple[int, bool, bool] = (0, False, False)  # the last write's base, reset
        # and rewind: what a refused write is made again from
        self.mark_again = False  # the next flush hands the mark even if it did not move

    def restored(self, head_seq: int, verified_seq: int) -> None:
        """The timeline was rebuilt from the log itself: all of it is there."""
        self.written_seq = self.durable_seq = self.confirmed_seq = head_seq
        self.written_verified = self.durable_mark = verified_seq

    def based_at(self, base_seq: int) -> None:
        """The log holds nothing at or below ``base_seq`` (it was restored, or retention
        gave up its oldest segments)."""
        self.base_seq = max(self.base_seq, base_seq)

    def cut(self, after_seq: int) -> None:
        """The timeline was cut after ``after_seq``."""
        if after_seq < self.written_seq:
            self.generation += 1
            self.written_seq = after_seq
        self.durable_seq = min(self.durable_seq, after_seq)

    def rewind(self, after_seq: int) -> None:
        """The timeline gave up verified txs after ``after_seq`` (peers vouched for a history
        without them, after a power loss of every node): the log cuts its mark too."""
        generation = self.generation
        self.cut(after_seq)
        if self.generation == generation:
            self.generation += 1
        self.marks_from = self.generation  # a mark reported from before the rewind never counts
        self.rewound = True
        self.written_verified = min(self.written_verified, after_seq)
        self.durable_mark = min(self.durable_mark, after_seq)

    def restart(self, base_seq: int) -> None:
        """The timeline starts over at ``base_seq`` (a peer's snapshot)."""
        self.generation += 1
        self.marks_from = self.generation
        self.reset = True
        self.written_seq = self.durable_seq = self.base_seq = base_seq
        self.durable_mark = 0  # the old log goes: nothing is claimed until the new one is synced

    def pending(
        self, stream: str, timeline: Timeline, logged: Callable[[Txs], Txs] | None = None
    ) -> Persist | None:
        """What the log has yet to be told; None if nothing. The shell answers each write
        before the next flush (a refusal comes as ``PersistFailed``), so what was handed
        before this call is in the log. ``logged``: the txs as the log keeps them
        (``DedupIndex.as_logged``)."""
        self.confirmed_seq = self.written_seq
        head = timeline.head_seq
        verified = timeline.verified_seq
        unchanged = head == self.written_seq and verified == self.written_verified
        if unchanged and not self.reset and not self.mark_again:
            return None
        base = self.written_seq
        txs = tuple(timeline.txs_between(base, head))
        digests = tuple(timeline.digests[len(timeline.digests) - len(txs) :]) if txs else ()
        if logged is not None and txs:
            txs = logged(txs)
        base_digest = timeline.digest_at(base)
        assert base_digest is not None, "the log's head is always held"
        persist = Persist(
            stream,
            self.generation,
            base,
            base_digest,
            self.reset,
            txs,
            digests,
            verified,
            self.rewound,
            timeline.count_at(base),
        )
        self.handed = (base, self.reset, self.rewound)
        self.written_seq, self.written_verified, self.reset = head, verified, False
        self.rewound = self.mark_again = False
        return persist

    def failed(self, sync: bool, timeline: Timeline) -> None:
        """The disk refused the last write (or, with ``sync``, a sync): write again, in a
        new generation, the mark with it. A refused write is made again as it was handed:
        from its base, which the log held before it, starting the log over or cutting below
        the mark if it did (not from the durable head, which with ``fsync = "never"`` never
        moves: the log would refuse every retry as cutting verified records, or the memory ring
        would no longer hold it). A failed sync may have lost what it covered
        from the page cache: the log is written again from what a sync made durable (the
        durable head, or the durable mark, which an older generation's sync may have moved
        past it), cutting any mark above it (not durable, and written again), while the
        memory ring holds it; and no older generation's sync counts any more (a later one may
        report a mark over records the failed one dropped)."""
        self.generation += 1
        if not sync:
            self.written_seq, reset, rewound = self.handed
            self.reset, self.rewound = self.reset or reset, self.rewound or rewound
        else:
            self.marks_from = self.generation
            durable = max(self.durable_seq, self.durable_mark)
            if durable < self.written_seq and timeline.digest_at(durable) is not None:
                self.written_seq = durable
                self.rewound = True
        # the mark is handed again too (a refused write did not write it; a failed sync may
        # have lost it, and the log forgot it): with the records in place, nothing else would
        # ever write or sync it, and the stream would stay unreadable past the durable mark
        self.mark_again = True
        self.confirmed_seq = min(self.confirmed_seq, self.written_seq)

    def persisted(self, generation: int, seq: int, mark: int) -> bool:
        """The shell's answer; True if the durable head or the durable mark moved. An answer
        about an older generation still tells a durable mark (verified history is never cut),
        unless the log was rewound or started over since; its head counts for nothing."""
        moved = False
        if generation >= self.marks_from:
            durable_mark = max(self.durable_mark, min(mark, self.written_verified))
            moved = durable_mark > self.durable_mark
            self.durable_mark = durable_mark
        if generation != self.generation or seq <= self.durable_seq:
            return moved
        self.durable_seq = min(seq, self.written_seq)
        return True

    def vote_seq(self, timeline: Timeline) -> int:
        """The seq this replica may vote for: its durable head, or with no wait its head."""
        return min(self.durable_seq, timeline.head_seq) if self.votes_wait else timeline.head_seq
