"""A stream's stable timeline: seq-ordered transactions with the rolling digest at each.

How this works: three parallel lists (seqs, digests, txs) grow at the tail as transactions
become stable and are trimmed at the head, in chunks (``TRIM_PART``), once they are verified,
the list holds more than ``capacity`` entries or ``bytes_max`` bytes (``tx_bytes``) and no
publish is still waiting to be answered with them.
``verified_seq`` marks how far a quorum agreed, ``readable_seq`` how far a quorum's marks say
they verified it (with ``fsync = "always"``, durably in their logs); readers see only that
prefix.
The digest of the last trimmed entry is kept so a reader starting at the head of the buffer
can still check the chain. Every timeline of a node adds its bytes to one ``RingBytes``, so
the node can shed the oldest verified entries of all its rings when they outgrow its memory
budget (readers find shed entries in the log on disk).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from relay.core.digest import genesis
from relay.core.messages import Tx, seq_of, tx_bytes, txs_bytes
from relay.core.untracked import untrack_all

# Trims come in chunks of a thirty-second of a bound: each moves the three lists' remaining
# entries once (0.1-0.2 ms per 200,000), and frees its txs, about 0.25 us each, in one turn
# (an eighth, 25,000 txs of a full ring, took a turn 6-7 ms of CPU every 1.25 s at 20,000 tx/s)
TRIM_PART = 32
HELD_OF_KEPT = 16  # epochs whose highest held seq ``last_of`` keeps


class RingBytes:
    """What a node's timelines hold, together (``tx_bytes``)."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0

    def add(self, change: int) -> None:
        self.total += change


class Timeline:
    __slots__ = (
        "bytes",
        "bytes_max",
        "capacity",
        "digests",
        "held_of",
        "readable_seq",
        "retreats",
        "ring",
        "seqs",
        "trimmed_count",
        "trimmed_digest",
        "trimmed_seq",
        "txs",
        "verified_seq",
    )

    def __init__(
        self, stream: str, capacity: int, bytes_max: int = 1 << 62, ring: RingBytes | None = None
    ) -> None:
        if capacity < 1:
            raise ValueError("a timeline needs room for at least one transaction")
        self.capacity = capacity
        self.bytes_max = bytes_max
        self.ring = RingBytes() if ring is None else ring  # the node's timelines together
        self.bytes = 0  # what the held txs take (``tx_bytes``)
        self.seqs: list[int] = []
        self.digests: list[bytes] = []
        self.txs: list[Tx] = []
        untrack_all((self.seqs, self.digests, self.txs))  # relay/core/untracked.py
        self.verified_seq = 0
        self.readable_seq = 0  # at most verified_seq: what readers and acks may see
        self.trimmed_seq = 0  # seq of the last entry dropped from the head, 0 if none
        self.trimmed_digest = genesis(stream)  # digest at trimmed_seq
        self.trimmed_count = 0  # txs in the stream's history up to trimmed_seq
        # how many times the stable timeline gave up entries: a vote names the history of the
        # retreat it was cast in, and a peer counts none cast before a later one
        self.retreats = 0
        # (origin, epoch) -> (the highest seq of it held, the head when that was found), for
        # the epochs asked about (``last_of``): forgotten when entries are taken back
        self.held_of: dict[tuple[int, int], tuple[int, int]] = {}

    @property
    def head_seq(self) -> int:
        return self.seqs[-1] if self.seqs else self.trimmed_seq

    @property
    def head_digest(self) -> bytes:
        return self.digests[-1] if self.digests else self.trimmed_digest

    def count_at(self, seq: int) -> int:
        """Txs in the stream's history up to ``seq`` (at or above ``trimmed_seq``): the dense
        index of the entry after it."""
        return self.trimmed_count + bisect_right(self.seqs, seq)

    def seek(self, index: int) -> int | None:
        """The seq after which the entry of dense index ``index`` comes, if the ring holds it
        (an index past the readable entries: the readable seq); None below the ring."""
        at = index - self.trimmed_count
        if at < 0:
            return None
        if at >= bisect_right(self.seqs, self.readable_seq):
            return self.readable_seq
        return self.seqs[at - 1] if at else self.trimmed_seq

    def extend(self, txs: list[Tx], digests: list[bytes]) -> None:
        """Append txs already in ascending seq order above the head, with their digests."""
        assert txs[0].seq > self.head_seq, "a timeline only grows in seq order"
        self.seqs.extend(map(seq_of, txs))
        self.digests.extend(digests)
        self.txs.extend(txs)
        untrack_all(txs)
        self._count(txs_bytes(txs))

    def digest_at(self, seq: int) -> bytes | None:
        """The digest at ``seq`` if ``seq`` is a held entry (or the trimmed boundary)."""
        if seq == self.trimmed_seq:
            return self.trimmed_digest
        i = bisect_left(self.seqs, seq)
        if i < len(self.seqs) and self.seqs[i] == seq:
            return self.digests[i]
        return None

    def verify_upto(self, seq: int) -> None:
        assert seq <= self.head_seq, "cannot verify beyond the stable head"
        self.verified_seq = max(self.verified_seq, seq)

    def make_readable(self, seq: int) -> None:
        """Readers and acknowledgements may see up to ``seq`` (verified, and with ``always``
        durable on a quorum)."""
        assert seq <= self.verified_seq, "only verified entries are readable"
        self.readable_seq = seq

    def read_verified(
        self, after_seq: int, limit: int, upto_seq: int | None = None
    ) -> tuple[int, list[int]]:
        """Indexes of up to ``limit`` entries after ``after_seq`` and at or below ``upto_seq``
        (default: the readable seq; a sync between replicas passes the verified seq);
        (start, [i...])."""
        bound = self.readable_seq if upto_seq is None else upto_seq
        start = bisect_right(self.seqs, after_seq)
        end = min(bisect_right(self.seqs, bound), start + limit)
        return start, list(range(start, end))

    def digest_before(self, index: int) -> bytes:
        return self.digests[index - 1] if index > 0 else self.trimmed_digest

    def txs_between(self, after_seq: int, upto_seq: int) -> Iterator[Tx]:
        start = bisect_right(self.seqs, after_seq)
        end = bisect_right(self.seqs, upto_seq)
        return iter(self.txs[start:end])

    def last_of(self, origin: int, epoch: int) -> int:
        """The highest seq held of ``origin``'s ``epoch`` (0 if none): a scan the first time
        it is asked, then of the entries appended since (at most ``HELD_OF_KEPT`` epochs are
        remembered). Entries the ring shed since count as held: they are readable history."""
        key = (origin, epoch)
        found = self.held_of.get(key)
        if found is None:
            if len(self.held_of) >= HELD_OF_KEPT:
                self.held_of.clear()
            held, start = 0, 0
        else:
            held, start = found[0], bisect_right(self.seqs, found[1])
        txs = self.txs
        for i in range(len(txs) - 1, start - 1, -1):
            tx = txs[i]
            if tx.origin == origin and tx.epoch == epoch:
                held = tx.seq
                break
        self.held_of[key] = (held, self.head_seq)
        return held

    def unverified_count(self) -> int:
        """Stable entries past the verified seq."""
        return len(self.seqs) - bisect_right(self.seqs, self.verified_seq)

    def earliest_seq(self) -> int:
        return self.seqs[0] if self.seqs else 0

    def over_capacity(self) -> bool:
        """Over a bound by more than ``1 / TRIM_PART`` of it: trimming goes in chunks."""
        over_bytes = self.bytes - self.bytes_max > self.bytes_max // TRIM_PART
        return over_bytes or len(self.seqs) - self.capacity > max(1, self.capacity // TRIM_PART)

    def rewind_to(self, seq: int) -> None:
        """Take back verification after ``seq`` (never of what readers may see)."""
        assert self.readable_seq <= seq <= self.verified_seq, "acknowledged history stays"
        self.verified_seq = seq

    def truncate_after(self, seq: int) -> list[Tx]:
        """Cut the stable but unverified tail after ``seq``; the txs cut off."""
        assert seq >= self.verified_seq, "verified entries are never taken back"
        cut = bisect_right(self.seqs, seq)
        dropped = self.txs[cut:]
        if dropped:
            self.retreats += 1
            self.held_of.clear()
        del self.seqs[cut:], self.digests[cut:], self.txs[cut:]
        self._count(-txs_bytes(dropped))
        return dropped

    def restart_at(self, base_seq: int, base_digest: bytes, base_count: int) -> list[Tx]:
        """Empty the timeline and continue from ``base_seq``/``base_digest``, the
        ``base_count``-th tx of the stream (a snapshot's base, verified by the peers); the txs
        it held."""
        dropped = self.txs
        self.retreats += 1
        self.held_of.clear()
        self.seqs, self.digests, self.txs = [], [], []
        untrack_all((self.seqs, self.digests, self.txs))
        self._count(-self.bytes)
        self.trimmed_seq = base_seq
        self.trimmed_digest = base_digest
        self.trimmed_count = base_count
        self.verified_seq = base_seq
        self.readable_seq = min(self.readable_seq, base_seq)
        return dropped

    def sheddable(self, keep_from: int) -> int:
        """How many of the oldest entries may go: readable ones (a reader of what the ring
        dropped is served from the log, up to where the ring starts, so only what readers may
        see goes), none at or above ``keep_from`` (a seq someone still needs: a publish
        waiting for its answer, the vote, a write the log has yet to confirm)."""
        return min(bisect_right(self.seqs, self.readable_seq), bisect_left(self.seqs, keep_from))

    def trim(self, keep_from: int) -> None:
        """Drop the oldest entries beyond ``capacity`` and ``bytes_max`` that may go."""
        if not self.over_capacity():
            return
        limit = self.sheddable(keep_from)
        txs = self.txs
        cut = min(limit, max(0, len(self.seqs) - self.capacity))
        freed = txs_bytes(txs[:cut])
        while cut < limit and self.bytes - freed > self.bytes_max:  # the fewest for both bounds
            freed += tx_bytes(txs[cut])
            cut += 1
        self._drop(cut, freed)

    def shed_before(self, keep_from: int) -> None:
        """Drop every entry below ``keep_from`` that may go (the node's memory budget asks)."""
        cut = self.sheddable(keep_from)
        self._drop(cut, txs_bytes(self.txs[:cut]))

    def _drop(self, cut: int, freed: int) -> None:
        if cut <= 0:
            return
        self._count(-freed)
        self.trimmed_seq = self.seqs[cut - 1]
        self.trimmed_digest = self.digests[cut - 1]
        self.trimmed_count += cut
        del self.seqs[:cut]
        del self.digests[:cut]
        del self.txs[:cut]

    def _count(self, change: int) -> None:
        self.bytes += change
        self.ring.add(change)
