"""The txs in flight a coordinator may have to find by key: a retry of one attaches to it.

How this works: a replica notes every batch it takes and does nothing more with it, so one that
coordinates nothing never pays for an index. A lookup first sorts the batches noted since the
last one: a batch of one producer's txs goes on that producer's shelf, summed up by its lowest
and highest msg id; any other batch is indexed at once (a dictionary entry per keyed tx). Then
the lookup indexes, of its own producer's shelf, only the batches whose msg ids meet the ones it
asks about. A pipelined producer's requests in flight are so never indexed while it sends new
ids (indexing every batch at every lookup would cost the coordinator 0.29 us per tx), and a lookup
costs what arrived since the last one and what its own producer has in flight, not every batch
in flight (as it would for many producers sending a message each).

A batch the stable head has passed is dropped (``passed``): its txs are folded or came too
late to be. Indexing filters txs at or below the head for the same reason, and an indexed tx
the head passed is dropped too (its coordinator's epoch was cut, or it came too late), so such
a tx is never found: a retry of it gets a seq of its own instead of attaching to a tx that will
never be verified (and being answered ``not_committed`` again at once, until its deadline).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import repeat

from relay.core.kept import Key
from relay.core.messages import Tx, msg_id_of, producer_id_of


class _Shelved:
    __slots__ = ("high", "low", "txs")

    def __init__(self, txs: Sequence[Tx], low: int, high: int) -> None:
        self.txs, self.low, self.high = txs, low, high


class InFlight:
    __slots__ = ("by_key", "noted", "shelves")

    def __init__(self) -> None:
        self.by_key: dict[Key, Tx] = {}  # the txs indexed so far
        self.noted: list[Sequence[Tx]] = []  # batches since the last lookup, in seq order each
        self.shelves: dict[str, list[_Shelved]] = {}  # producer id -> its batches, unindexed

    def note(self, txs: Sequence[Tx]) -> None:
        if txs:
            self.noted.append(txs)

    def clear(self) -> None:
        self.by_key.clear()
        self.noted.clear()
        self.shelves.clear()

    def size(self) -> int:
        """Txs held: indexed or not."""
        shelved = sum(len(s.txs) for shelf in self.shelves.values() for s in shelf)
        return len(self.by_key) + sum(map(len, self.noted)) + shelved

    def find(self, key: Key, head_seq: int) -> Tx | None:
        """The tx in flight above ``head_seq`` that carries ``key``."""
        self._index(key[0], key[1], key[1], head_seq)
        return self.by_key.get(key)

    def holds_any(self, keys: list[Key], msg_ids: list[int], head_seq: int) -> bool:
        """Whether a tx in flight above ``head_seq`` carries any of ``keys`` (one producer's,
        these msg ids)."""
        self._index(keys[0][0], min(msg_ids), max(msg_ids), head_seq)
        return bool(self.by_key) and any(map(self.by_key.__contains__, keys))

    def folded(self, keys: list[Key]) -> None:
        """These keys' txs are stable now, no longer in flight."""
        if self.by_key:
            deque(map(self.by_key.pop, keys, repeat(None)), maxlen=0)

    def passed(self, head_seq: int) -> None:
        """Drop the batches whose every tx is at or below the stable head, and the indexed
        txs at or below it: folded ones left at their fold, so these will never be (a cut
        epoch's, or too late)."""
        if self.by_key:
            gone = [key for key, tx in self.by_key.items() if tx.seq <= head_seq]
            for key in gone:
                del self.by_key[key]
        if self.noted:
            self.noted = [txs for txs in self.noted if txs[-1].seq > head_seq]
        for producer_id, shelf in list(self.shelves.items()):
            left = [s for s in shelf if s.txs[-1].seq > head_seq]
            if not left:
                del self.shelves[producer_id]
            elif len(left) != len(shelf):
                self.shelves[producer_id] = left

    def _index(self, producer_id: str, low: int, high: int, head_seq: int) -> None:
        """Sort the batches noted since the last lookup; index those of ``producer_id`` that
        may hold a msg id from ``low`` to ``high``."""
        for txs in self.noted:
            ids = list(map(producer_id_of, txs))
            if ids.count(ids[0]) != len(ids):
                self._add(txs, head_seq)
            elif ids[0]:  # a batch without producer ids holds no key
                msg_ids = list(map(msg_id_of, txs))
                shelved = _Shelved(txs, min(msg_ids), max(msg_ids))
                self.shelves.setdefault(ids[0], []).append(shelved)
        self.noted = []
        shelf = self.shelves.get(producer_id)
        if not shelf:
            return
        left: list[_Shelved] = []
        for s in shelf:
            if s.high < low or s.low > high:
                left.append(s)
            else:
                self._add(s.txs, head_seq)
        if not left:
            del self.shelves[producer_id]
        elif len(left) != len(shelf):
            self.shelves[producer_id] = left

    def _add(self, txs: Sequence[Tx], head_seq: int) -> None:
        self.by_key.update(
            [
                ((tx.producer_id, tx.msg_id), tx)
                for tx in txs
                if tx.producer_id and tx.seq > head_seq
            ]
        )
