"""The lane and catch-up state machines: the rules they keep, checked over every (state,
input) pair of their tables, and what each transition does to the lane it moves."""

from relay.core import catchup, lane
from relay.core.catchup import Catchup, CatchupAction, CatchupInput, CatchupState, PeerView
from relay.core.lane import Lane, LaneInput, LaneState

L, LI = LaneState, LaneInput
PAIRS = [(s, i) for s in LaneState for i in LaneInput]


def moved(state: LaneState, event: LaneInput) -> tuple[LaneState, bool]:
    """(the state after ``event``, whether it follows a newer epoch), on a real lane."""
    before = Lane(2, 100, 1000, epoch=5, state=state)
    before.contig = 40
    before.cut_at = 40 if state is L.CUT else None
    got = before.apply(event, epoch=9)
    if got is before:
        assert got.epoch == 5 and got.contig == 40, "the same epoch keeps what it holds"
    else:  # a successor that follows the newer epoch and remembers a closed one
        assert got.epoch == 9 and got.contig == 0
        assert got.closed == ((5, 40) if state is L.CUT else None)
    return got.state, got is not before


AFTER = {pair: moved(*pair) for pair in PAIRS}


def test_the_lane_table_covers_every_pair() -> None:
    assert set(lane.TRANSITIONS) == set(PAIRS)


def test_an_epoch_holding_txs_is_cut_before_a_newer_one_is_followed() -> None:
    for state in (L.WAITING, L.ACTIVE):
        assert AFTER[state, LI.NEWER_EPOCH] == (L.CUTTING, False)
        assert AFTER[state, LI.SUSPECTED] == (L.CUTTING, False)
    for event in (LI.NEWER_EPOCH, LI.REJOINED, LI.SUSPECTED, LI.ADMITTED, LI.UNSETTLED):
        assert AFTER[L.CUTTING, event] == (L.CUTTING, False), "a cut settles first"


def test_only_a_settled_cut_closes_an_epoch() -> None:
    closing = [
        pair for pair, (after, _) in AFTER.items() if after is L.CUT and pair[0] is not L.CUT
    ]
    assert closing == [(L.CUTTING, LI.CUT_SETTLED)]
    assert AFTER[L.CUTTING, LI.CUT_SETTLED] == (L.CUT, False), "the cut epoch's lane closes"
    assert all(AFTER[s, LI.CUT_SETTLED] == (s, False) for s in LaneState if s is not L.CUTTING)


def test_a_newer_epoch_after_a_cut_waits_for_admission() -> None:
    assert AFTER[L.CUT, LI.NEWER_EPOCH] == (L.WAITING, True)
    entering_active = {
        p for p, (after, _) in AFTER.items() if after is L.ACTIVE and p[0] is L.WAITING
    }
    assert entering_active == {(L.WAITING, LI.ADMITTED), (L.WAITING, LI.REJOINED)}


def test_a_newer_epoch_reported_cut_is_cut_whatever_the_lane_held() -> None:
    assert all(AFTER[s, LI.NEWER_SUSPECTED] == (L.CUTTING, True) for s in LaneState)
    assert AFTER[L.CUT, LI.SUSPECTED] == (L.CUT, False), "a closed epoch is cut already"


def test_this_nodes_own_lane_rejoins_active_unless_its_cut_is_settling() -> None:
    for state in LaneState:
        expected = (L.CUTTING, False) if state is L.CUTTING else (L.ACTIVE, True)
        assert AFTER[state, LI.REJOINED] == expected


def test_a_lane_that_never_saw_an_epoch_has_nothing_to_cut() -> None:
    assert AFTER[L.NEW, LI.NEWER_EPOCH] == (L.ACTIVE, True)
    for event in (LI.ADMITTED, LI.SUSPECTED, LI.CUT_SETTLED, LI.UNSETTLED):
        assert AFTER[L.NEW, event] == (L.NEW, False)


def test_only_a_closed_cut_is_reopened_by_a_timeline_taken_back_below_it() -> None:
    assert AFTER[L.CUT, LI.UNSETTLED] == (L.CUTTING, False)
    assert all(AFTER[s, LI.UNSETTLED] == (s, False) for s in LaneState if s is not L.CUT)


def test_admission_moves_only_a_waiting_lane() -> None:
    assert AFTER[L.WAITING, LI.ADMITTED] == (L.ACTIVE, False)
    assert all(AFTER[s, LI.ADMITTED] == (s, False) for s in LaneState if s is not L.WAITING)


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
CATCHUP_PAIRS = [(s, i) for s in CatchupState for i in CatchupInput]


def caught_up(state: CatchupState, event: CatchupInput) -> CatchupState:
    """The state after ``event``; progress (anything but a contradiction) restarts the stuck
    clock."""
    c = Catchup(stuck_after_ms=100)
    c.state = state
    c.progress.start(0)
    c.apply(event, 50)
    assert c.progress.running == (event is CI.CONTRADICTED)
    return c.state


CATCHUP_AFTER = {pair: caught_up(*pair) for pair in CATCHUP_PAIRS}


def test_the_catchup_table_covers_every_pair() -> None:
    assert set(catchup.TRANSITIONS) == set(CATCHUP_PAIRS)


def test_a_replica_knows_its_history_only_from_genesis_agreed_or_a_slice_adopted() -> None:
    leaving = {e for (s, e), after in CATCHUP_AFTER.items() if s is C.UNSYNCED and after is not s}
    assert leaving == {CI.GENESIS_AGREED, CI.ADOPTED}
    assert all(CATCHUP_AFTER[s, CI.ADOPTED] is C.SYNCED for s in CatchupState)
    forgetting = [p for p, after in CATCHUP_AFTER.items() if after is C.UNSYNCED]
    assert all(s is C.UNSYNCED for s, _ in forgetting), "a known history is never forgotten"


def test_only_a_contradiction_diverges_a_synced_replica_and_progress_heals_it() -> None:
    entering = {
        p for p, after in CATCHUP_AFTER.items() if after is C.DIVERGED and p[0] is not C.DIVERGED
    }
    assert entering == {(C.SYNCED, CI.CONTRADICTED)}
    healing = {
        e for (s, e), after in CATCHUP_AFTER.items() if s is C.DIVERGED and after is C.SYNCED
    }
    assert healing == {CI.ADOPTED, CI.VERIFIED_MOVED, CI.REFOLDED}


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


def test_a_replica_alone_with_an_unverified_tail_refolds_it() -> None:
    c = Catchup(100)
    c.apply(CI.GENESIS_AGREED, 0)
    assert c.on_tick(0, view(), 2, True) is CatchupAction.NONE  # the stuck clock starts
    assert c.on_tick(199, view(), 2, True) is CatchupAction.SYNC
    assert c.on_tick(200, view(), 2, True) is CatchupAction.REFOLD
    alone = PeerView(
        live=0, verified_known=0, any_verified=False, verified_ahead=False, heads_ahead=False
    )
    c.apply(CI.REFOLDED, 200)
    assert c.on_tick(900, alone, 2, True) is CatchupAction.NONE  # nobody to verify it with
    assert not c.progress.running


def test_a_diverged_replica_asks_for_a_sync_at_once() -> None:
    c = Catchup(100)
    c.apply(CI.GENESIS_AGREED, 0)
    c.apply(CI.CONTRADICTED, 0)
    assert c.on_tick(1, view(), 2, True) is CatchupAction.SYNC
