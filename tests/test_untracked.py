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


def test_the_kept_keys_stay_untracked_however_they_are_put_back_restored_or_adopted() -> None:
    index = DedupIndex(window_ms=60_000, keys_max=100_000)
    kept = index.kept
    kept.add(10, ("p", 1), 0, b"a")
    kept.add(11, ("p", 2), 0, b"b")
    kept.add(12, ("p", 1), 0, b"c")  # kept again later: forgetting seq 10 puts it back
    kept.forget_first(2)
    assert kept.seq_of(("p", 1)) == 12 and not gc.is_tracked(kept.seq_by_key)
    index.restore((("q", 1, 20, b"d", 0), ("q", 2, 21, b"e", 0)))
    index.add_verified(tuple(held_txs(3)[1:]), (b"f", b"g"))
    assert len(kept) == 4 and not gc.is_tracked(kept.seq_by_key)
    assert not any(map(gc.is_tracked, kept.seq_by_key))


def test_a_timeline_keeps_its_lists_untracked_as_it_trims_and_truncates() -> None:
    line, txs = Timeline("s", 64), held_txs(200)
    line.extend(txs, [b"d" * 32] * len(txs))
    line.verify_upto(txs[150].seq)
    line.make_readable(txs[150].seq)
    line.shed_before(txs[20].seq)
    assert line.earliest_seq() == txs[20].seq
    line.trim(1 << 62)
    assert line.earliest_seq() > txs[20].seq
    line.truncate_after(txs[180].seq)
    assert line.head_seq == txs[180].seq
    assert not any(map(gc.is_tracked, (line.seqs, line.digests, line.txs, *line.txs)))


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
