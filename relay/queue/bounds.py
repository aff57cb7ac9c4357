"""How much memory work groups may take on a node: the ``[cluster]`` keys that bound it.

``queue_group_bytes_max`` bounds one group's fold (``QueueState``: beyond it, jobs wait in the
log and are taken in as others leave). It must be the same on every replica, since it decides
which jobs a claim can see, so it is a cluster-wide key. ``queue_groups_max`` bounds how many
groups a node folds; a member of one more group is answered ``busy`` by that node (another
replica may have room). Together they may take at most the node's ``memory_bytes_max`` on top
of the budget's other shares; unless told, a node folds as many groups as half of it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GROUP_BYTES_DEFAULT = 16 << 20
GROUP_BYTES_RANGE = (1 << 20, 4 << 30)
GROUPS_MOST = 100_000


@dataclass(frozen=True, slots=True)
class QueueBounds:
    group_bytes_max: int = GROUP_BYTES_DEFAULT
    groups_max: int = 64


KEYS = frozenset({"queue_group_bytes_max", "queue_groups_max"})


def parse(where: str, cluster: dict[str, Any], memory_bytes: int) -> QueueBounds:
    """The bounds among ``[cluster]``'s keys, for a node whose budget is ``memory_bytes``;
    ``ValueError`` names a bad value."""
    least, most = GROUP_BYTES_RANGE
    group_bytes = cluster.get("queue_group_bytes_max", GROUP_BYTES_DEFAULT)
    if type(group_bytes) is not int or not least <= group_bytes <= most:
        raise ValueError(
            f"{where}: 'cluster.queue_group_bytes_max' must be an integer from {least} to "
            f"{most}, got {group_bytes!r:.60}"
        )
    derived = max(1, memory_bytes // 2 // group_bytes)
    groups = cluster.get("queue_groups_max", 0)
    if type(groups) is not int or not 0 <= groups <= GROUPS_MOST:
        raise ValueError(
            f"{where}: 'cluster.queue_groups_max' must be 0 (as many as half of "
            f"'cluster.memory_bytes_max' holds) or an integer up to {GROUPS_MOST}, "
            f"got {groups!r:.60}"
        )
    if groups * group_bytes > memory_bytes:
        raise ValueError(
            f"{where}: 'cluster.queue_groups_max' ({groups}) groups of "
            f"'cluster.queue_group_bytes_max' ({group_bytes}) bytes would take more than "
            f"'cluster.memory_bytes_max' ({memory_bytes}); lower one or raise the budget"
        )
    return QueueBounds(group_bytes, groups or derived)
