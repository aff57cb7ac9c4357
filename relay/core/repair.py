"""Gap repair: asking for an origin's txs a replica knows exist but does not hold, and
answering such asks from what it holds.

How this works: a lane knows it misses txs when a tx names a ``prev`` it does not hold or the
origin claims a last seq above ``contig``. A gap open for ``repair_after_ms`` broadcasts a
``RepairRequest`` for the range; every replica answers with what it holds (bounded), so a
range several peers only hold together is assembled from their answers. Asks repeat at most
every ``repair_after_ms`` per origin; lost or duplicated asks and answers are harmless.
"""

from __future__ import annotations

from relay.core.cut import RepairNeed
from relay.core.dedup import DedupIndex
from relay.core.lane import Lane, LaneState
from relay.core.messages import ANSWER_BYTES_MAX, Tx, seq_of, within_bytes
from relay.core.timeline import Timeline
from relay.core.timer import RateLimit


def open_gaps(lanes: dict[int, Lane], self_id: int, head: int, elapsed_ms: int) -> list[RepairNeed]:
    """The gaps above the stable ``head`` of active peer lanes that stayed open for their
    repair delay."""
    needs: list[RepairNeed] = []
    for lane in lanes.values():
        if lane.state is not LaneState.ACTIVE or lane.origin == self_id:
            continue
        missing = lane.missing_range(head)
        if missing is None:
            lane.gap.stop()
            continue
        lane.gap.start(elapsed_ms)
        if lane.gap.fired(elapsed_ms):
            needs.append((lane.origin, lane.epoch, *missing))
    return needs


class RepairAsks:
    """Rate limits for the asks of one stream: per origin, and for syncs."""

    __slots__ = ("after_ms", "by_origin", "sync")

    def __init__(self, after_ms: int) -> None:
        self.after_ms = after_ms
        self.by_origin: dict[int, RateLimit] = {}
        self.sync = RateLimit(after_ms)

    def allow_repair(self, origin: int, elapsed_ms: int) -> bool:
        limit = self.by_origin.get(origin)
        if limit is None:
            limit = self.by_origin[origin] = RateLimit(self.after_ms)
        return limit.allow(elapsed_ms)


def txs_held(
    lanes: dict[int, Lane],
    timeline: Timeline,
    dedup: DedupIndex,
    origin: int,
    epoch: int,
    after_seq: int,
    upto_seq: int,
    limit: int,
) -> tuple[list[Tx], int]:
    """What we hold of ``origin``'s ``epoch`` in ``(after_seq, upto_seq]``, in seq order, and
    how far that is every tx of the epoch there is (0: no claim): as far as this lane's
    contig, or the cut where it closed the epoch, reaches; never below the memory ring."""
    lane = lanes.get(origin)
    if lane is None or upto_seq <= after_seq:
        return [], 0
    # only the asked epoch: after a power loss an older epoch's restored tail can lie above
    # where the asked one starts, and an answer carrying it would never count as whole
    found = [
        tx
        for tx in timeline.txs_between(after_seq, upto_seq)
        if tx.origin == origin and tx.epoch == epoch
    ]
    found.extend(
        tx
        for tx, _, _ in dedup.skipped.values()
        if tx.origin == origin and tx.epoch == epoch and after_seq < tx.seq <= upto_seq
    )
    if lane.epoch == epoch:
        found.extend(tx for tx in lane.queue if after_seq < tx.seq <= upto_seq)
    found.sort(key=seq_of)
    kept = min(limit, within_bytes(found, ANSWER_BYTES_MAX))
    held = lane.contig if lane.epoch == epoch else 0
    if lane.closed is not None and lane.closed[0] == epoch:
        held = lane.closed[1]
    complete = min(upto_seq, held) if after_seq >= timeline.trimmed_seq else 0
    if kept < len(found):  # the answer stops short: it speaks for what it carries
        complete = min(complete, found[kept - 1].seq) if kept else 0
    return found[:kept], complete if complete > after_seq else 0
