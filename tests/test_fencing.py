"""The fencing state machine: the rules it keeps, over every (state, input) pair."""

import pytest

from relay.core.fencing import TRANSITIONS, FenceInput, NodeState, next_state, quorum_input

S, FI = NodeState, FenceInput
PAIRS = [(s, i) for s in NodeState for i in FenceInput]


def test_the_table_covers_every_pair() -> None:
    assert set(TRANSITIONS) == set(PAIRS)


def test_a_node_serves_exactly_while_it_hears_a_quorum_until_it_leaves() -> None:
    for state in (S.FENCED, S.SERVING):
        assert next_state(state, FI.QUORUM_HEARD) is S.SERVING
        assert next_state(state, FI.QUORUM_LOST) is S.FENCED


def test_a_shutdown_is_final() -> None:
    assert all(next_state(s, FI.SHUTDOWN) is S.LEAVING for s in NodeState)
    assert all(next_state(S.LEAVING, i) is S.LEAVING for i in FenceInput)


@pytest.mark.parametrize(
    ("heard", "size", "expected"),
    [
        (1, 3, FenceInput.QUORUM_LOST),
        (2, 3, FenceInput.QUORUM_HEARD),
        (2, 5, FenceInput.QUORUM_LOST),
        (3, 5, FenceInput.QUORUM_HEARD),
        (2, 4, FenceInput.QUORUM_LOST),
        (5, 5, FenceInput.QUORUM_HEARD),
    ],
)
def test_a_quorum_is_a_strict_majority(heard: int, size: int, expected: FenceInput) -> None:
    assert quorum_input(heard, size) is expected
