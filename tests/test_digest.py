from hypothesis import given
from hypothesis import strategies as st

from relay.core.digest import Folder, fold, genesis

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
            d = fold(d, seq, origin, "", 0, payload)
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
            d = fold(d, s, o, "", 0, p)
        return d

    assert head(timeline) != head(tampered)


def test_streams_start_from_different_digests() -> None:
    assert genesis("a") != genesis("b")
    assert len(genesis("a")) == 32


def test_the_digest_covers_key_and_headers() -> None:
    g = genesis("s")
    plain = fold(g, 1, 1, "p", 1, b"x")
    assert fold(g, 1, 1, "p", 1, b"x", None, ()) == plain
    variants = {
        plain,
        fold(g, 1, 1, "p", 1, b"x", b""),  # an empty key is a key
        fold(g, 1, 1, "p", 1, b"x", b"k"),
        fold(g, 1, 1, "p", 1, b"x", None, (("h", b""),)),
        fold(g, 1, 1, "p", 1, b"x", None, (("h", b"v"),)),
        fold(g, 1, 1, "p", 1, b"x", None, (("h", b"v"), ("h", b"v"))),
        fold(g, 1, 1, "p", 2, b"x"),
        fold(g, 1, 1, "q", 1, b"x"),
        fold(g, 1, 1, "", 1, b"px"),  # field boundaries are framed
    }
    assert len(variants) == 9


def test_the_record_encoding_is_pinned() -> None:
    """The version 2 encoding of docs/design.md, byte for byte: changing it is a new version."""
    from blake3 import blake3

    expected = blake3(
        genesis("s")
        + bytes.fromhex("00000000000000050001000000000000000900000001")
        + b"p"
        + bytes.fromhex("0100000001")
        + b"k"
        + bytes.fromhex("0000000100000001")
        + b"h"
        + bytes.fromhex("00000001")
        + b"v"
        + b"payload"
    ).digest()
    assert fold(genesis("s"), 5, 1, "p", 9, b"payload", b"k", (("h", b"v"),)) == expected
    assert genesis("s") == blake3(b"relay/v2 genesis s").digest()


# per tx: seq, producer id, payload, key, headers
Timeline = list[tuple[int, str, bytes, bytes | None, list[tuple[str, bytes]]]]
full_txs = st.lists(
    st.tuples(
        st.integers(1, 2**62),
        st.text(max_size=8) | st.sampled_from(["", "p", "producer-é"]),
        st.binary(max_size=64),
        st.none() | st.binary(max_size=8),
        st.lists(st.tuples(st.text(min_size=1, max_size=4), st.binary(max_size=4)), max_size=2),
    ),
    max_size=20,
)


@given(full_txs)
def test_a_folder_folds_the_same_chain_as_fold(timeline: Timeline) -> None:
    """A folder reuses one hasher: each tx's digest must not depend on the txs before it
    other than through ``previous``."""
    folder = Folder()
    one_shot = reused = genesis("s")
    for seq, pid, payload, key, headers in timeline:
        one_shot = fold(one_shot, seq, 3, pid, 7, payload, key, tuple(headers))
        reused = folder.fold(reused, seq, 3, pid, 7, payload, key, tuple(headers))
        assert reused == one_shot


@given(full_txs)
def test_a_folders_chain_is_fold_per_tx(timeline: Timeline) -> None:
    txs = [
        (seq, 0, 3, 9, pid, 7, payload, key, tuple(headers))
        for seq, pid, payload, key, headers in timeline
    ]
    want, d = [], genesis("s")
    for seq, _, origin, _, pid, msg_id, payload, key, headers in txs:
        d = fold(d, seq, origin, pid, msg_id, payload, key, headers)
        want.append(d)
    assert Folder().chain(genesis("s"), txs) == want
