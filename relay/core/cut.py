"""The cut of a suspected origin's epoch: where it ends, agreed by the live replicas.

How this works (the argument is in docs/design.md): a suspected lane goes CUTTING; its epoch
is frozen at ``contig`` and the replica reports ``(origin, epoch, contig)`` in its acks. A
report seen from any replica makes every replica suspect that epoch too. The cut is decided
once every live replica reported, or once a quorum did and the grace time passed (a replica
that restarted empty knows nothing of the old epoch); its value is the highest report, so
every tx a quorum held is inside it. A decided cut is reported as *settled* and adopted as it
is by replicas that have not decided yet. Missing txs up to the cut are fetched by repair;
then the lane is CUT and no longer holds the watermark back.
"""

from __future__ import annotations

from relay.core.lane import Lane, LaneInput, LaneState
from relay.core.messages import OriginReport
from relay.core.timeline import Timeline

RepairNeed = tuple[int, int, int, int]  # (origin, epoch, after, upto)
ANSWERED_KEPT = 16  # epochs whose last answer to a waiting report a replica remembers


def suspect(lanes: dict[int, Lane], origin: int, epoch: int) -> bool:
    """Freeze ``origin``'s ``epoch`` and start agreeing where it ends; True if it changed."""
    lane = lanes[origin]
    if epoch > lane.epoch:
        if holds_cut_txs(lane):  # they fold first: a successor would drop them, and this
            lane.newer_cut = max(lane.newer_cut, epoch)  # replica still claims the epoch whole
            return False
        lanes[origin] = lane.apply(LaneInput.NEWER_SUSPECTED, epoch)
        return True
    if epoch < lane.epoch:
        return False
    before = lane.state
    lanes[origin] = lane.apply(LaneInput.SUSPECTED)
    return lanes[origin].state is not before


def holds_cut_txs(lane: Lane) -> bool:
    """A cut epoch's last txs are still queued here, below the watermark's reach."""
    return lane.state is LaneState.CUT and bool(lane.queue)


def take_report(lanes: dict[int, Lane], reporter: int, report: OriginReport) -> bool:
    """A replica's report on a suspected epoch; True if anything changed here, or if the
    reporter still looks for a cut this replica already decided (it must hear it again: a
    replica at rest says nothing unasked)."""
    if report.origin not in lanes or reporter not in lanes:
        return False
    changed = suspect(lanes, report.origin, report.epoch)
    lane = lanes[report.origin]
    asking = not report.settled and not report.answer  # the reporter is still cutting
    if lane.epoch != report.epoch:
        closed_here = lane.closed is not None and lane.closed[0] == report.epoch
        return changed or (asking and closed_here)
    if lane.state is not LaneState.CUTTING:
        return changed or (asking and lane.cut_at is not None)
    if report.settled:
        if report.waiting and lane.cut_reports.get(reporter) != report.held:
            # what the reporter holds, told while it waits too: the cut comes down once every
            # live replica said what it holds, and a replica that took a settled cut from
            # another one never reported before (``settle``)
            lane.cut_reports[reporter] = report.held
            changed = True
        if lane.cut_at is None or report.contig < lane.cut_at:
            # a replica already decided where the epoch ends: follow it, so that a replica
            # that was away (the suspect itself, say) ends it at the same place. Replicas that
            # saw different live sets may decide different cuts; each decision took the
            # highest report of a quorum, so each covers every acknowledged tx, and all
            # settle on the lowest (a higher one may wait for txs nobody holds any more)
            lane.cut_at = report.contig
            lane.cut_grace.stop()  # repair gets its grace time from here before it comes down
            return True
        return changed
    if lane.cut_reports.get(reporter) != report.contig:
        lane.cut_reports[reporter] = report.contig
        return True
    return changed or (asking and lane.cut_at is not None)


def owed(lanes: dict[int, Lane], report: OriginReport, timeline: Timeline) -> bool:
    """A replica looks for reports on an epoch that this one's lane has left behind without
    remembering where it ended (it never followed that epoch here, or followed a newer one
    before the cut), or waits for txs up to that epoch's settled cut while this replica's
    ``timeline`` holds less of it (it never held them, or a refold gave them up after it told
    more, and an answer may have been lost): it must hear what this replica holds of it, so
    that the cut can come down to what the live replicas hold (``settle``)."""
    lane = lanes.get(report.origin)
    if lane is None or report.answer or lane.epoch <= report.epoch:
        return False
    if lane.closed is not None and lane.closed[0] == report.epoch:
        return False
    if not report.settled:
        return True
    return report.waiting and timeline.last_of(report.origin, report.epoch) < report.contig


def settle(
    lanes: dict[int, Lane],
    self_id: int,
    voters: set[int],
    quorum: int,
    head: int,
    elapsed_ms: int,
    counts_itself: bool = True,
) -> tuple[bool, list[RepairNeed]]:
    """Advance the cuts; ``voters`` are the live replicas (this one and the suspect included
    if it is back: it holds everything it sent), this one only if it ``counts_itself`` (not
    while its stream recovers, ``amnesia``). Returns (a lane was cut, repair needs for cuts
    beyond what we hold)."""
    counted = voters if counts_itself else voters - {self_id}  # whose reports count
    needs: list[RepairNeed] = []
    moved = False
    for origin, lane in lanes.items():
        if lane.state is not LaneState.CUTTING:
            continue
        lane.cut_grace.start(elapsed_ms)
        cut = lane.cut_at
        if counts_itself:
            lane.cut_reports[self_id] = lane.contig
        reported = counted & lane.cut_reports.keys()
        if cut is None:
            if len(reported) < quorum:
                continue
            if reported != counted and not lane.cut_grace.fired(elapsed_ms):
                continue
            cut = lane.cut_at = max(lane.cut_reports[r] for r in reported)
        elif (
            lane.contig < cut
            and reported == counted
            and len(reported) >= quorum
            and lane.cut_grace.fired(elapsed_ms)
        ):
            # every live replica said what it holds, and none holds up to the cut (the ones
            # that did are gone): nobody can repair it, so the cut comes down to the highest
            # live report (every acknowledged tx was held by a quorum, which meets the live
            # ones). A replica that settled without reporting is not heard: nothing comes down
            held = max(lane.cut_reports[r] for r in reported)
            if held < cut:
                cut = lane.cut_at = held
        if lane.contig >= cut or cut <= head:  # at or below the head all is settled
            while lane.queue and lane.queue[-1].seq > cut:
                lane.queue.pop()
            lane.contig = min(max(lane.contig, min(cut, head)), cut)
            lane.early.clear()
            lane.gap.stop()
            lanes[origin] = lane.apply(LaneInput.CUT_SETTLED)
            moved = True
        else:
            needs.append((lane.origin, lane.epoch, lane.contig, cut))
    return moved, needs


def reports(lanes: dict[int, Lane], owed: dict[tuple[int, int], int]) -> tuple[OriginReport, ...]:
    """What we hold of every epoch being cut or cut, so late replicas can settle too, and
    the reports ``owed`` on epochs our lanes left behind: (origin, epoch) -> highest held."""
    found = [OriginReport(o, epoch, held, answer=True) for (o, epoch), held in owed.items()]
    for lane in lanes.values():
        if lane.state is LaneState.CUTTING and lane.cut_at is None:
            found.append(OriginReport(lane.origin, lane.epoch, lane.contig))
        elif lane.state in (LaneState.CUTTING, LaneState.CUT) and lane.cut_at is not None:
            waiting = lane.state is LaneState.CUTTING and lane.contig < lane.cut_at
            held = lane.contig if waiting else 0
            found.append(
                OriginReport(lane.origin, lane.epoch, lane.cut_at, True, waiting=waiting, held=held)
            )
        elif lane.closed is not None:
            found.append(OriginReport(lane.origin, *lane.closed, settled=True))
    return tuple(found)


class WaitingAnswers:
    """When a replica answers a report waiting for the cut of an epoch its lane left: when
    what it holds of the epoch changed since it last answered, or the answer may have been
    lost (``again_ms`` passed); not at every ack that carries the report, as an answer can
    itself draw an ack (a replica answers one that looks behind it)."""

    __slots__ = ("again_ms", "last")

    def __init__(self, again_ms: int) -> None:
        self.again_ms = again_ms
        # (origin, epoch) -> (highest held, when) of the last answer
        self.last: dict[tuple[int, int], tuple[int, int]] = {}

    def due(self, key: tuple[int, int], held: int, elapsed_ms: int) -> bool:
        last = self.last.get(key)
        if last is not None and last[0] == held and elapsed_ms - last[1] < self.again_ms:
            return False
        if last is None and len(self.last) >= ANSWERED_KEPT:
            self.last.clear()
        self.last[key] = (held, elapsed_ms)
        return True
