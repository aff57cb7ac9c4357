"""Idempotent retries: which (producer id, msg id) a stream already holds.

How this works: a coordinator that already holds a key attaches a retry to it (``lookup``,
over stable and pending txs). A retry sent to another coordinator gets a second seq, and the
duplicate is removed deterministically when it is folded: every replica folds the same txs
in the same order, so every replica keeps the first copy and skips the same later one
(``admit``), remembering the skipped seq's original so its coordinator can answer with it.
The index covers ``window_ms`` of seq time and at most ``keys_max`` keys, and keeps each kept
copy's digest, so a retry is answered even when the original left the memory ring.

A retry carries what the original carried. A *new* message that reuses a producer id and
message id (a producer restarted with a fixed id that numbers from 1 again) does not: each
kept copy's content tag (``content_tag``) is kept too, and a copy whose tag differs is a
conflict, refused (``conflicts``), never answered with the original's seq. Every replica
computes the same tags, so the decision at fold time is the same everywhere.
"""

from __future__ import annotations

import zlib
from collections import deque
from struct import Struct

from relay.core.flake import seq_unix_ms
from relay.core.messages import Item, KeyRecord, Tx

Key = tuple[str, int]
_LENGTH = Struct(">I").pack


def content_tag(message: Tx | Item) -> int:
    """A fingerprint of what a message carries (payload, key, headers): equal for a retry,
    different (but for a 2^-32 chance) for another message."""
    tag = zlib.crc32(message.payload)
    if message.key is not None:
        tag = zlib.crc32(b"\x01" + _LENGTH(len(message.key)) + message.key, tag)
    for name, value in message.headers:
        encoded = name.encode()
        tag = zlib.crc32(_LENGTH(len(encoded)) + encoded + _LENGTH(len(value)) + value, tag)
    return tag


class DedupIndex:
    __slots__ = (
        "digests",
        "keys_max",
        "order",
        "pending",
        "skipped",
        "stable",
        "tags",
        "window_ms",
    )

    def __init__(self, window_ms: int, keys_max: int) -> None:
        self.window_ms = window_ms
        self.keys_max = keys_max
        self.stable: dict[Key, int] = {}  # key -> seq, over the stable timeline
        self.order: deque[tuple[int, Key]] = deque()  # (seq, key) in fold order
        self.pending: dict[Key, Tx] = {}  # key -> the tx held but not yet stable
        # a later copy's seq -> (tx, the kept copy's seq, whether its content differs)
        self.skipped: dict[int, tuple[Tx, int, bool]] = {}
        self.digests: dict[int, bytes] = {}  # seq of a kept keyed tx -> its digest
        self.tags: dict[int, int] = {}  # seq of a kept keyed tx -> its content tag

    def note_pending(self, tx: Tx) -> None:
        if tx.producer_id:
            self.pending[(tx.producer_id, tx.msg_id)] = tx

    def lookup(self, producer_id: str, msg_id: int) -> tuple[int, int] | None:
        """(seq, content tag) of the tx that already carries the key, stable or pending."""
        key = (producer_id, msg_id)
        seq = self.stable.get(key)
        if seq is not None:
            return seq, self.tags[seq]
        held = self.pending.get(key)
        return (held.seq, content_tag(held)) if held is not None else None

    def admit(self, tx: Tx) -> bool:
        """``tx`` is being folded: False if it is a later copy of a key already stable (a
        retry, or a conflict when its content differs)."""
        if not tx.producer_id:
            return True
        key = (tx.producer_id, tx.msg_id)
        self.pending.pop(key, None)
        original = self.stable.get(key)
        tag = content_tag(tx)
        if original is not None:
            self.skipped[tx.seq] = (tx, original, self.tags[original] != tag)
            return False
        self.stable[key] = tx.seq
        self.tags[tx.seq] = tag
        self.order.append((tx.seq, key))
        return True

    def folded(self, tx: Tx, digest: bytes) -> None:
        """An admitted tx was folded with ``digest``."""
        if tx.producer_id:
            self.digests[tx.seq] = digest

    def digest_of(self, seq: int) -> bytes | None:
        return self.digests.get(seq)

    def original_of(self, seq: int) -> int | None:
        """For a skipped duplicate, the seq of the copy that was kept."""
        found = self.skipped.get(seq)
        return found[1] if found else None

    def conflicts(self, seq: int) -> bool:
        """Whether a skipped copy carried other content than the copy that was kept."""
        found = self.skipped.get(seq)
        return found is not None and found[2]

    def evict(self, head_seq: int) -> None:
        horizon = seq_unix_ms(head_seq) - self.window_ms
        order = self.order
        while order and (len(order) > self.keys_max or seq_unix_ms(order[0][0]) < horizon):
            seq, key = order.popleft()
            self.digests.pop(seq, None)
            self.tags.pop(seq, None)
            if self.stable.get(key) == seq:
                del self.stable[key]
        if len(self.skipped) > self.keys_max:
            for seq in sorted(self.skipped)[: len(self.skipped) // 2]:
                del self.skipped[seq]

    def truncate(self, keep_upto: int) -> list[Tx]:
        """Forget every key folded after ``keep_upto``; the skipped copies cut off."""
        while self.order and self.order[-1][0] > keep_upto:
            seq, key = self.order.pop()
            self.digests.pop(seq, None)
            self.tags.pop(seq, None)
            if self.stable.get(key) == seq:
                del self.stable[key]
        dropped = [self.skipped.pop(seq)[0] for seq in [s for s in self.skipped if s > keep_upto]]
        self.pending.clear()
        return dropped

    def restore(self, keys: tuple[KeyRecord, ...]) -> None:
        """Start over from a snapshot's (or the log's) keys."""
        self.stable.clear()
        self.order.clear()
        self.digests.clear()
        self.tags.clear()
        for pid, mid, seq, digest, tag in keys:
            self.stable[(pid, mid)] = seq
            self.order.append((seq, (pid, mid)))
            self.digests[seq] = digest
            self.tags[seq] = tag

    def add_verified(self, txs: tuple[Tx, ...], digests: tuple[bytes, ...]) -> None:
        """Txs adopted from a verified slice (already free of duplicates)."""
        for tx, digest in zip(txs, digests, strict=True):
            if tx.producer_id:
                key = (tx.producer_id, tx.msg_id)
                self.stable[key] = tx.seq
                self.order.append((tx.seq, key))
                self.digests[tx.seq] = digest
                self.tags[tx.seq] = content_tag(tx)

    def keys_upto(self, seq: int) -> tuple[KeyRecord, ...]:
        """The keys folded at or before ``seq``, for a snapshot."""
        digests, tags = self.digests, self.tags
        return tuple(
            (pid, mid, s, digests[s], tags[s]) for (s, (pid, mid)) in self.order if s <= seq
        )
