"""The dedup index's fold: the batch path and the tx-by-tx path must never differ."""

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.dedup import DedupIndex
from relay.core.digest import genesis
from relay.core.flake import make_seq
from relay.core.messages import Tx

T0 = 1_800_000_000_000

# one batch: per tx (ms after the previous tx, producer, msg id, payload, key)
batch = st.lists(
    st.tuples(
        st.integers(0, 40),
        st.sampled_from(["", "p", "q"]),
        st.integers(1, 12),
        st.sampled_from([b"a", b"b"]),
        st.sampled_from([None, b"k"]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=400)
@given(st.lists(batch, max_size=8), st.integers(0, 3), st.integers(1, 60), st.integers(2, 16))
def test_fold_in_batches_equals_fold_tx_by_tx(
    batches: list[list[tuple[int, str, int, bytes, bytes | None]]],
    late: int,
    window_ms: int,
    keys_max: int,
) -> None:
    """Same txs kept, same digests, same late count, and the same index after, whether a
    batch takes the C-speed path (every key new) or not: a difference would make replicas
    that fold the same timeline in different batches disagree."""
    fast, each = DedupIndex(window_ms, keys_max), DedupIndex(window_ms, keys_max)
    head_seq, head = 0, genesis("s")
    ms, counter = T0, 0
    for i, rows in enumerate(batches):
        txs = []
        for gap, pid, msg_id, payload, key in rows:
            ms += gap
            counter += 1
            txs.append(Tx(make_seq(ms, 1, counter % 4096), 0, 1, 7, pid, msg_id, payload, key))
        if i == late and head_seq:  # a tx at or below the head: an origin broke its promise
            txs.insert(0, Tx(head_seq, 0, 1, 7, "p", 99, b"late"))
        got = fast.fold(list(txs), head_seq, head)
        want = each.fold_each(list(txs), head_seq, head)
        assert got == want
        assert fast.stable == each.stable and list(fast.order) == list(each.order)
        assert fast.skipped == each.skipped
        if got[0]:
            head_seq, head = got[0][-1].seq, got[1][-1]
