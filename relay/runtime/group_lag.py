"""``relay_group_lag_txs``: how far each consumer group's committed position trails its stream,
for the groups and streams this node replicates.

How this works: a group's commits are transactions of ``<stream>.__group.<group>``
(``relay/client/groups.py``); the committed position is the last readable one. When this node
holds that commit in memory and replicates the stream, the lag is the count of readable txs
after the committed seq, counted as a ``span`` is (from the log below the memory ring), at
most ``LAG_TXS_MAX`` so that a far-behind group costs the loop a bounded read.
"""

from __future__ import annotations

import json
from bisect import bisect_right

from relay.client.groups import parse_group_stream
from relay.core.events import LogSpan, SpanResult
from relay.core.node import NodeCore
from relay.runtime.disk import NodeDisk

LAG_TXS_MAX = 100_000  # a lag beyond this is reported as this


def group_lags(core: NodeCore, disk: NodeDisk) -> dict[tuple[str, str], int]:
    """(group, stream) -> transactions after the group's committed position."""
    lags: dict[tuple[str, str], int] = {}
    for name, state in core.streams.items():
        found = parse_group_stream(name)
        if found is None or found[0] not in core.streams:
            continue
        stream, group = found
        timeline = state.timeline
        i = bisect_right(timeline.seqs, timeline.readable_seq) - 1
        if i < 0:
            continue  # no commit in memory (none yet, or this node is catching up)
        try:
            committed = json.loads(timeline.txs[i].payload)["seq"]
        except (ValueError, KeyError, TypeError):
            continue  # not a commit: someone else's transaction in the group stream
        if type(committed) is not int or committed < 0:
            continue
        got = core.span(stream, committed, 0, LAG_TXS_MAX, 1)
        if isinstance(got, LogSpan):
            got = disk.span(got, core.held)
        if isinstance(got, SpanResult):
            lags[(group, stream)] = sum(count for _, _, count in got.bounds)
    return lags
