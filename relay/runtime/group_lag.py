"""``relay_group_lag_txs``: how far each consumer group's committed position trails its stream,
for the groups and streams this node replicates.

How this works: a group's commits are transactions of ``<stream>.__group.<group>``
(``relay/client/groups.py``); the committed position is the last readable one. When this node
holds that commit in memory and replicates the stream, the lag is the count of readable txs
after the committed seq in the stream's memory ring: two bisections per group, so the loop's
cost stays bounded whatever the groups do. A group behind the ring is reported as the ring's
readable count (a lower bound). Whatever a group stream holds is hostile input: a payload that
is not a commit is skipped. The lowest committed position of a stream's groups bounds its
compaction (``compaction_bounds``).
"""

from __future__ import annotations

import json
from bisect import bisect_right

from relay.client.groups import parse_group_stream
from relay.core.node import NodeCore


def group_lags(core: NodeCore, group_streams: set[str]) -> dict[tuple[str, str], int]:
    """(group, stream) -> readable transactions after the group's committed position, for
    the group streams named (``<stream>.__group.<group>``)."""
    lags: dict[tuple[str, str], int] = {}
    for name in group_streams:
        found = _committed(core, name)
        if found is None:
            continue
        stream, group, committed = found
        data = core.streams[stream].timeline
        readable = bisect_right(data.seqs, data.readable_seq)
        lags[(group, stream)] = readable - min(readable, bisect_right(data.seqs, committed))
    return lags


def compaction_bounds(core: NodeCore, group_streams: set[str]) -> dict[str, int]:
    """stream -> the seq its compaction may reach: what a quorum's logs hold (``readable_seq``:
    a rewind to a quorum's timeline never reaches below it, and a compacted range cannot be
    cut back) and the lowest committed position of its groups among ``group_streams`` (a group
    whose commit this node does not hold in memory counts as 0: nothing read)."""
    bounds = {name: state.timeline.readable_seq for name, state in core.streams.items()}
    for name in group_streams:
        parsed = parse_group_stream(name)
        if parsed is None or parsed[0] not in core.streams:
            continue
        found = _committed(core, name)
        bounds[parsed[0]] = min(found[2] if found is not None else 0, bounds[parsed[0]])
    return bounds


def _committed(core: NodeCore, name: str) -> tuple[str, str, int] | None:
    """(stream, group, committed seq) of a group stream this node holds with a readable
    commit in memory, for a stream it replicates too."""
    found = parse_group_stream(name)
    state = core.streams.get(name)
    if found is None or state is None or found[0] not in core.streams:
        return None
    timeline = state.timeline
    i = bisect_right(timeline.seqs, timeline.readable_seq) - 1
    if i < 0:
        return None  # no commit in memory (none yet, or this node is catching up)
    try:
        committed = json.loads(timeline.txs[i].payload)["seq"]
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None  # not a commit: someone else's transaction in the group stream
    if type(committed) is not int or committed < 0:
        return None
    return found[0], found[1], committed
