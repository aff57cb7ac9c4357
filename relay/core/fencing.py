"""A node's serving state: the fencing state machine, as a table.

How this works: every tick the node asks one question, "did I hear a quorum of the cluster
(myself included) within ``fence_after_ms``?", and feeds the answer in as an input. A node
starts FENCED and serves once it hears a quorum; it fences itself again when it stops
hearing one, so the minority side of a partition stops accepting writes and serving reads
within the fence timeout; LEAVING is final. Every (state, input) pair has an entry.
"""

from __future__ import annotations

from enum import Enum


class NodeState(Enum):
    FENCED = "fenced"
    SERVING = "serving"
    LEAVING = "leaving"

    __hash__ = object.__hash__  # members are singletons: a C hash for the tables' keys


class FenceInput(Enum):
    QUORUM_HEARD = "quorum heard"
    QUORUM_LOST = "quorum lost"
    SHUTDOWN = "shutdown"

    __hash__ = object.__hash__  # members are singletons: a C hash for the tables' keys


TRANSITIONS: dict[tuple[NodeState, FenceInput], NodeState] = {
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


def next_state(state: NodeState, event: FenceInput) -> NodeState:
    return TRANSITIONS[(state, event)]


def quorum_input(heard: int, cluster_size: int) -> FenceInput:
    """``heard`` counts the nodes heard within the fence timeout, this one included."""
    return FenceInput.QUORUM_HEARD if 2 * heard > cluster_size else FenceInput.QUORUM_LOST
