from hypothesis import given
from hypothesis import strategies as st

from relay.core.flake import COUNTER_MAX, FlakeClock, make_seq, seq_node, seq_unix_ms

NOW = 1_795_000_000_000


@given(st.lists(st.integers(-5_000, 5_000), min_size=1, max_size=300), st.integers(1, 1023))
def test_seqs_strictly_increase_even_when_the_clock_steps_back(steps: list[int], node: int) -> None:
    clock = FlakeClock(node)
    now, last = NOW, 0
    for step in steps:
        now += step
        seq = clock.next_seq(now)
        assert seq > last
        assert seq_node(seq) == node
        last = seq


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3_000)), max_size=200))
def test_a_clock_never_issues_at_or_below_what_it_observed(ops: list[tuple[bool, int]]) -> None:
    clock = FlakeClock(7)
    other = FlakeClock(9)
    for observe, dt in ops:
        if observe:
            seen = other.next_seq(NOW + dt)
            clock.observe(seen)
            assert clock.next_seq(NOW) > seen
        else:
            clock.next_seq(NOW + dt)


def test_seqs_carry_their_time_and_node() -> None:
    seq = make_seq(NOW, 5, 3)
    assert seq_unix_ms(seq) == NOW
    assert seq_node(seq) == 5


def test_counter_overflow_borrows_the_next_millisecond() -> None:
    clock = FlakeClock(1)
    seqs = [clock.next_seq(NOW) for _ in range(COUNTER_MAX + 3)]
    assert seqs == sorted(set(seqs))
    assert seq_unix_ms(seqs[-1]) == NOW + 1


def test_seqs_from_different_nodes_order_by_time() -> None:
    a, b = FlakeClock(1), FlakeClock(2)
    assert a.next_seq(NOW) < b.next_seq(NOW + 1) < a.next_seq(NOW + 2)
