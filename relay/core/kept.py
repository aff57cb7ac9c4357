"""The kept copies a dedup index holds: which seq keeps each (producer id, msg id), and per
kept seq its key, content tag and digest, in fold order.

How this works: a dict maps each key to the seq of its kept copy; the fold order is a deque
of blocks of parallel lists (seqs, keys, tags, digests), each block at most ``BLOCK_MAX``
entries, its forgotten prefix skipped by ``start``. A batch is added and the oldest entries
are forgotten in C-speed passes (a slice, ``map`` over ``dict.pop``), not per entry: a tuple
per key for the dict's value and one per key in an order deque, added and popped one by one,
would cost each replica about a quarter of a microsecond per tx. A seq's tag and digest are found by
bisection (a retry, a duplicate, a digest the ring no longer holds: the rare paths).

An entry whose key maps to another seq (the key was kept again after it, by a verified slice
adopted or a restore) is forgotten without touching the dict."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator
from itertools import repeat
from typing import Any

from relay.core.untracked import untrack, untrack_all

Key = tuple[str, int]
BLOCK_MAX = 4096  # entries per block: what a block's forgotten prefix can hold at most


class _Block:
    __slots__ = ("digests", "keys", "seqs", "start", "tags")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.keys: list[Key] = []
        self.tags: list[int] = []
        self.digests: list[bytes] = []
        self.start = 0  # entries before it are forgotten
        untrack_all((self.seqs, self.keys, self.tags, self.digests))  # relay/core/untracked.py


def _last_seq(block: _Block) -> int:
    return block.seqs[-1]


class KeptCopies:
    __slots__ = ("blocks", "count", "seq_by_key")

    def __init__(self) -> None:
        self.seq_by_key: dict[Key, int] = {}  # untracked while its keys are (untracked.py)
        self.blocks: deque[_Block] = deque()  # every block holds a live entry
        self.count = 0  # live entries

    def __len__(self) -> int:
        return self.count

    def seq_of(self, key: Key) -> int | None:
        return self.seq_by_key.get(key)

    def holds_any(self, keys: list[Key]) -> bool:
        return any(map(self.seq_by_key.__contains__, keys))

    def oldest_seq(self) -> int | None:
        if not self.blocks:
            return None
        first = self.blocks[0]
        return first.seqs[first.start]

    def add(self, seq: int, key: Key, tag: int, digest: bytes) -> None:
        """Keep one copy, at a seq above every kept one; one at or below the newest is not
        kept (a fold never asks it: only a faulty peer's keys or slice could), so seqs ascend
        and bisection finds each."""
        block = self.blocks[-1] if self.blocks else None
        if block is not None and seq <= block.seqs[-1]:
            return
        # one object for the dict and the block, out of the collector's sight (compiled, a Key
        # is an unboxed tuple, and each use as an object would box it anew)
        held: Any = key
        untrack(held)
        self.seq_by_key[held] = seq
        if block is None or len(block.seqs) >= BLOCK_MAX:
            block = _Block()
            self.blocks.append(block)
        block.seqs.append(seq)
        block.keys.append(held)
        block.tags.append(tag)
        block.digests.append(digest)
        self.count += 1

    def claim(self, keys: list[Key], seqs: list[int]) -> bool:
        """Map ``keys``, none of them held, to ``seqs``, unless two of them are the same key:
        then nothing changes and the answer is False. ``record`` completes a claim."""
        by_key = self.seq_by_key
        before = len(by_key)
        untrack_all(keys)
        by_key.update(zip(keys, seqs, strict=True))
        if len(by_key) - before == len(keys):
            return True
        deque(map(by_key.pop, keys, repeat(None)), maxlen=0)  # none was held: all go
        return False

    def record(
        self, seqs: list[int], keys: list[Key], tags: list[int], digests: list[bytes]
    ) -> None:
        """The fold order's entries of a ``claim`` (seqs ascending, above every kept one)."""
        at, total = 0, len(seqs)
        blocks = self.blocks
        while at < total:
            block = blocks[-1] if blocks else None
            if block is None or len(block.seqs) >= BLOCK_MAX:
                block = _Block()
                blocks.append(block)
            end = min(total, at + BLOCK_MAX - len(block.seqs))
            block.seqs += seqs[at:end]
            block.keys += keys[at:end]
            block.tags += tags[at:end]
            block.digests += digests[at:end]
            at = end
        self.count += total

    def forget_first(self, count: int) -> None:
        """Forget the ``count`` oldest entries."""
        blocks, by_key = self.blocks, self.seq_by_key
        count = min(count, self.count)
        self.count -= count
        while count:
            block = blocks[0]
            start, end = block.start, len(block.seqs)
            stop = min(end, start + count)
            if start == 0 and stop == end:
                keys, seqs = block.keys, block.seqs
            else:
                keys, seqs = block.keys[start:stop], block.seqs[start:stop]
            popped = list(map(by_key.pop, keys, repeat(None)))
            if popped != seqs:
                _put_back(by_key, keys, seqs, popped)
            count -= stop - start
            block.start = stop
            if stop == end:
                blocks.popleft()

    def forget_before(self, horizon: int) -> None:
        """Forget every entry whose seq is below ``horizon``."""
        count = 0
        for block in self.blocks:
            if block.seqs[-1] < horizon:
                count += len(block.seqs) - block.start
                continue
            count += bisect_left(block.seqs, horizon, block.start) - block.start
            break
        if count:
            self.forget_first(count)

    def _locate(self, seq: int) -> tuple[_Block, int] | None:
        blocks = self.blocks
        b = bisect_left(blocks, seq, key=_last_seq)
        if b == len(blocks):
            return None
        block = blocks[b]
        i = bisect_left(block.seqs, seq, block.start)
        return (block, i) if i < len(block.seqs) and block.seqs[i] == seq else None

    def tag_at(self, seq: int) -> int:
        """The content tag of the entry at ``seq``: a seq ``seq_of`` gave, always held while
        seqs ascend (as every fold, restore and adopted slice keeps them); else -1, which no
        content tag equals."""
        found = self._locate(seq)
        return -1 if found is None else found[0].tags[found[1]]

    def digest_at(self, seq: int) -> bytes | None:
        """The digest of the kept copy at ``seq``, if it is still held."""
        found = self._locate(seq)
        if found is None:
            return None
        block, i = found
        return block.digests[i] if self.seq_by_key.get(block.keys[i]) == seq else None

    def truncate_after(self, keep_upto: int) -> None:
        """Forget every entry above ``keep_upto``."""
        blocks, by_key = self.blocks, self.seq_by_key
        while blocks and blocks[-1].seqs[-1] > keep_upto:
            block = blocks[-1]
            i = bisect_right(block.seqs, keep_upto, block.start)
            for seq, key in zip(block.seqs[i:], block.keys[i:], strict=True):
                if by_key.get(key) == seq:
                    del by_key[key]
            self.count -= len(block.seqs) - i
            if i == block.start:
                blocks.pop()
                continue
            del block.seqs[i:], block.keys[i:], block.tags[i:], block.digests[i:]

    def clear(self) -> None:
        self.seq_by_key.clear()
        self.blocks.clear()
        self.count = 0

    def entries(self) -> Iterator[tuple[int, Key, int, bytes]]:
        """(seq, key, tag, digest) of every entry, in fold order."""
        for block in self.blocks:
            s = block.start
            yield from zip(
                block.seqs[s:], block.keys[s:], block.tags[s:], block.digests[s:], strict=True
            )


def _put_back(
    by_key: dict[Key, int], keys: list[Key], seqs: list[int], popped: list[int | None]
) -> None:
    """Undo the pops of keys that map to none of the forgotten entries (a key kept again
    later). Each key was popped once, at its first forgotten entry."""
    forgotten = set(zip(keys, seqs, strict=True))
    held: list[Any] = keys  # the list's own (untracked) objects: compiled, a Key is unboxed
    for key, was in zip(held, popped, strict=True):
        if was is not None and (key, was) not in forgotten:
            by_key[key] = was
