"""StreamReplica: stability, votes that must agree on the digest, dedup."""

from relay.core.digest import fold, genesis
from relay.core.lane import LaneState
from relay.core.messages import Tx
from relay.core.stream import StreamLimits, StreamReplica

LIMITS = StreamLimits(buffer_txs_max=100, dedup_window_ms=60_000, dedup_keys_max=1000)
BASE = 1 << 40


def replica(self_id: int = 1) -> StreamReplica:
    r = StreamReplica("s", self_id, (1, 2, 3), 2, LIMITS)
    r.synced = True  # a new stream: every peer reported nothing verified
    for lane in r.lanes.values():
        lane.restart(7, LaneState.ACTIVE)
    return r


def promise_all(r: StreamReplica, floor: int) -> None:
    for lane in r.lanes.values():
        lane.claim(lane.contig, floor)


def test_nothing_is_stable_until_every_origin_promised_past_it() -> None:
    r = replica()
    r.take(Tx(BASE + 10, 0, 2, 7, "", 0, b"a"))
    r.lanes[2].claim(BASE + 10, BASE + 10)
    r.lanes[1].claim(0, BASE + 50)
    assert not r.stabilize(0)  # origin 3 has promised nothing: a lower seq may still come
    r.take(Tx(BASE + 5, 0, 3, 7, "", 0, b"b"))
    r.lanes[3].claim(BASE + 5, BASE + 20)
    assert r.stabilize(0)
    assert r.timeline.seqs == [BASE + 5, BASE + 10]  # seq order, not arrival order


def test_a_gap_holds_the_origin_back_at_what_it_holds() -> None:
    r = replica()
    r.take(Tx(BASE + 1, 0, 2, 7, "", 0, b"a"))
    r.take(Tx(BASE + 3, BASE + 2, 2, 7, "", 0, b"c"))  # BASE+2 never arrived
    r.lanes[2].claim(BASE + 3, BASE + 9)
    r.lanes[1].claim(0, BASE + 9)
    r.lanes[3].claim(0, BASE + 9)
    r.stabilize(0)
    assert r.timeline.seqs == [BASE + 1]
    assert r.lanes[2].missing_range() == (BASE + 1, BASE + 3)
    r.take(Tx(BASE + 2, BASE + 1, 2, 7, "", 0, b"b"))
    r.stabilize(0)
    assert r.timeline.seqs == [BASE + 1, BASE + 2, BASE + 3]


def stable_one(r: StreamReplica) -> bytes:
    r.take(Tx(BASE + 1, 0, 1, 7, "", 0, b"x"))
    promise_all(r, BASE + 5)
    r.stabilize(0)
    return fold(genesis("s"), BASE + 1, 1, b"x")


def test_a_quorum_must_agree_on_the_digest_to_verify() -> None:
    r = replica()
    digest = stable_one(r)
    assert r.verified_seq == 0  # our own vote alone is not a quorum
    assert not r.take_vote(2, BASE + 1, b"\x00" * 32)  # disagrees
    assert r.verified_seq == 0 and r.mismatches == 1
    assert r.take_vote(3, BASE + 1, digest)
    assert r.verified_seq == BASE + 1


def test_a_vote_ahead_of_us_counts_once_we_catch_up() -> None:
    r = replica()
    digest = fold(genesis("s"), BASE + 1, 1, b"x")
    r.take_vote(2, BASE + 1, digest)
    assert r.verified_seq == 0
    stable_one(r)
    assert r.verified_seq == BASE + 1


def test_a_retried_message_is_folded_once_wherever_it_was_coordinated() -> None:
    r = replica()
    r.take(Tx(BASE + 1, 0, 2, 7, "p", 9, b"x"))
    r.take(Tx(BASE + 2, 0, 3, 7, "p", 9, b"x"))  # the same message retried on node 3
    assert r.lookup_key("p", 9) == BASE + 2 or r.lookup_key("p", 9) == BASE + 1
    promise_all(r, BASE + 5)
    r.stabilize(0)
    assert r.timeline.seqs == [BASE + 1]
    assert r.skipped[BASE + 2][1] == BASE + 1
    assert r.lookup_key("p", 9) == BASE + 1


def test_the_buffer_trims_only_verified_txs() -> None:
    r = StreamReplica(
        "s", 1, (1, 2, 3), 2, StreamLimits(buffer_txs_max=8, dedup_window_ms=1, dedup_keys_max=10)
    )
    r.synced = True
    for lane in r.lanes.values():
        lane.restart(7, LaneState.ACTIVE)
    prev = 0
    for i in range(1, 31):
        r.take(Tx(BASE + i, prev, 1, 7, "", 0, b"x"))
        prev = BASE + i
    promise_all(r, BASE + 100)
    r.stabilize(0)
    assert len(r.timeline.seqs) == 30  # nothing verified yet: nothing may go
    r.take_vote(2, r.timeline.head_seq, r.timeline.head_digest)
    assert len(r.timeline.seqs) <= 9
    assert r.timeline.trimmed_seq > 0
