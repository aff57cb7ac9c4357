"""What a replica holds per tx is out of the cyclic collector's sight (relay/core/untracked.py):
a young collection then scans none of it, however many txs a node holds."""

import gc

import pytest

from relay.core.dedup import DedupIndex
from relay.core.digest import genesis
from relay.core.flake import make_seq
from relay.core.messages import Tx
from relay.core.timeline import Timeline
from relay.core.untracked import untrack, untrack_all

T0 = 1_800_000_000_000


def held_txs(count: int) -> list[Tx]:
    return [
        Tx(make_seq(T0 + i // 100, 1, i % 100), 0, 1, 7, "p", i, b"x", b"k", (("h", b"v"),))
        for i in range(count)
    ]


@pytest.mark.parametrize("batch", [1, 500], ids=["tx by tx", "in batches"])
def test_a_folded_and_held_tx_and_its_key_are_not_tracked(batch: int) -> None:
    stream = "s"
    index, line = DedupIndex(window_ms=60_000, keys_max=100_000), Timeline(stream, 100_000)
    txs = held_txs(5_000)
    assert all(map(gc.is_tracked, txs))  # as made: a named tuple is tracked
    previous = genesis(stream)
    for at in range(0, len(txs), batch):
        kept, digests, late = index.fold(txs[at : at + batch], line.head_seq, previous)
        assert len(kept) == len(txs[at : at + batch]) and not late
        line.extend(kept, digests)
        previous = digests[-1]
    kept_copies = index.kept
    held = [line.seqs, line.digests, line.txs, kept_copies.seq_by_key, *line.txs]
    held += [k for b in kept_copies.blocks for k in (b.seqs, b.keys, b.tags, b.digests, *b.keys)]
    assert len(kept_copies) == len(txs) and len(line.txs) == len(txs)
    assert not any(map(gc.is_tracked, held))
    gc.collect()  # a full collection finds none of it again
    assert not any(map(gc.is_tracked, held))


def test_a_restarted_timeline_holds_its_txs_untracked_too() -> None:
    line = Timeline("s", 10)
    line.restart_at(make_seq(T0, 1, 0), genesis("s"), 3)
    tx = held_txs(1)[0]._replace(seq=make_seq(T0 + 1, 1, 0))
    line.extend([tx], [b"d" * 32])
    assert not any(map(gc.is_tracked, (line.seqs, line.digests, line.txs, tx)))


def test_untracking_leaves_what_the_collector_never_tracked_and_refcounting_frees() -> None:
    untrack(12345678901234567890)  # an int has no place in the collector's lists
    untrack_all([7, "a", b"b", None])

    class Held(list[object]):
        freed = False

        def __del__(self) -> None:
            Held.freed = True

    held = Held()
    untrack(held)
    assert not gc.is_tracked(held)
    del held  # the last reference: freed at once, as before
    assert Held.freed
