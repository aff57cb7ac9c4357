"""After a restart: a replica folds nothing until a quorum of its replicas said what their
restored tails hold, and folds those txs in their place rather than past them."""

from test_stream import BASE, LIMITS, follow_all, promise_all, replica, stabilize

from relay.core.catchup import CatchupInput
from relay.core.digest import genesis
from relay.core.lane import LaneState
from relay.core.messages import OriginReport, RepairData, StreamAck, Tx, fold_tx
from relay.core.stream import StreamReplica


def ack(sender: int, *reports: OriginReport) -> StreamAck:
    return StreamAck("s", sender, 7, 0, 0, 0, genesis("s"), 0, reports)


def fresh(self_id: int = 1) -> StreamReplica:
    r = StreamReplica("s", self_id, (1, 2, 3), 2, LIMITS)
    r.catchup.apply(CatchupInput.GENESIS_AGREED, 0)
    follow_all(r)
    return r


def restored(txs: list[Tx], verified_seq: int, self_id: int = 1) -> StreamReplica:
    """A replica started from a log holding ``txs``, marked verified up to ``verified_seq``."""
    r = StreamReplica("s", self_id, (1, 2, 3), 2, LIMITS)
    digests, digest = [], genesis("s")
    for tx in txs:
        digest = fold_tx(digest, tx)
        digests.append(digest)
    r.rejoin(7)
    r.restore(0, genesis("s"), tuple(txs), tuple(digests), verified_seq, ())
    return r


def test_nothing_folds_until_a_quorum_of_replicas_was_heard() -> None:
    r = fresh()
    assert r.take(Tx(BASE + 1, 0, 1, 7, "", 0, b"a"))
    for lane in r.lanes.values():
        lane.claim(lane.contig, BASE + 5)
    assert not stabilize(r), "only itself heard: a peer may have restored a tx below it"
    r.take_ack(ack(2), 0)
    assert stabilize(r) and r.timeline.head_seq == BASE + 1


def test_a_restored_tail_is_told_until_it_is_verified() -> None:
    tail = [Tx(BASE + 1, 0, 2, 6, "", 0, b"a"), Tx(BASE + 2, 0, 3, 6, "", 0, b"b")]
    r = restored(tail, verified_seq=BASE + 1)
    told = [x for x in r.reports() if x.restored]
    assert told == [OriginReport(3, 6, BASE + 2, restored=True)]  # origin 2's tx is verified
    r.timeline.verify_upto(BASE + 2)
    assert not [x for x in r.reports() if x.restored]


def test_an_epoch_only_a_peer_restored_is_cut_and_repaired_before_anything_folds_past_it() -> None:
    """Seed 9600282 with acknowledgements at the verified seq: node 3 restored a tx of node
    2's last epoch that node 1 had lost with its page cache, and node 2 never came back.
    Node 1 knew nothing of that epoch and folded its own new txs past the tx."""
    lost = Tx(BASE + 5, 0, 2, 6, "", 0, b"acknowledged")
    r = fresh()
    r.lanes[2] = r.lanes[2].successor(0, LaneState.NEW)  # node 2 not heard since the start
    assert r.take(Tx(BASE + 9, 0, 1, 7, "", 0, b"new"))
    r.lanes[1].claim(BASE + 9, BASE + 20)
    r.lanes[3].claim(0, BASE + 20)

    r.take_ack(ack(3, OriginReport(2, 6, BASE + 5, restored=True)), 0)
    lane = r.lanes[2]
    assert (lane.epoch, lane.state) == (6, LaneState.CUTTING)
    assert not stabilize(r), "the cut epoch holds the watermark"
    r.take_ack(ack(3, OriginReport(2, 6, BASE + 5)), 0)  # node 3 reports what it holds
    repairs = r.on_tick(0, {2: (False, 0), 3: (True, 7)}).repairs
    assert repairs == ((2, 6, 0, BASE + 5),)
    r.take_repair(RepairData("s", 3, 2, 6, (lost,), 0, BASE + 5))
    r.on_tick(0, {2: (False, 0), 3: (True, 7)})
    assert r.lanes[2].state is LaneState.CUT
    assert stabilize(r) and r.timeline.seqs == [BASE + 5, BASE + 9]


def test_a_lane_that_followed_a_newer_epoch_goes_back_to_cut_the_restored_one() -> None:
    """Node 2 came back with a new epoch before a peer said it restored a tx of node 2's
    previous one: while nothing is folded, the lane cuts the old epoch first."""
    r = fresh()
    r.take_ack(ack(3, OriginReport(2, 6, BASE + 5, restored=True)), 0)
    lane = r.lanes[2]
    assert (lane.epoch, lane.state) == (6, LaneState.CUTTING)
    r.lanes[2].cut_at = BASE + 5
    r.lanes[2].contig = BASE + 5  # repaired
    r.on_tick(0, {2: (True, 7), 3: (True, 7)})
    r.on_tick(0, {2: (True, 7), 3: (True, 7)})
    assert (r.lanes[2].epoch, r.lanes[2].closed) == (7, (6, BASE + 5))


def test_a_node_that_restored_its_own_last_epochs_txs_cuts_them_before_it_coordinates() -> None:
    mine = Tx(BASE + 3, 0, 1, 6, "", 0, b"mine")
    r = restored([mine], verified_seq=0)  # the node restarted as epoch 7
    own = r.lanes[1]
    assert (own.epoch, own.state, own.contig) == (6, LaneState.CUTTING, BASE + 3)
    r.take_ack(ack(2, OriginReport(1, 6, BASE + 3, answer=True)), 0)
    r.take_ack(ack(3, OriginReport(1, 6, BASE + 3, answer=True)), 0)
    r.on_tick(0, {2: (True, 7), 3: (True, 7)})
    own = r.lanes[1]
    assert (own.epoch, own.state, own.closed) == (7, LaneState.ACTIVE, (6, BASE + 3))


def test_a_refold_that_gives_up_a_left_epochs_tx_tells_peers_what_it_holds_now() -> None:
    """Seed 9700332: node 2 restored a tx of node 3's previous epoch, its lane (new since the
    restart) followed node 3's new epoch, and it told its peers, cutting the old epoch, that it
    held the tx. A refold then gave the tx up (no lane of that epoch takes it back), and the
    peers' cut waited for it forever: the replica now says again what it holds of the epoch."""
    old = Tx(BASE + 5, 0, 3, 6, "", 0, b"restored")
    r = restored([old], verified_seq=0, self_id=2)
    r.follow(3, 7)
    assert r.lanes[3].epoch == 7
    r.rebuild.refold(0)
    assert r.timeline.seqs == []
    assert OriginReport(3, 6, 0, answer=True) in r.reports()


def test_a_node_whose_epoch_to_rejoin_was_cut_does_not_rejoin_it() -> None:
    """While the node's lane cut its restored epoch, peers cut its current one too: it must
    start a newer epoch (``own_epoch_cut``), not go back to the one they closed."""
    r = restored([Tx(BASE + 3, 0, 1, 6, "", 0, b"mine")], verified_seq=0)
    assert r.rejoin_epoch == 7
    r.suspect(1, 7)  # peers suspected epoch 7: the lane moves on to cut it
    own = r.lanes[1]
    assert (own.epoch, own.state) == (7, LaneState.CUTTING)
    own.cut_at = own.contig = BASE + 3
    r.on_tick(0, {2: (True, 7), 3: (True, 7)})
    assert r.lanes[1].state is LaneState.CUT
    r.on_tick(0, {2: (True, 7), 3: (True, 7)})
    assert r.rejoin_epoch == 0 and r.lanes[1].state is LaneState.CUT


def test_a_log_links_past_a_skipped_copy_so_a_restored_lane_chains() -> None:
    """Seed 13 (5 nodes, with acknowledgements timed otherwise): origin 2's retry of a
    message folded as a skipped copy (BASE + 2), its next tx named the copy as its prev, and
    every node lost power. The logs, which hold the timeline and never a skipped copy,
    restored the txs without it; a refold then left the next tx waiting for the copy on every
    replica, and the cut of the epoch waited forever. The log now keeps the next tx linked to
    the copy's own prev (the prev is not in the digest)."""
    r = replica()
    first = Tx(BASE + 1, 0, 2, 7, "p", 1, b"m")
    copy = Tx(BASE + 2, BASE + 1, 2, 7, "p", 1, b"m")  # a retry, stamped again
    after = Tx(BASE + 3, BASE + 2, 2, 7, "p", 2, b"n")
    for tx in (first, copy, after):
        assert r.take(tx)
    promise_all(r, BASE + 5)
    stabilize(r)
    assert r.timeline.seqs == [BASE + 1, BASE + 3]
    persist = r.to_persist()
    assert persist is not None
    logged = list(persist.txs)
    assert logged == [first, after._replace(prev=BASE + 1)]
    assert r.timeline.txs[-1] == after  # in memory the link stays, the copy with it

    back = restored(logged, verified_seq=0)
    back.follow(2, 7)
    back.rebuild.refold(0)
    lane = back.lanes[2]
    assert list(lane.queue) == logged and not lane.early and lane.contig == BASE + 3
    unlinked = restored([first, after], verified_seq=0)  # as the log held them before
    unlinked.follow(2, 7)
    unlinked.rebuild.refold(0)
    assert list(unlinked.lanes[2].early.values()) == [after], "waits for the copy forever"


def test_a_lane_holding_the_skipped_copy_chains_the_tx_a_log_linked_past_it() -> None:
    """Origin 2 restarted alone and answers from its log, where its tx after a retry's
    skipped copy names the copy's prev. A replica that holds the copy in its lane, unfolded,
    and lacks the tx, chains it all the same: every tx up to the lane's contig is held, so
    is the one the tx names (a review found the replica waiting for a prev it had passed)."""
    r = replica()
    first = Tx(BASE + 1, 0, 2, 7, "p", 1, b"m")
    copy = Tx(BASE + 2, BASE + 1, 2, 7, "p", 1, b"m")
    assert r.take(first) and r.take(copy)
    linked = Tx(BASE + 3, BASE + 1, 2, 7, "p", 2, b"n")  # as origin 2's log keeps it
    assert r.take(linked)
    lane = r.lanes[2]
    assert list(lane.queue) == [first, copy, linked] and lane.contig == BASE + 3
    later = Tx(BASE + 5, BASE + 4, 2, 7, "p", 4, b"q")  # early: its prev is not held
    assert not r.take(later) and lane.early == {BASE + 4: later}
    assert r.take(Tx(BASE + 4, BASE + 3, 2, 7, "p", 3, b"o")) and lane.contig == BASE + 5
    passed = Tx(BASE + 9, BASE + 6, 2, 7, "p", 6, b"s")  # names a prev below what comes next
    assert not r.take(passed) and BASE + 6 in lane.early
    assert r.take(Tx(BASE + 7, BASE + 5, 2, 7, "p", 5, b"r"))
    assert lane.contig == BASE + 9 and not lane.early, "held once the lane passed its prev"


def test_early_txs_whose_prevs_the_lane_passed_chain_one_by_one() -> None:
    """Early txs that name prevs the lane passed chain lowest seq first, each letting the
    next exact link chain: none is dropped as if held (a review found one lost when they
    were taken as a batch)."""
    r = replica()
    lane = r.lanes[2]
    lane.contig = BASE + 10
    early = [
        Tx(BASE + 21, BASE + 11, 2, 7, "p", 21, b"a"),
        Tx(BASE + 22, BASE + 21, 2, 7, "p", 22, b"b"),
        Tx(BASE + 23, BASE + 12, 2, 7, "p", 23, b"c"),
    ]
    for tx in early:
        assert not r.take(tx)
    assert r.take(Tx(BASE + 20, BASE + 10, 2, 7, "p", 20, b"z"))
    assert [tx.seq for tx in lane.queue] == [BASE + 20, BASE + 21, BASE + 22, BASE + 23]
    assert not lane.early
