from hypothesis import given
from hypothesis import strategies as st

from relay.core.digest import fold, genesis

txs = st.lists(
    st.tuples(st.integers(1, 2**62), st.integers(0, 1023), st.binary(max_size=64)), max_size=30
)


@given(txs)
def test_the_chain_is_a_pure_function_of_the_timeline(
    timeline: list[tuple[int, int, bytes]],
) -> None:
    def chain() -> bytes:
        d = genesis("s")
        for seq, origin, payload in timeline:
            d = fold(d, seq, origin, payload)
        return d

    assert chain() == chain()


@given(txs, st.integers(0, 29))
def test_changing_any_tx_changes_the_head(timeline: list[tuple[int, int, bytes]], i: int) -> None:
    if not timeline:
        return
    i %= len(timeline)
    tampered = list(timeline)
    seq, origin, payload = tampered[i]
    tampered[i] = (seq, origin, payload + b"!")

    def head(items: list[tuple[int, int, bytes]]) -> bytes:
        d = genesis("s")
        for s, o, p in items:
            d = fold(d, s, o, p)
        return d

    assert head(timeline) != head(tampered)


def test_streams_start_from_different_digests() -> None:
    assert genesis("a") != genesis("b")
    assert len(genesis("a")) == 32
