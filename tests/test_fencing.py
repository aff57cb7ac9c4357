"""The fencing state machine: every (state, input) pair."""

import pytest

from relay.core.fencing import TRANSITIONS, FenceInput, NodeState, next_state, quorum_input

EXPECTED = {
    (NodeState.FENCED, FenceInput.QUORUM_HEARD): NodeState.SERVING,
    (NodeState.FENCED, FenceInput.QUORUM_LOST): NodeState.FENCED,
    (NodeState.FENCED, FenceInput.SHUTDOWN): NodeState.LEAVING,
    (NodeState.SERVING, FenceInput.QUORUM_HEARD): NodeState.SERVING,
    (NodeState.SERVING, FenceInput.QUORUM_LOST): NodeState.FENCED,
    (NodeState.SERVING, FenceInput.SHUTDOWN): NodeState.LEAVING,
    (NodeState.LEAVING, FenceInput.QUORUM_HEARD): NodeState.LEAVING,
    (NodeState.LEAVING, FenceInput.QUORUM_LOST): NodeState.LEAVING,
    (NodeState.LEAVING, FenceInput.SHUTDOWN): NodeState.LEAVING,
}


def test_the_table_covers_every_pair() -> None:
    assert set(TRANSITIONS) == {(s, i) for s in NodeState for i in FenceInput}


@pytest.mark.parametrize(("pair", "after"), EXPECTED.items())
def test_each_pair(pair: tuple[NodeState, FenceInput], after: NodeState) -> None:
    assert next_state(*pair) is after


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
