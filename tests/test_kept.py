"""The kept copies' blocks against the plainest model of them: a dict of (seq, tag, digest)
per key and a list of (seq, key) in fold order, every operation one entry at a time."""

from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core import kept as kept_module
from relay.core.kept import KeptCopies, Key


class Model:
    def __init__(self) -> None:
        self.by_key: dict[Key, tuple[int, int, bytes]] = {}
        self.order: list[tuple[int, Key]] = []

    def add(self, seq: int, key: Key, tag: int, digest: bytes) -> None:
        self.by_key[key] = (seq, tag, digest)
        self.order.append((seq, key))

    def forget_first(self, count: int) -> None:
        for seq, key in self.order[:count]:
            if key in self.by_key and self.by_key[key][0] == seq:
                del self.by_key[key]
        del self.order[:count]

    def forget_before(self, horizon: int) -> None:
        self.forget_first(sum(1 for seq, _ in self.order if seq < horizon))

    def truncate_after(self, keep_upto: int) -> None:
        while self.order and self.order[-1][0] > keep_upto:
            seq, key = self.order.pop()
            if key in self.by_key and self.by_key[key][0] == seq:
                del self.by_key[key]

    def digest_at(self, seq: int) -> bytes | None:
        for s, key in self.order:
            if s == seq and key in self.by_key and self.by_key[key][0] == seq:
                return self.by_key[key][2]
        return None


keys = st.tuples(st.sampled_from(["p", "q"]), st.integers(1, 6))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), keys),
        st.tuples(st.just("batch"), st.lists(keys, min_size=1, max_size=7)),
        st.tuples(st.just("forget"), st.integers(0, 9)),
        st.tuples(st.just("before"), st.integers(0, 40)),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
    ),
    max_size=40,
)


@settings(max_examples=400)
@given(ops, st.integers(1, 5))
def test_blocks_hold_what_one_entry_at_a_time_holds(
    script: list[tuple[str, object]], block: int
) -> None:
    """Whatever is added, claimed, forgotten or cut, in blocks of any size (a key kept
    again over an older entry of it included): the same keys map to the same seqs, the same
    entries in the same order, the same tags and digests found by seq."""
    with patch.object(kept_module, "BLOCK_MAX", block):
        real, model = KeptCopies(), Model()
        seq = 0
        for op, arg in script:
            if op == "add":
                seq += 1
                assert isinstance(arg, tuple)
                real.add(seq, arg, seq * 7, bytes([seq % 256]))
                model.add(seq, arg, seq * 7, bytes([seq % 256]))
            elif op == "batch":
                assert isinstance(arg, list)
                seqs = list(range(seq + 1, seq + 1 + len(arg)))
                if real.holds_any(arg):
                    assert any(k in model.by_key for k in arg)
                    continue
                claimed = real.claim(arg, seqs)
                assert claimed == (len(set(arg)) == len(arg))
                if claimed:
                    seq = seqs[-1]
                    real.record(seqs, arg, [s * 7 for s in seqs], [bytes([s % 256]) for s in seqs])
                    for s, k in zip(seqs, arg, strict=True):
                        model.add(s, k, s * 7, bytes([s % 256]))
            elif op == "forget":
                assert isinstance(arg, int)
                real.forget_first(arg)
                model.forget_first(arg)
            elif op == "before":
                assert isinstance(arg, int)
                real.forget_before(arg)
                model.forget_before(arg)
            else:
                assert isinstance(arg, int)
                real.truncate_after(arg)
                model.truncate_after(arg)
                seq = max(seq, arg)
            assert real.seq_by_key == {k: v[0] for k, v in model.by_key.items()}
            assert [(s, k) for s, k, _, _ in real.entries()] == model.order
            assert len(real) == len(model.order)
            assert real.oldest_seq() == (model.order[0][0] if model.order else None)
            assert all(len(b.seqs) <= block and b.start < len(b.seqs) for b in real.blocks)
            for s, tag, _ in model.by_key.values():
                assert real.tag_at(s) == tag
            for s in range(seq + 2):
                assert real.digest_at(s) == model.digest_at(s)
