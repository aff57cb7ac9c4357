"""The lane and catch-up state machines: every (state, input) pair, stated again here."""

import pytest

from relay.core import catchup, lane
from relay.core.catchup import Catchup, CatchupAction, CatchupInput, CatchupState, PeerView
from relay.core.lane import Lane, LaneInput, LaneState

L, LI = LaneState, LaneInput
LANE_EXPECTED = {
    (L.NEW, LI.ADMITTED): (L.NEW, False),
    (L.NEW, LI.SUSPECTED): (L.NEW, False),
    (L.NEW, LI.NEWER_SUSPECTED): (L.CUTTING, True),
    (L.NEW, LI.CUT_SETTLED): (L.NEW, False),
    (L.NEW, LI.NEWER_EPOCH): (L.ACTIVE, True),
    (L.NEW, LI.REJOINED): (L.ACTIVE, True),
    (L.NEW, LI.UNSETTLED): (L.NEW, False),
    (L.WAITING, LI.ADMITTED): (L.ACTIVE, False),
    (L.WAITING, LI.SUSPECTED): (L.CUTTING, False),
    (L.WAITING, LI.NEWER_SUSPECTED): (L.CUTTING, True),
    (L.WAITING, LI.CUT_SETTLED): (L.WAITING, False),
    (L.WAITING, LI.NEWER_EPOCH): (L.CUTTING, False),
    (L.WAITING, LI.REJOINED): (L.ACTIVE, True),
    (L.WAITING, LI.UNSETTLED): (L.WAITING, False),
    (L.ACTIVE, LI.ADMITTED): (L.ACTIVE, False),
    (L.ACTIVE, LI.SUSPECTED): (L.CUTTING, False),
    (L.ACTIVE, LI.NEWER_SUSPECTED): (L.CUTTING, True),
    (L.ACTIVE, LI.CUT_SETTLED): (L.ACTIVE, False),
    (L.ACTIVE, LI.NEWER_EPOCH): (L.CUTTING, False),
    (L.ACTIVE, LI.REJOINED): (L.ACTIVE, True),
    (L.ACTIVE, LI.UNSETTLED): (L.ACTIVE, False),
    (L.CUTTING, LI.ADMITTED): (L.CUTTING, False),
    (L.CUTTING, LI.SUSPECTED): (L.CUTTING, False),
    (L.CUTTING, LI.NEWER_SUSPECTED): (L.CUTTING, True),
    (L.CUTTING, LI.CUT_SETTLED): (L.CUT, False),
    (L.CUTTING, LI.NEWER_EPOCH): (L.CUTTING, False),
    (L.CUTTING, LI.REJOINED): (L.CUTTING, False),
    (L.CUTTING, LI.UNSETTLED): (L.CUTTING, False),
    (L.CUT, LI.ADMITTED): (L.CUT, False),
    (L.CUT, LI.SUSPECTED): (L.CUT, False),
    (L.CUT, LI.NEWER_SUSPECTED): (L.CUTTING, True),
    (L.CUT, LI.CUT_SETTLED): (L.CUT, False),
    (L.CUT, LI.NEWER_EPOCH): (L.WAITING, True),
    (L.CUT, LI.REJOINED): (L.ACTIVE, True),
    (L.CUT, LI.UNSETTLED): (L.CUTTING, False),
}


def test_the_lane_table_covers_every_pair() -> None:
    assert set(lane.TRANSITIONS) == {(s, i) for s in LaneState for i in LaneInput}
    assert lane.TRANSITIONS == LANE_EXPECTED


@pytest.mark.parametrize(("pair", "after"), LANE_EXPECTED.items())
def test_each_lane_pair(pair: tuple[LaneState, LaneInput], after: tuple[LaneState, bool]) -> None:
    state, event = pair
    before = Lane(2, 100, 1000, epoch=5, state=state)
    before.contig = 40
    before.cut_at = 40 if state is L.CUT else None
    got = before.apply(event, epoch=9)
    next_state, newer = after
    assert got.state is next_state
    if newer:  # a successor that follows the newer epoch and remembers a closed one
        assert got is not before and got.epoch == 9 and got.contig == 0
        assert got.closed == ((5, 40) if state is L.CUT else None)
    else:
        assert got is before and got.epoch == 5 and got.contig == 40


def test_a_reopened_cut_keeps_where_the_epoch_ends() -> None:
    """A refold below a settled cut reopens it (UNSETTLED) to repair up to the same cut."""
    cut = Lane(2, 100, 1000, epoch=5, state=L.CUT)
    cut.cut_at, cut.contig, cut.cut_reports = 70, 40, {1: 70}
    reopened = cut.apply(LI.UNSETTLED)
    assert reopened.state is L.CUTTING and reopened.cut_at == 70 and reopened.cut_reports == {1: 70}


def test_a_lane_that_starts_cutting_forgets_an_older_cut() -> None:
    active = Lane(2, 100, 1000, epoch=5, state=L.ACTIVE)
    active.cut_reports = {1: 3}
    cutting = active.apply(LI.SUSPECTED)
    assert cutting.cut_reports == {} and cutting.cut_at is None


C, CI = CatchupState, CatchupInput
CATCHUP_EXPECTED = {
    (C.UNSYNCED, CI.GENESIS_AGREED): C.SYNCED,
    (C.UNSYNCED, CI.ADOPTED): C.SYNCED,
    (C.UNSYNCED, CI.CONTRADICTED): C.UNSYNCED,
    (C.UNSYNCED, CI.VERIFIED_MOVED): C.UNSYNCED,
    (C.UNSYNCED, CI.REFOLDED): C.UNSYNCED,
    (C.SYNCED, CI.GENESIS_AGREED): C.SYNCED,
    (C.SYNCED, CI.ADOPTED): C.SYNCED,
    (C.SYNCED, CI.CONTRADICTED): C.DIVERGED,
    (C.SYNCED, CI.VERIFIED_MOVED): C.SYNCED,
    (C.SYNCED, CI.REFOLDED): C.SYNCED,
    (C.DIVERGED, CI.GENESIS_AGREED): C.DIVERGED,
    (C.DIVERGED, CI.ADOPTED): C.SYNCED,
    (C.DIVERGED, CI.CONTRADICTED): C.DIVERGED,
    (C.DIVERGED, CI.VERIFIED_MOVED): C.SYNCED,
    (C.DIVERGED, CI.REFOLDED): C.SYNCED,
}


def test_the_catchup_table_covers_every_pair() -> None:
    assert set(catchup.TRANSITIONS) == {(s, i) for s in CatchupState for i in CatchupInput}
    assert catchup.TRANSITIONS == CATCHUP_EXPECTED


@pytest.mark.parametrize(("pair", "after"), CATCHUP_EXPECTED.items())
def test_each_catchup_pair(pair: tuple[CatchupState, CatchupInput], after: CatchupState) -> None:
    c = Catchup(stuck_after_ms=100)
    c.state = pair[0]
    c.progress.start(0)
    c.apply(pair[1], 50)
    assert c.state is after
    # progress (anything but a contradiction) restarts the stuck clock
    assert c.progress.running == (pair[1] is CI.CONTRADICTED)


def view(**flags: bool) -> PeerView:
    return PeerView(
        live=2,
        verified_known=2,
        any_verified=flags.get("any_verified", False),
        verified_ahead=flags.get("verified_ahead", False),
        heads_ahead=flags.get("heads_ahead", False),
    )


def test_an_empty_replica_syncs_at_genesis_only_when_every_live_peer_agrees() -> None:
    c = Catchup(100)
    partial = PeerView(
        live=2, verified_known=1, any_verified=False, verified_ahead=False, heads_ahead=False
    )
    assert c.on_tick(0, partial, 2, False) is CatchupAction.NONE and not c.synced
    assert c.on_tick(0, view(any_verified=True), 2, False) is CatchupAction.SYNC
    assert c.on_tick(0, view(), 2, False) is CatchupAction.GENESIS and c.synced  # fold now


def test_stuck_then_refold_when_nobody_verified_further() -> None:
    c = Catchup(100)
    c.apply(CI.GENESIS_AGREED, 0)
    assert c.on_tick(0, view(heads_ahead=True), 2, True) is CatchupAction.NONE
    assert c.on_tick(99, view(heads_ahead=True), 2, True) is CatchupAction.NONE
    assert c.on_tick(100, view(heads_ahead=True), 2, True) is CatchupAction.SYNC
    ahead = view(heads_ahead=True, verified_ahead=True)
    assert c.on_tick(250, ahead, 2, True) is CatchupAction.SYNC  # someone can sync us
    assert c.on_tick(250, view(heads_ahead=True), 2, True) is CatchupAction.REFOLD
    assert c.on_tick(260, view(), 2, False) is CatchupAction.NONE and not c.progress.running


def test_a_diverged_replica_asks_for_a_sync_at_once() -> None:
    c = Catchup(100)
    c.apply(CI.GENESIS_AGREED, 0)
    c.apply(CI.CONTRADICTED, 0)
    assert c.on_tick(1, view(), 2, True) is CatchupAction.SYNC
