"""A node started with --recover: it counts for nothing in a stream until the stream recovered."""

from test_stream import BASE, LIMITS, follow_all, promise_all, stabilize

from relay.core.amnesia import Recovery
from relay.core.catchup import CatchupInput
from relay.core.digest import genesis
from relay.core.lane import LaneState
from relay.core.messages import OriginReport, StreamAck, Tx, fold_tx
from relay.core.stream import StreamReplica
from relay.core.votes import Votes


def test_a_stream_recovers_once_enough_peers_to_meet_every_quorum_were_heard_and_passed() -> None:
    three = Recovery(peers=2, quorum=2)
    three.heard(1, floor=50, head_seq=30)
    assert not three.done(1 << 60), "one of two others may be the one that never held it"
    three.heard(1, floor=80, head_seq=80)  # heard again: the first bound stands
    three.heard(2, floor=20, head_seq=40)  # a head above the floor: a tx taken by a sync
    assert three.target == 50
    assert not three.done(49) and three.done(50)

    five = Recovery(peers=4, quorum=3)
    for peer, floor in ((1, 10), (2, 30)):
        five.heard(peer, floor, 0)
    assert not five.done(1 << 60)
    five.heard(3, 20, 0)
    assert five.done(30)

    assert Recovery.needed_for(peers=2, quorum=2)
    assert not Recovery.needed_for(peers=1, quorum=2), "every quorum holds both others"
    assert StreamReplica("s", 2, (1, 2), 2, LIMITS, forgot=True).recovery is None


def forgetful_replica() -> StreamReplica:
    """Node 3 of three, started with --recover."""
    r = StreamReplica("s", 3, (1, 2, 3), 2, LIMITS, forgot=True)
    r.catchup.apply(CatchupInput.GENESIS_AGREED, 0)
    r.heard = None
    follow_all(r)
    return r


def test_a_recovering_replica_neither_reports_nor_counts_itself_in_a_cut() -> None:
    """Seed 9876123: a replaced node's report below a tx it had verified, with one other
    replica's, cut the tx away. Until the stream recovered, a cut is decided by the others'
    reports alone."""
    r = forgetful_replica()
    r.suspect(1, 7)
    assert r.lanes[1].state is LaneState.CUTTING
    assert r.reports() == ()
    peers = {1: (False, 7), 2: (True, 7)}
    r.on_tick(10_000, peers)
    assert r.lanes[1].cut_at is None and 3 not in r.lanes[1].cut_reports

    ack = StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, (OriginReport(1, 7, 0),))
    r.take_ack(ack, 0)
    r.on_tick(20_000, peers)
    assert r.lanes[1].cut_at is None, "one report is not a quorum's"

    r.take_ack(StreamAck("s", 1, 7, 0, 0, 0, genesis("s"), 0), 0)  # heard both others
    r.verify(0, {})
    assert r.recovery is None
    assert r.reports() == (OriginReport(1, 7, 0),)
    r.on_tick(30_000, peers)
    assert r.lanes[1].cut_at == 0, "recovered: its own report counts with node 2's"


def test_a_recovering_replica_votes_no_further_than_what_the_others_verified() -> None:
    """Its own vote could help verify a history without a tx it forgot: until the stream
    recovered, it votes its verified seq, and the others' votes alone verify; it recovers
    once they verified past the floors they first sent."""
    r = forgetful_replica()
    tx = Tx(BASE + 5, 0, 1, 7, "", 0, b"t")
    assert r.take(tx)
    promise_all(r, BASE + 9)
    stabilize(r)
    assert r.timeline.head_seq == BASE + 5
    assert r.vote() == (0, genesis("s"))
    digest = fold_tx(genesis("s"), tx)
    r.take_ack(StreamAck("s", 1, 7, BASE + 5, 0, BASE + 5, digest, 0), 0)
    r.verify(0, {})
    assert r.verified_seq == 0, "one other's vote and its own do not make a quorum"
    r.take_ack(StreamAck("s", 2, 7, BASE + 6, 0, BASE + 5, digest, 0), 0)
    r.verify(0, {})
    assert r.verified_seq == BASE + 5
    assert r.recovery is not None, "node 2's floor was past it: a tx may lie between"
    assert r.vote() == (BASE + 5, digest)


def test_a_restarted_peers_votes_count_no_more() -> None:
    """A vote speaks for the incarnation that cast it: one on a replaced disk no longer
    holds what it voted for, so a peer that restarts votes again."""
    r = forgetful_replica()
    r.recovery = None
    tx = Tx(BASE + 5, 0, 1, 7, "", 0, b"t")
    assert r.take(tx)
    promise_all(r, BASE + 9)
    stabilize(r)
    votes: Votes = r.votes
    assert not votes.take(2, BASE + 5, fold_tx(genesis("s"), tx), 0, r.timeline, True)
    assert votes.matched[2] == BASE + 5
    votes.forget_peer(2)
    assert votes.matched[2] == 0 and 2 not in votes.heads
