"""Stability and folding: when a replica may put a tx into its timeline, and in what order.

How this works (the argument is in docs/design.md): the stream's stable *watermark* is the
minimum over its lanes of their contribution, the seq at or below which no tx of that origin
can still arrive. Every tx at or below it is merged in seq order, deduplicated by
(producer id, msg id), and folded into the rolling digest: the stable timeline. Because every
replica folds the same txs in the same order, every replica computes the same digest at every
seq. A waiting (re)joining origin is admitted once its floor is above the stable head, so
nothing it sends can land below what is already stable.

``floors`` carries each origin's latest promise heard outside the stream (its heartbeats), as
(epoch, floor): it counts only for a lane of that epoch.
"""

from __future__ import annotations

from collections.abc import Mapping

from relay.core.dedup import DedupIndex
from relay.core.lane import Lane, LaneInput, LaneState
from relay.core.messages import Tx, seq_of
from relay.core.timeline import Timeline

Floors = Mapping[int, tuple[int, int]]  # origin -> (epoch, floor)


def floor_of(lane: Lane, floors: Floors) -> int:
    epoch, floor = floors.get(lane.origin, (0, 0))
    return floor if epoch == lane.epoch else 0


def watermark(lanes: dict[int, Lane], head: int, floors: Floors) -> tuple[int, int]:
    """Admit waiting origins whose floor is above the stable head; (mark, late txs dropped)."""
    late = 0
    for origin, lane in lanes.items():
        promise = max(lane.promise, floor_of(lane, floors))
        if lane.state is LaneState.WAITING and lane.epoch and promise >= max(head, 1):
            lanes[origin] = lane = lane.apply(LaneInput.ADMITTED)
            while lane.queue and lane.queue[0].seq <= head:
                lane.queue.popleft()
                late += 1
    bounds = [
        c
        for c in (lane.contribution(floor_of(lane, floors), head) for lane in lanes.values())
        if c is not None
    ]
    if bounds:
        return min(bounds), late
    # No lane bounds anything (every one cut or waiting): what the cut lanes hold is final,
    # up to their cuts, and nothing else can arrive below it (a waiting origin is admitted
    # only above the head). Folding it is what lets a node whose own epoch was cut rejoin.
    finals = [lane.cut_at for lane in lanes.values() if lane.state is LaneState.CUT and lane.queue]
    return max([head, *(f for f in finals if f is not None)]), late


def fold_stable(
    lanes: dict[int, Lane], floors: Floors, timeline: Timeline, dedup: DedupIndex
) -> tuple[bool, int]:
    """Fold every tx at or below the watermark into the timeline: (head moved, late txs)."""
    if not any(lane.queue or lane.state is LaneState.WAITING for lane in lanes.values()):
        return False, 0  # nothing to fold and no lane to admit (most turns when idle)
    mark, late = watermark(lanes, timeline.head_seq, floors)
    ready: list[Tx] = []
    merging = False  # more than one lane gave txs: they interleave
    for lane in lanes.values():
        queue = lane.queue
        if lane.state is LaneState.WAITING or not queue or queue[0].seq > mark:
            continue
        merging = bool(ready)
        if queue[-1].seq <= mark:  # the usual case: the whole queue is stable
            ready.extend(queue)
            queue.clear()
        else:
            while queue and queue[0].seq <= mark:
                ready.append(queue.popleft())
    if not ready:
        return False, late
    if merging:
        ready.sort(key=seq_of)
    folded, digests, broken = dedup.fold(ready, timeline.head_seq, timeline.head_digest)
    late += broken
    if folded:
        timeline.extend(folded, digests)
    return bool(folded), late
