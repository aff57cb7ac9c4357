"""A cut epoch's last txs and a newer epoch of the same origin."""

from test_stream import BASE, replica, stabilize

from relay.core import cut
from relay.core.digest import genesis
from relay.core.lane import Lane, LaneState
from relay.core.messages import OriginReport, StreamAck, Tx
from relay.core.timeline import Timeline


def test_a_newer_epochs_report_waits_for_a_cut_epochs_last_txs() -> None:
    """Replica 1 holds origin 2's epoch-7 tx in its CUT lane, not folded yet (origin 3's
    claim holds the watermark), when a peer reports origin 2's epoch 8 being cut. The lane
    used to move to epoch 8 at once and drop the tx, then answer repairs of epoch 7 as whole
    without it (an asker cutting epoch 7 raised its contig over a tx it never got; a review
    found it). The suspicion now waits, as following a newer epoch does, until the cut
    epoch's last txs are folded, and is taken at the next tick after that."""
    r = replica()
    t = Tx(BASE + 5, 0, 2, 7, "", 0, b"t")
    assert r.take(t)
    r.lanes[3].claim(BASE + 9, BASE + 9)  # origin 3 claims a tx replica 1 lacks
    r.lanes[1].claim(0, BASE + 9)  # and replica 1 itself promised past it
    r.suspect(2, 7)
    r.lanes[2].cut_at = BASE + 5
    peers = {2: (False, 7), 3: (True, 7)}
    r.on_tick(0, peers)
    stabilize(r)
    assert r.lanes[2].state is LaneState.CUT and list(r.lanes[2].queue) == [t]

    report = OriginReport(2, 8, BASE + 20)
    r.take_ack(StreamAck("s", 3, 7, 0, 0, 0, genesis("s"), 0, (report,)), 0)
    assert r.lanes[2].epoch == 7 and list(r.lanes[2].queue) == [t]
    assert r.txs_of(2, 7, 0, BASE + 9, 100) == ([t], BASE + 5)
    assert not r.at_rest(peers)

    assert r.take(Tx(BASE + 9, 0, 3, 7, "", 0, b"u"))  # origin 3's tx: the watermark passes
    stabilize(r)
    assert r.timeline.head_seq == BASE + 9 and not r.lanes[2].queue
    r.on_tick(0, peers)
    lane = r.lanes[2]
    assert (lane.epoch, lane.state, lane.closed) == (8, LaneState.CUTTING, (7, BASE + 5))
    assert r.txs_of(2, 7, 0, BASE + 9, 100) == ([t], BASE + 5)


def test_a_cut_nobody_live_can_reach_comes_down_to_the_live_reports() -> None:
    """Nodes 2 and 4 of five were cut off together, so node 4 held more of node 2's epoch
    than anyone else; its report set the cut, and then both stopped. The three live replicas
    waited forever for a repair nobody could answer (simulator, seed 5408788 with five
    nodes). The live quorum's highest report covers every acknowledged tx: the cut comes down
    to it once the grace time has passed."""
    lane = Lane(2, repair_after_ms=50, cut_grace_ms=100, epoch=7, state=LaneState.CUTTING)
    lane.contig = 5
    lane.cut_reports = {1: 5, 3: 5, 5: 4, 4: 10}
    lane.cut_at = 10  # decided while node 4 was live
    lanes = {2: lane}
    settled, needs = cut.settle(lanes, 1, {1, 3, 5}, 3, head=3, elapsed_ms=0)
    assert not settled and needs == [(2, 7, 5, 10)], "within the grace time: repair first"
    settled, needs = cut.settle(lanes, 1, {1, 3, 5}, 3, head=3, elapsed_ms=100)
    assert settled and not needs
    assert lanes[2].state is LaneState.CUT and lanes[2].contig == 5


def test_a_left_epoch_is_answered_while_a_settled_cut_waits_above_what_is_held() -> None:
    """Origin 1 told replica 2 it held its old epoch up to seq 10, then a refold gave that
    tx up and its one answer saying so was cut off; the third replica, the only other holder,
    was gone for good, so replica 2's settled cut at 10 waited forever (simulator, seed
    30200452 with three nodes and ``--partitions``; in 30200054 the answers of a restarted
    origin, which never held the epoch again, were cut off while the cut was decided). A
    replica whose lane left an epoch behind answers every report of it that still waits for
    txs above what its timeline holds; a final cut (two replicas that keep each other's
    epochs closed once answered each other forever) and a closed epoch ask nothing."""
    lanes = {1: Lane(1, 50, 100, epoch=9, state=LaneState.ACTIVE)}
    timeline = Timeline("s", 100)
    waiting = OriginReport(1, 7, BASE + 10, settled=True, waiting=True)
    assert cut.owed(lanes, waiting, timeline), "it holds nothing of epoch 7"
    assert cut.owed(lanes, OriginReport(1, 7, BASE + 10), timeline), "still cutting: answered"
    assert not cut.owed(lanes, OriginReport(1, 7, BASE + 10, settled=True), timeline), "final"
    timeline.extend([Tx(BASE + 10, 0, 1, 7, "", 0, b"t")], [b"d"])
    assert not cut.owed(lanes, waiting, timeline), "it holds the cut's tx"
    assert timeline.truncate_after(BASE) and cut.owed(lanes, waiting, timeline), "given up"
    lanes[1].closed = (7, BASE + 10)
    assert not cut.owed(lanes, waiting, timeline), "it keeps epoch 7 closed"


def test_a_waiting_report_is_answered_when_the_answer_changes_or_may_be_lost() -> None:
    """Every ack of a replica waiting for a cut carries its waiting report, and an answer can
    itself draw an ack (a replica answers one that looks behind it): answered at each, two
    replicas would trade acks for as long as the cut waits. Replica 1, whose lane left origin
    2's epoch 5, answers again only once ``repair_after_ms`` passed."""
    r = replica()  # its lanes follow epoch 7
    waiting = OriginReport(2, 5, BASE + 10, settled=True, waiting=True)

    def answered(elapsed_ms: int) -> bool:
        r.take_ack(StreamAck("s", 3, 7, 0, 0, 0, genesis("s"), 0, (waiting,)), elapsed_ms)
        return bool([x for x in r.reports() if x.answer and x.origin == 2])

    assert answered(0)
    assert not answered(50)
    assert answered(50 + r.waiting_answers.again_ms)


def test_replicas_waiting_for_one_cut_tell_each_other_what_they_hold() -> None:
    """Replica 1 decided origin 2's cut at 10 from replica 4's report, and replica 3 took
    that settled cut as it was, never reporting; then replica 4 stopped for good. Each of
    1 and 3 lacked the other's report, so the cut never came down (simulator, seed 10010842
    with three nodes and ``--partitions``, where a lane sent back to a closed epoch took its
    cut without reports). A waiting report tells what its replica holds, which counts."""
    one = Lane(2, repair_after_ms=50, cut_grace_ms=100, epoch=7, state=LaneState.CUTTING)
    one.contig, one.cut_at, one.cut_reports = 5, 10, {1: 5, 4: 10}
    three = Lane(2, repair_after_ms=50, cut_grace_ms=100, epoch=7, state=LaneState.CUTTING)
    three.contig, three.cut_at = 4, 10
    lanes_1, lanes_3 = {2: one, 1: Lane(1, 50, 100)}, {2: three, 3: Lane(3, 50, 100)}
    lanes_1[3], lanes_3[1] = Lane(3, 50, 100), Lane(1, 50, 100)
    cut.settle(lanes_3, 3, {1, 3}, 2, head=3, elapsed_ms=0)
    (told_3,) = cut.reports(lanes_3, {})
    assert told_3.settled and told_3.waiting and told_3.held == 4
    assert cut.take_report(lanes_1, 3, told_3) and one.cut_reports[3] == 4
    assert not cut.take_report(lanes_1, 3, told_3), "told once: nothing changes"
    (told_1,) = cut.reports(lanes_1, {})
    assert cut.take_report(lanes_3, 1, told_1) and three.cut_reports[1] == 5
    cut.settle(lanes_1, 1, {1, 3}, 2, head=3, elapsed_ms=0)
    assert cut.settle(lanes_1, 1, {1, 3}, 2, head=3, elapsed_ms=100) == (True, [])
    assert one.cut_at == 5 and lanes_1[2].state is LaneState.CUT
    assert cut.settle(lanes_3, 3, {1, 3}, 2, head=3, elapsed_ms=100) == (False, [(2, 7, 4, 5)])
    assert three.cut_at == 5, "it comes down, and replica 1's txs are repaired up to it"
