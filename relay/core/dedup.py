"""Idempotent retries: which (producer id, msg id) a stream already holds.

How this works: a coordinator that already holds a key, stable or still in flight, attaches a
retry to it (``lookup``). A retry sent to another coordinator before the first copy reached it
gets a second seq, and the duplicate is removed deterministically when it is folded: every
replica folds the same txs in the same order, so every replica keeps the first copy and skips
the same later one (``fold``), remembering the skipped seq's original so its coordinator can
answer with it. Txs in flight are indexed only when a lookup needs them (``note_pending`` keeps
their batches; a node that coordinates nothing never indexes them): an index of every pending
tx would cost each replica a dictionary entry per tx. The index covers ``window_ms`` of seq time and
at most ``keys_max`` keys, and keeps each kept copy's digest, so a retry is answered even when
the original left the memory ring. The window moves as each tx is folded, measured from that
tx's seq, so what the index holds at any point of the timeline is a function of the timeline
alone: replicas that fold it in different batches skip the same copies.

A retry carries what the original carried. A *new* message that reuses a producer id and
message id (a producer restarted with a fixed id that numbers from 1 again) does not: each
kept copy's content tag (``content_tag``) is kept too, and a copy whose tag differs is a
conflict, refused (``conflicts``), never answered with the original's seq. Every replica
computes the same tags, so the decision at fold time is the same everywhere.

A named producer without a journal numbers its messages in *incarnations*
(``FENCING_IDS``): the high bits of a msg id are the millisecond it started, so a restarted
producer numbers above everything it sent before, and the index keeps each such producer's
newest incarnation among the txs it saw (``newest``). A request of an older incarnation
that carries any message the stream does not hold is refused (``superseded``): a second
live producer with the same id fences the first, as a Kafka producer's epoch does. The
coordinator decides on what its replica has seen; the timeline is never changed by it.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from itertools import islice, repeat
from operator import itemgetter, lt
from struct import Struct

from relay.core.digest import Folder
from relay.core.flake import TIME_SHIFT
from relay.core.in_flight import InFlight
from relay.core.kept import KeptCopies
from relay.core.messages import (
    Item,
    KeyRecord,
    Tx,
    msg_id_of,
    payload_of,
    plain,
    producer_key_of,
    seq_of,
)

_LENGTH = Struct(">I").pack
FENCING_IDS = 1 << 62  # msg ids from here up are (incarnation << COUNTER_BITS) + a counter
COUNTER_BITS = 22
NEWEST_MAX = 10_000  # producers whose newest incarnation a stream remembers
INCARNATIONS_FROM_MS = 1_577_836_800_000  # 2020-01-01: incarnations count ms from there
FUTURE_MS = 60_000  # an incarnation this far ahead of the node's clock fences nobody


def incarnation_start(wall_ms: int) -> int:
    """The first msg id of a producer incarnation started at ``wall_ms``."""
    return FENCING_IDS + ((wall_ms - INCARNATIONS_FROM_MS) << COUNTER_BITS)


BATCH_FOLD_MIN = 16  # a batch folds in passes from this size (1 tx: 4.7 us so, 2.3 alone)


def content_tag(message: Tx | Item) -> int:
    """A fingerprint of what a message carries (payload, key, headers): equal for a retry,
    different (but for a 2^-32 chance) for another message."""
    tag = zlib.crc32(message.payload)
    if message.key is None and not message.headers:
        return tag
    if message.key is not None:
        tag = zlib.crc32(b"\x01" + _LENGTH(len(message.key)) + message.key, tag)
    for name, value in message.headers:
        encoded = name.encode()
        tag = zlib.crc32(_LENGTH(len(encoded)) + encoded + _LENGTH(len(value)) + value, tag)
    return tag


def content_tags(txs: Sequence[Tx]) -> Iterable[int]:
    """``content_tag`` of each of ``txs``, at C speed for a plain batch (payloads only)."""
    return map(zlib.crc32, map(payload_of, txs)) if plain(txs) else map(content_tag, txs)


class DedupIndex:
    __slots__ = (
        "folder",
        "in_flight",
        "kept",
        "keys_max",
        "newest",
        "skipped",
        "skips",
        "window_ms",
    )

    def __init__(self, window_ms: int, keys_max: int) -> None:
        self.window_ms = window_ms
        self.keys_max = keys_max
        self.folder = Folder()  # folds the digest of each kept tx
        self.kept = KeptCopies()  # each key's kept copy over the stable timeline
        self.in_flight = InFlight()  # the txs held but not yet stable
        # a later copy's seq -> (tx, the kept copy's seq, whether its content differs)
        self.skipped: dict[int, tuple[Tx, int, bool]] = {}
        self.skips = 0  # changes when later copies are skipped or dropped (waiters look again)
        self.newest: dict[str, int] = {}  # producer id -> its newest incarnation seen

    def size(self) -> int:
        """Keys held: kept copies, txs in flight and skipped later copies."""
        return len(self.kept) + self.in_flight.size() + len(self.skipped)

    def note_pending(self, txs: Sequence[Tx]) -> None:
        """Txs held but not yet stable (a batch in seq order)."""
        self.in_flight.note(txs)
        if txs and max(map(msg_id_of, txs)) >= FENCING_IDS:
            newest = self.newest
            for tx in txs:
                if tx.msg_id >= FENCING_IDS:
                    born = (tx.msg_id - FENCING_IDS) >> COUNTER_BITS
                    if born > newest.get(tx.producer_id, -1):
                        newest.pop(tx.producer_id, None)  # the most recent stays the last
                        newest[tx.producer_id] = born
            if len(newest) > NEWEST_MAX:
                for producer_id in list(islice(newest, len(newest) - NEWEST_MAX // 2)):
                    del newest[producer_id]

    def superseded(
        self, producer_id: str, msg_ids: list[int], head_seq: int, wall_ms: int
    ) -> int | None:
        """The newer incarnation of ``producer_id`` that fences a request of these msg ids
        (one that is not all retries of messages the stream holds), or None. An incarnation
        more than ``FUTURE_MS`` ahead of this node's clock fences nobody: a message from a
        producer whose clock is wrong (or forged) would lock its id out."""
        top = max(msg_ids)
        newest = self.newest.get(producer_id)
        if newest is None or top < FENCING_IDS or (top - FENCING_IDS) >> COUNTER_BITS >= newest:
            return None
        if newest > wall_ms - INCARNATIONS_FROM_MS + FUTURE_MS:
            return None
        held = [self.lookup(producer_id, msg_id, head_seq) for msg_id in msg_ids]
        return None if all(h is not None for h in held) else newest

    def forget_pending(self) -> None:
        self.in_flight.clear()

    def lookup(self, producer_id: str, msg_id: int, head_seq: int) -> tuple[int, int] | None:
        """(seq, content tag) of the tx that already carries the key, stable or in flight
        (above the stable head ``head_seq``)."""
        key = (producer_id, msg_id)
        seq = self.kept.seq_of(key)
        if seq is not None:
            return seq, self.kept.tag_at(seq)
        held = self.in_flight.find(key, head_seq)
        return (held.seq, content_tag(held)) if held is not None else None

    def holds_any(self, producer_id: str, msg_ids: list[int], head_seq: int) -> bool:
        """Whether a tx, stable or in flight, carries any of these keys (C-speed passes)."""
        keys = list(zip(repeat(producer_id), msg_ids))
        return self.kept.holds_any(keys) or self.in_flight.holds_any(keys, msg_ids, head_seq)

    def fold(
        self, txs: list[Tx], head_seq: int, previous: bytes
    ) -> tuple[list[Tx], list[bytes], int]:
        """Fold ``txs`` (in seq order) onto a timeline ending at ``head_seq`` with digest
        ``previous``: the txs kept, the digest after each, and how many were late (at or
        below the head by then: an origin broke its promise; the past is never reordered).
        A later copy of a key already stable (a retry, or a conflict when its content
        differs) is skipped. Before each tx the window moves, measured from that tx's own
        seq, so what the index holds at every tx depends on the timeline alone, never on how
        a replica's loop turns cut it into batches: every replica skips the same copies.

        The usual batch (seqs ascending above the head, every tx keyed, no key held or
        repeated) keeps every tx whatever the window does meanwhile, so it is folded in
        passes at C speed and the window moved once, after it (``fold_each`` is the same
        fold, tx by tx, and the cheaper one for a batch of fewer than ``BATCH_FOLD_MIN``
        txs: a lone publish's)."""
        if len(txs) < BATCH_FOLD_MIN or txs[0].seq <= head_seq:
            return self.fold_each(txs, head_seq, previous)
        keys = list(map(producer_key_of, txs))
        kept = self.kept
        if not all(map(itemgetter(0), keys)) or kept.holds_any(keys):
            return self.fold_each(txs, head_seq, previous)
        seqs = list(map(seq_of, txs))
        if not all(map(lt, seqs, islice(seqs, 1, None))):  # only a faulty origin's chain
            return self.fold_each(txs, head_seq, previous)
        if not kept.claim(keys, seqs):  # the batch repeats a key
            return self.fold_each(txs, head_seq, previous)
        digests = self.folder.chain(previous, txs)
        kept.record(seqs, keys, list(content_tags(txs)), digests)
        self.in_flight.folded(keys)
        last = seqs[-1]
        kept.forget_before(((last >> TIME_SHIFT) - self.window_ms) << TIME_SHIFT)
        if len(kept) > self.keys_max:
            kept.forget_first(len(kept) - self.keys_max)
        self.in_flight.passed(last)
        return txs, digests, 0

    def fold_each(
        self, txs: list[Tx], head_seq: int, previous: bytes
    ) -> tuple[list[Tx], list[bytes], int]:
        """``fold``, one tx at a time."""
        kept, keys_max, pending = self.kept, self.keys_max, self.in_flight.by_key
        window, shift = self.window_ms + 1, TIME_SHIFT
        oldest = kept.oldest_seq()
        # the first seq whose window no longer covers the oldest key
        window_end = ((oldest >> shift) + window) << shift if oldest is not None else 0
        kept_txs: list[Tx] = []
        digests: list[bytes] = []
        digest, late = previous, 0
        fold = self.folder.fold
        for tx in txs:
            seq, _, origin, _, producer_id, msg_id, payload, tx_key, headers = tx
            if seq <= head_seq:
                late += 1
                continue
            if window_end and seq >= window_end:
                kept.forget_before(((seq >> shift) - self.window_ms) << shift)
                oldest = kept.oldest_seq()
                window_end = ((oldest >> shift) + window) << shift if oldest is not None else 0
            if producer_id:
                key = (producer_id, msg_id)
                if pending:
                    pending.pop(key, None)
                tag = content_tag(tx)
                held = kept.seq_of(key)
                if held is not None:
                    self._skip(tx, held, kept.tag_at(held) != tag)
                    continue
                if len(kept) >= keys_max:
                    kept.forget_first(len(kept) - keys_max + 1)
                    oldest = kept.oldest_seq()
                    window_end = ((oldest >> shift) + window) << shift if oldest is not None else 0
                digest = fold(digest, seq, origin, producer_id, msg_id, payload, tx_key, headers)
                if not len(kept):
                    window_end = ((seq >> shift) + window) << shift
                kept.add(seq, key, tag, digest)
            else:
                digest = fold(digest, seq, origin, producer_id, msg_id, payload, tx_key, headers)
            kept_txs.append(tx)
            digests.append(digest)
            head_seq = seq
        self.in_flight.passed(head_seq)
        return kept_txs, digests, late

    def _skip(self, tx: Tx, original: int, differs: bool) -> None:
        """Remember a skipped later copy (what its coordinator answers with: local)."""
        if len(self.skipped) >= self.keys_max:
            for seq in sorted(self.skipped)[: len(self.skipped) // 2]:
                del self.skipped[seq]
        self.skipped[tx.seq] = (tx, original, differs)
        self.skips += 1

    def as_logged(self, txs: tuple[Tx, ...]) -> tuple[Tx, ...]:
        """``txs`` as a log keeps them: a ``prev`` that names a copy the fold skipped names
        that copy's own ``prev`` instead. The log holds the timeline, never a skipped copy,
        so after a restart a lane taking the txs back (a refold) would wait forever for the
        copy; a ``prev`` is not in the digest. In memory the txs keep their ``prev``: a refold
        that still holds the copy puts it back too, and chains through it."""
        skipped = self.skipped
        if not skipped:
            return txs
        out = list(txs)
        for at, tx in enumerate(txs):
            prev = tx.prev
            while prev in skipped:
                prev = skipped[prev][0].prev
            if prev != tx.prev:
                out[at] = tx._replace(prev=prev)
        return tuple(out)

    def digest_of(self, seq: int) -> bytes | None:
        """The digest of the kept copy at ``seq`` (a search: for a tx the ring left)."""
        return self.kept.digest_at(seq)

    def original_of(self, seq: int) -> int | None:
        """For a skipped duplicate, the seq of the copy that was kept."""
        found = self.skipped.get(seq)
        return found[1] if found else None

    def conflicts(self, seq: int) -> bool:
        """Whether a skipped copy carried other content than the copy that was kept."""
        found = self.skipped.get(seq)
        return found is not None and found[2]

    def truncate(self, keep_upto: int) -> list[Tx]:
        """Forget every key folded after ``keep_upto``; the skipped copies cut off."""
        self.kept.truncate_after(keep_upto)
        dropped = [self.skipped.pop(seq)[0] for seq in [s for s in self.skipped if s > keep_upto]]
        if dropped:
            self.skips += 1  # whoever waits on the original of a dropped copy looks again
        self.forget_pending()
        return dropped

    def restore(self, keys: tuple[KeyRecord, ...]) -> None:
        """Start over from a snapshot's (or the log's) keys."""
        self.kept.clear()
        for pid, mid, seq, digest, tag in sorted(keys, key=itemgetter(2)):  # fold order
            self.kept.add(seq, (pid, mid), tag, digest)

    def add_verified(self, txs: tuple[Tx, ...], digests: tuple[bytes, ...]) -> None:
        """Txs adopted from a verified slice (already free of duplicates)."""
        for tx, digest in zip(txs, digests, strict=True):
            if tx.producer_id:
                self.kept.add(tx.seq, (tx.producer_id, tx.msg_id), content_tag(tx), digest)

    def keys_upto(self, seq: int) -> tuple[KeyRecord, ...]:
        """The keys folded at or before ``seq``, for a snapshot."""
        by_key = self.kept.seq_by_key
        return tuple(
            (key[0], key[1], s, digest, tag)
            for s, key, tag, digest in self.kept.entries()
            if s <= seq and by_key.get(key) == s
        )
