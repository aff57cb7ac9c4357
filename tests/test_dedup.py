"""The dedup index's fold: the batch path and the tx-by-tx path must never differ, and how a
timeline is cut into batches must never change what is kept."""

from collections.abc import Iterator
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core import dedup
from relay.core.dedup import DedupIndex
from relay.core.digest import genesis
from relay.core.flake import make_seq
from relay.core.messages import Tx

T0 = 1_800_000_000_000
Row = tuple[int, int, str, int, bytes, bytes | None, tuple[tuple[str, bytes], ...]]

# per tx: ms after the previous tx, origin, producer, msg id, payload, key, headers
tx_rows = st.lists(
    st.tuples(
        st.integers(0, 30),
        st.sampled_from([1, 2, 3]),
        st.sampled_from(["", "p", "q", "é"]),
        st.integers(1, 12),
        st.sampled_from([b"a", b"b"]),
        st.sampled_from([None, b"k"]),
        st.sampled_from([(), (("h", b"v"),)]),
    ),
    min_size=1,
    max_size=60,
)


def timeline(
    rows: list[Row],
) -> list[Tx]:
    ms, txs = T0, []
    for counter, (gap, origin, pid, msg_id, payload, key, headers) in enumerate(rows):
        ms += gap
        seq = make_seq(ms, origin, counter % 4096)
        txs.append(Tx(seq, 0, origin, 7, pid, msg_id, payload, key, headers))
    return sorted(txs)


def state(index: DedupIndex) -> tuple[object, ...]:
    return (
        index.kept.seq_by_key,
        list(index.kept.entries()),
        index.skipped,
        index.in_flight.by_key,
        [list(txs) for txs in index.in_flight.noted],
        {
            p: [(list(s.txs), s.low, s.high) for s in shelf]
            for p, shelf in index.in_flight.shelves.items()
        },
    )


def batches(txs: list[Tx], sizes: list[int]) -> Iterator[tuple[int, int, list[Tx]]]:
    """(batch number from 1, where the batch ends, the batch) of ``txs`` cut in ``sizes``,
    taken in turn."""
    pos = k = 0
    while pos < len(txs):
        size = sizes[k % len(sizes)]
        k += 1
        yield k, pos + size, txs[pos : pos + size]
        pos += size


@settings(max_examples=300)
@given(tx_rows, st.lists(st.integers(1, 12), min_size=1), st.integers(0, 40), st.integers(1, 12))
def test_fold_in_batches_equals_fold_tx_by_tx(
    rows: list[Row],
    cuts: list[int],
    window_ms: int,
    keys_max: int,
) -> None:
    """Same txs kept, same digests, same late count and the same index after every batch,
    whether a batch takes the C-speed path (every key new) or not; a tx at the head (an
    origin that broke its promise) and txs in flight (noted, then looked up) included."""
    txs = timeline(rows)
    fast, each = DedupIndex(window_ms, keys_max), DedupIndex(window_ms, keys_max)
    head_seq, head = 0, genesis("s")
    with patch.object(dedup, "BATCH_FOLD_MIN", 1):  # small batches take the passes too
        for k, end, batch in batches(txs, cuts):
            for index in (fast, each):
                index.note_pending(tuple(txs[end : end + 3]))
                index.lookup("p", k, head_seq)
            if k % 3 == 0 and head_seq:
                batch.insert(0, Tx(head_seq, 0, 1, 7, "p", 99, b"late"))
            got = fast.fold(list(batch), head_seq, head)
            assert got == each.fold_each(list(batch), head_seq, head)
            assert state(fast) == state(each)
            if got[0]:
                head_seq, head = got[0][-1].seq, got[1][-1]


@settings(max_examples=300)
@given(tx_rows, st.lists(st.integers(1, 15), min_size=1), st.integers(0, 40), st.integers(1, 12))
def test_how_a_timeline_is_cut_into_batches_changes_nothing(
    rows: list[Row],
    cuts: list[int],
    window_ms: int,
    keys_max: int,
) -> None:
    """Replicas fold one timeline in whatever batches their loop turns took: each must keep
    the same txs, with the same digests, and hold the same index after."""
    txs = timeline(rows)

    def fold_in(sizes: list[int]) -> tuple[object, ...]:
        index = DedupIndex(window_ms, keys_max)
        kept: list[Tx] = []
        digests: list[bytes] = []
        for _, _, batch in batches(txs, sizes):
            head_seq, head = (kept[-1].seq, digests[-1]) if kept else (0, genesis("s"))
            out = index.fold(batch, head_seq, head)
            kept += out[0]
            digests += out[1]
        return kept, digests, state(index)[:3]

    assert fold_in(cuts) == fold_in([len(txs)]) == fold_in([1])


def test_keys_out_of_order_from_a_peer_never_leave_a_kept_key_without_its_tag() -> None:
    """A faulty peer's snapshot keys may repeat a seq, and its slice may go below them: what
    is kept stays in ascending seqs, so every key the index holds is found with its own tag
    (a tag of -1 would make every retry of it a conflict)."""
    index, digest = DedupIndex(120_000, 100), b"\0" * 32
    index.restore(
        (("a", 1, 500, digest, 111), ("b", 1, 500, digest, 222), ("c", 1, 900, digest, 333))
    )
    index.add_verified((Tx(700, 0, 1, 0, "e", 1, b"p"),), (digest,))
    assert index.lookup("a", 1, 0) == (500, 111)
    assert index.lookup("c", 1, 0) == (900, 333)
    assert index.lookup("b", 1, 0) is None and index.lookup("e", 1, 0) is None


def test_a_tx_in_flight_that_was_never_folded_is_not_found_once_the_head_passed_it() -> None:
    """Found by chaos seed 5: a retry looked up a tx in flight (indexing it), the tx's
    coordinator was cut, and the timeline went on past it. Every later retry still found the
    dead tx, was answered ``not_committed`` at once, and retried, until the producer's deadline."""
    index, head = DedupIndex(120_000, 100), genesis("s")
    dead = Tx(make_seq(T0, 2, 0), 0, 2, 7, "p", 1, b"x")
    index.note_pending([dead])
    assert index.lookup("p", 1, 0) == (dead.seq, dedup.content_tag(dead))  # a retry attaches
    later = Tx(make_seq(T0 + 5, 1, 0), 0, 1, 7, "q", 1, b"y")  # the cut epoch's tx never comes
    index.fold([later], 0, head)
    assert index.lookup("p", 1, later.seq) is None  # the next retry gets a seq of its own
    assert not index.holds_any("p", [1], later.seq)
    assert index.in_flight.size() == 0  # and the index lets it go
