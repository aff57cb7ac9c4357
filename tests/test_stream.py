"""StreamReplica: stability, votes that must agree on the digest, dedup."""

from relay import errors
from relay.core.catchup import CatchupInput
from relay.core.dedup import content_tag
from relay.core.digest import fold, genesis
from relay.core.events import PublishRequested, Rejected
from relay.core.flake import SEQ_MAX, make_seq
from relay.core.lane import LaneInput
from relay.core.messages import Item, RepairData, StreamAck, SyncData, Tx, fold_tx
from relay.core.origin import Origin
from relay.core.publish import Publishes, attach_retries
from relay.core.rebuild import HeldVerified, SliceAdopted, SliceRefused
from relay.core.stream import StreamLimits, StreamReplica
from relay.core.timeline import Timeline
from relay.core.timer import Now
from relay.core.votes import Votes

LIMITS = StreamLimits(buffer_txs_max=100, dedup_window_ms=60_000, dedup_keys_max=1000)
BASE = 1 << 40


def follow_all(r: StreamReplica) -> None:
    for origin, lane in r.lanes.items():
        r.lanes[origin] = lane.apply(LaneInput.NEWER_EPOCH, 7)


def replica(self_id: int = 1, limits: StreamLimits = LIMITS) -> StreamReplica:
    r = StreamReplica("s", self_id, (1, 2, 3), 2, limits)
    r.catchup.apply(CatchupInput.GENESIS_AGREED, 0)  # every peer reported nothing verified
    r.heard = None  # a quorum of its replicas told what they restored (nothing)
    follow_all(r)
    return r


def stabilize(r: StreamReplica) -> bool:
    return r.stabilize({}, 0)


def take_vote(r: StreamReplica, sender: int, seq: int, digest: bytes, marked: bool = False) -> bool:
    """A peer's vote arrives and the node flushes: True if the verified seq moved. A peer
    that ``marked`` says it verified its vote too."""
    before = r.verified_seq
    mark = (seq, digest) if marked else (0, b"")
    r.take_ack(StreamAck("s", sender, 7, 0, 0, seq, digest, 0, (), *mark), 0)
    r.verify(0, {})
    return r.verified_seq > before


def promise_all(r: StreamReplica, floor: int) -> None:
    for lane in r.lanes.values():
        lane.claim(lane.contig, floor)


def test_nothing_is_stable_until_every_origin_promised_past_it() -> None:
    r = replica()
    r.take(Tx(BASE + 10, 0, 2, 7, "", 0, b"a"))
    r.lanes[2].claim(BASE + 10, BASE + 10)
    r.lanes[1].claim(0, BASE + 50)
    assert not stabilize(r)  # origin 3 has promised nothing: a lower seq may still come
    r.take(Tx(BASE + 5, 0, 3, 7, "", 0, b"b"))
    r.lanes[3].claim(BASE + 5, BASE + 20)
    assert stabilize(r)
    assert r.timeline.seqs == [BASE + 5, BASE + 10]  # seq order, not arrival order


def test_a_gap_holds_the_origin_back_at_what_it_holds() -> None:
    r = replica()
    r.take(Tx(BASE + 1, 0, 2, 7, "", 0, b"a"))
    r.take(Tx(BASE + 3, BASE + 2, 2, 7, "", 0, b"c"))  # BASE+2 never arrived
    r.lanes[2].claim(BASE + 3, BASE + 9)
    r.lanes[1].claim(0, BASE + 9)
    r.lanes[3].claim(0, BASE + 9)
    stabilize(r)
    assert r.timeline.seqs == [BASE + 1]
    assert r.lanes[2].missing_range(r.timeline.head_seq) == (BASE + 1, BASE + 3)
    r.take(Tx(BASE + 2, BASE + 1, 2, 7, "", 0, b"b"))
    stabilize(r)
    assert r.timeline.seqs == [BASE + 1, BASE + 2, BASE + 3]


def stable_one(r: StreamReplica) -> bytes:
    r.take(Tx(BASE + 1, 0, 1, 7, "", 0, b"x"))
    promise_all(r, BASE + 5)
    stabilize(r)
    return fold(genesis("s"), BASE + 1, 1, "", 0, b"x")


def test_a_quorum_must_agree_on_the_digest_to_verify() -> None:
    r = replica()
    digest = stable_one(r)
    assert r.verified_seq == 0  # our own vote alone is not a quorum
    assert not take_vote(r, 2, BASE + 1, b"\x00" * 32)  # disagrees
    assert r.verified_seq == 0 and r.votes.mismatches == 1
    assert take_vote(r, 3, BASE + 1, digest)
    assert r.verified_seq == BASE + 1


def test_without_waiting_for_the_disk_a_replica_acks_its_mark_and_tells_a_peer_lacking_it() -> None:
    """With ``fsync`` never or interval the mark is the verified seq: the replica acks when it
    moves, and answers a peer whose ack shows it lacking the mark, at once if its last ack
    did not carry it, else once that ack is ``mark_again_ms`` old."""
    r = replica()
    digest = stable_one(r)
    r.ack_sent(0, r.mark, 0)
    assert take_vote(r, 2, BASE + 1, digest)
    assert r.mark == BASE + 1 and r.owes_ack, "the mark moved: the peers count it"
    lacking = StreamAck("s", 3, 7, 0, 0, BASE + 1, digest, BASE + 1, readable_seq=0)
    r.ack_sent(0, 0, 0)  # an ack that did not carry the mark
    r.take_ack(lacking, 1)
    assert r.owes_ack, "node 3 verified, but lacks a second mark"
    r.ack_sent(0, r.mark, 1)
    r.take_ack(lacking, 1 + LIMITS.mark_again_ms - 1)
    assert not r.owes_ack, "the ack that crossed node 3's carries the mark"
    r.take_ack(lacking, 1 + LIMITS.mark_again_ms)
    assert r.owes_ack, "node 3 still lacks it: the ack may have been lost"


def test_a_mark_the_peers_can_make_without_this_replica_waits_for_their_acks() -> None:
    """A replica whose mark moved while a live peer is yet to fold waits for that peer's own
    ack: the peers' two marks make their quorum without this one. It tells its mark when
    nothing is coming, or after ``mark_again_ms``."""
    up = {2: (True, 7), 3: (True, 7)}
    r = replica()
    digest = stable_one(r)
    r.ack_sent(0, r.mark, 0)
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, BASE + 1, (), BASE + 1, digest), 0)
    r.verify(0, up)
    assert r.mark == BASE + 1 and not r.owes_ack, "node 3 is yet to fold and mark"
    assert not r.at_rest(up), "a tick may have to tell the mark"
    r.take_ack(StreamAck("s", 3, 7, 0, 0, BASE + 1, digest, BASE + 1, (), BASE + 1, digest), 1)
    r.verify(1, up)
    assert not r.owes_ack and r.marks_told.waits_since is None, "the peers' marks make a quorum"

    r = replica()
    digest = stable_one(r)
    r.ack_sent(0, r.mark, 0)
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, BASE + 1, (), BASE + 1, digest), 0)
    r.verify(0, {2: (True, 7), 3: (False, 7)})
    assert r.owes_ack, "node 3 is down: node 2 counts this replica's mark"

    r = replica()
    digest = stable_one(r)
    r.ack_sent(0, r.mark, 0)
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, BASE + 1, (), BASE + 1, digest), 0)
    r.verify(0, up)
    r.on_tick(LIMITS.mark_again_ms, up)
    assert r.owes_ack, "node 3's mark did not come: this one is told"


def test_a_mark_ahead_of_our_head_counts_once_our_head_reaches_it() -> None:
    """A peer that folded first marks before this replica folds: its mark is kept and counts
    once this replica's head reaches it, digest checked."""
    r = replica()
    digest = fold(genesis("s"), BASE + 1, 1, "", 0, b"x")
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, BASE + 1, (), BASE + 1, digest), 0)
    assert r.votes.marks.get(2, 0) == 0
    stable_one(r)
    r.verify(0, {})
    assert r.votes.marks[2] == BASE + 1
    assert r.timeline.readable_seq == BASE + 1, "two marks: readable"


def test_marks_above_a_cut_are_forgotten_with_the_history_they_named() -> None:
    timeline = Timeline("s", 100, 1 << 20)
    txs = [Tx(BASE + i, BASE + i - 1 if i > 1 else 0, 2, 7, "", 0, bytes([i])) for i in range(1, 6)]
    digests, chain = [], genesis("s")
    for tx in txs:
        chain = fold_tx(chain, tx)
        digests.append(chain)
    timeline.extend(txs, digests)
    votes = Votes(1, (1, 2, 3), 2)
    votes.take_mark(2, 7, BASE + 5, timeline.digest_at(BASE + 5) or b"", timeline)
    assert votes.marked(BASE + 5) == BASE + 5
    votes.forget_after(BASE + 2)  # the timeline was cut there: the mark named what it cut
    assert votes.marked(BASE + 5) == BASE + 2


def test_a_vote_ahead_of_us_counts_once_we_catch_up() -> None:
    r = replica()
    digest = fold(genesis("s"), BASE + 1, 1, "", 0, b"x")
    take_vote(r, 2, BASE + 1, digest)
    assert r.verified_seq == 0
    stable_one(r)
    assert not r.verify(0, {}), "verified, but no peer marked it: nothing to announce"
    assert r.verified_seq == BASE + 1
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, (), BASE + 1, digest), 0)
    assert r.verify(0, {}), "the advance is reported to the one caller that announces it"
    assert r.timeline.readable_seq == BASE + 1
    assert not r.verify(0, {})


def test_a_vote_kept_ahead_of_us_counts_no_more_once_its_voter_retreated() -> None:
    """Seed 9892625: a replica kept a peer's vote ahead of its head; the peer refolded and
    gave those txs up; the replica's head reached the kept vote later. A vote names the
    history its voter held when it cast it, so it must not count once the voter's next retreat
    was heard."""
    r = replica()
    digest = fold(genesis("s"), BASE + 1, 1, "", 0, b"x")
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, retreats=3), 0)
    r.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, retreats=4), 0)  # it refolded
    stable_one(r)
    r.verify(0, {})
    assert r.verified_seq == 0, "the vote named a tail node 2 gave up"
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, retreats=3), 0)  # delayed
    r.verify(0, {})
    assert r.verified_seq == 0, "an ack cast before a retreat heard of counts for nothing"
    assert take_vote(r, 2, BASE + 1, digest) is False  # retreats 0 < 4: still stale
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, retreats=4), 0)
    r.verify(0, {})
    assert r.verified_seq == BASE + 1, "it voted again, after its retreat"


def test_a_vote_matched_above_our_verified_seq_counts_no_more_once_its_voter_retreated() -> None:
    """Five replicas: a peer's match counts with another's to verify, unless the first peer
    retreated since (its match named a tail it gave up)."""
    r = StreamReplica("s", 1, (1, 2, 3, 4, 5), 3, LIMITS)
    r.catchup.apply(CatchupInput.GENESIS_AGREED, 0)
    r.heard = None
    follow_all(r)
    stable_one(r)
    digest = r.timeline.digest_at(BASE + 1) or b""
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, retreats=1), 0)
    assert r.votes.matched[2] == BASE + 1
    r.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, retreats=2), 0)
    r.take_ack(StreamAck("s", 3, 7, 0, 0, BASE + 1, digest, 0), 0)
    r.verify(0, {})
    assert r.verified_seq == 0, "node 2's match named a tail it gave up: 2 of 5 is no quorum"


def test_a_mark_counts_as_its_peers_latest_round_says_it() -> None:
    """A rewind (after a power loss of every node) gives marks back within an epoch: a mark
    heard before a retreat, or in an ack sent before it, counts no more."""
    r = replica()
    digest = stable_one(r)
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, marked_seq=BASE + 1,
                         marked_digest=digest, retreats=1), 0)  # fmt: skip
    assert r.votes.marks[2] == BASE + 1
    r.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, retreats=2), 0)
    assert 2 not in r.votes.marks, "it retreated and says no mark now"
    r.take_ack(StreamAck("s", 2, 7, 0, 0, BASE + 1, digest, 0, marked_seq=BASE + 1,
                         marked_digest=digest, retreats=1), 0)  # fmt: skip
    assert 2 not in r.votes.marks, "an ack sent before the retreat"


def test_a_restarted_peer_votes_in_its_new_epoch_with_its_retreats_counted_afresh() -> None:
    r = replica()
    digest = stable_one(r)
    r.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, retreats=4), 0)
    r.take_ack(StreamAck("s", 2, 8, 0, 0, BASE + 1, digest, 0, retreats=1), 0)
    r.verify(0, {})
    assert r.verified_seq == BASE + 1, "epoch 8 comes after epoch 7's round 4"


def test_a_replica_that_knows_its_history_answers_one_that_does_not() -> None:
    """Seed 9927715 (5 nodes, two stopped for good): an empty stream's new replica waits for
    every live peer's word before it syncs at genesis, and a peer at rest never owed it an
    ack once its first was lost; an unsynced replica's acks now ask for one."""
    r = replica()
    assert not r.owes_ack
    r.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0), 0)
    assert not r.owes_ack, "a synced peer with nothing new is not answered"
    r.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, synced=False), 0)
    assert r.owes_ack
    fresh = StreamReplica("s", 1, (1, 2, 3), 2, LIMITS)
    fresh.take_ack(StreamAck("s", 2, 7, 0, 0, 0, genesis("s"), 0, synced=False), 0)
    assert not fresh.owes_ack, "two replicas that both lack the history do not ping-pong"


def test_a_retreat_is_counted_where_the_stable_timeline_gives_entries_up() -> None:
    timeline = Timeline("s", 100, 1 << 20)
    tx = Tx(BASE + 1, 0, 2, 7, "", 0, b"a")
    timeline.extend([tx], [fold_tx(genesis("s"), tx)])
    timeline.truncate_after(BASE + 1)
    assert timeline.retreats == 0, "nothing was given up"
    assert timeline.truncate_after(0) == [tx] and timeline.retreats == 1
    timeline.restart_at(BASE + 9, b"d" * 32, 4)
    assert timeline.retreats == 2
    r = replica()
    stable_one(r)
    assert r.rebuild.refold(0) == 1 and r.timeline.retreats == 1, "a refold is a retreat"


def test_a_retried_message_is_folded_once_wherever_it_was_coordinated() -> None:
    r = replica()
    r.take(Tx(BASE + 1, 0, 2, 7, "p", 9, b"x"))
    r.take(Tx(BASE + 2, 0, 3, 7, "p", 9, b"x"))  # the same message retried on node 3
    tag = content_tag(Item(9, b"x"))
    assert r.lookup_key("p", 9) in ((BASE + 2, tag), (BASE + 1, tag))
    promise_all(r, BASE + 5)
    stabilize(r)
    assert r.timeline.seqs == [BASE + 1]
    assert r.dedup.original_of(BASE + 2) == BASE + 1 and not r.dedup.conflicts(BASE + 2)
    assert r.lookup_key("p", 9) == (BASE + 1, tag)


def test_a_new_message_reusing_a_key_is_a_conflict_not_a_retry() -> None:
    r = replica()
    r.take(Tx(BASE + 1, 0, 2, 7, "p", 9, b"x"))
    r.take(Tx(BASE + 2, 0, 3, 7, "p", 9, b"y"))  # a restarted producer numbering from 1 again
    r.take(Tx(BASE + 3, BASE + 2, 3, 7, "p", 10, b"z", b"k", (("h", b"v"),)))
    promise_all(r, BASE + 5)
    stabilize(r)
    assert r.timeline.seqs == [BASE + 1, BASE + 3]  # the first copy is kept everywhere
    assert r.dedup.original_of(BASE + 2) == BASE + 1 and r.dedup.conflicts(BASE + 2)
    assert r.lookup_key("p", 9) == (BASE + 1, content_tag(Item(9, b"x")))
    same = content_tag(Item(10, b"z", b"k", (("h", b"v"),)))
    assert r.lookup_key("p", 10) == (BASE + 3, same)
    for other in (Item(10, b"z"), Item(10, b"z", b"k"), Item(10, b"z", b"k", (("h", b"w"),))):
        assert content_tag(other) != same  # the key and the headers count, not only the payload


def test_the_buffer_trims_only_verified_txs() -> None:
    r = replica(limits=StreamLimits(buffer_txs_max=8, dedup_window_ms=1, dedup_keys_max=10))
    prev = 0
    for i in range(1, 31):
        r.take(Tx(BASE + i, prev, 1, 7, "", 0, b"x"))
        prev = BASE + i
    promise_all(r, BASE + 100)
    stabilize(r)
    assert len(r.timeline.seqs) == 30  # nothing verified yet: nothing may go
    take_vote(r, 2, r.timeline.head_seq, r.timeline.head_digest, marked=True)
    r.timeline.trim(keep_from=BASE + 5)  # a publish still waits for the answer about BASE + 5
    assert r.timeline.seqs[0] == BASE + 5 and r.timeline.trimmed_seq == BASE + 4
    r.timeline.trim(keep_from=SEQ_MAX)
    assert len(r.timeline.seqs) <= 9
    assert r.timeline.trimmed_seq > BASE + 4


def verified_replica(count: int) -> StreamReplica:
    """A synced replica with ``count`` verified txs from origin 1."""
    r = replica()
    prev = 0
    for i in range(1, count + 1):
        r.take(Tx(BASE + i, prev, 1, 7, "p", i, bytes([i])))
        prev = BASE + i
    promise_all(r, BASE + 100)
    stabilize(r)
    take_vote(r, 2, r.timeline.head_seq, r.timeline.head_digest)
    assert r.verified_seq == BASE + count
    return r


def slice_of(r: StreamReplica, after: int) -> tuple[int, bytes, tuple[Tx, ...], tuple[bytes, ...]]:
    found = r.sync_slice(after, 1000)
    assert found is not None
    base_seq, base_digest, txs, digests, _keys, _count = found
    return base_seq, base_digest, txs, digests


def test_an_empty_replica_adopts_a_verified_slice_and_continues_the_chain() -> None:
    source = verified_replica(5)
    fresh = StreamReplica("s", 3, (1, 2, 3), 2, LIMITS)
    follow_all(fresh)
    outcome = fresh.adopt(0, 1, *slice_of(source, 0), ())
    assert isinstance(outcome, SliceAdopted) and outcome.txs == 5
    assert fresh.catchup.synced and fresh.verified_seq == BASE + 5
    assert fresh.timeline.head_digest == source.timeline.head_digest
    assert fresh.lookup_key("p", 3) == (BASE + 3, content_tag(Item(3, bytes([3]))))  # rebuilt
    # the origin's next tx chains although this replica never saw its chain
    assert fresh.take(Tx(BASE + 6, BASE + 5, 1, 7, "", 0, b"n"))


def test_a_slice_that_does_not_chain_is_refused() -> None:
    source = verified_replica(3)
    base_seq, base_digest, txs, digests = slice_of(source, 0)
    forged = (txs[0]._replace(payload=b"evil"), *txs[1:])
    fresh = replica()
    refused = fresh.adopt(0, 1, base_seq, base_digest, forged, digests, ())
    assert isinstance(refused, SliceRefused) and "do not chain" in refused.why
    assert fresh.timeline.head_seq == 0


def test_adopting_replaces_an_unverified_tail_and_keeps_later_txs() -> None:
    source = verified_replica(4)
    diverged = verified_replica(2)
    # a stable but unverified tx of origin 2 that the verified chain does not have
    diverged.take(Tx(BASE + 3, 0, 2, 7, "", 0, b"other"))
    diverged.lanes[2].claim(BASE + 3, BASE + 100)
    stabilize(diverged)
    assert diverged.timeline.head_seq == BASE + 3
    assert diverged.verified_seq == BASE + 2
    outcome = diverged.adopt(0, 1, *slice_of(source, BASE + 2), ())
    assert isinstance(outcome, SliceAdopted) and outcome.txs == 2
    assert diverged.timeline.seqs == source.timeline.seqs
    assert diverged.timeline.head_digest == source.timeline.head_digest


def test_a_snapshot_replaces_verified_history_only_once_two_peers_vouch_for_its_base() -> None:
    """Found as an attack: one SyncData from one peer, based past this replica's verified
    seq, used to replace every acknowledged tx it held."""
    source = verified_replica(5)
    behind = verified_replica(2)
    base_seq, base_digest, txs, digests = slice_of(source, BASE + 4)
    held = list(behind.timeline.seqs)
    assert behind.adopt(0, 1, base_seq, base_digest, txs, digests, ()) is None
    assert behind.timeline.seqs == held
    assert behind.vouchers.next_ask() == BASE + 4  # the next sync asks the others from there
    assert behind.adopt(0, 1, base_seq, base_digest, txs, digests, ()) is None
    assert behind.timeline.seqs == held  # the same peer twice is still one voice
    adopted = behind.adopt(0, 2, base_seq, base_digest, txs, digests, ())
    assert isinstance(adopted, SliceAdopted) and adopted.txs == 1
    assert behind.timeline.head_digest == source.timeline.head_digest


def test_a_forged_base_from_one_peer_never_replaces_anything() -> None:
    behind = verified_replica(2)
    forged = Tx(BASE + 9, 0, 1, 7, "p", 9, b"forged")
    base = bytes(32)
    assert behind.adopt(0, 2, BASE + 8, base, (forged,), (fold_tx(base, forged),), ()) is None
    assert behind.verified_seq == BASE + 2
    assert behind.timeline.head_seq == BASE + 2


def test_a_slice_that_leaves_out_verified_txs_is_refused() -> None:
    """Found by the compromised-node test: a slice from genesis whose txs all lie past this
    replica's verified seq was appended after it, though it chains from genesis."""
    held = verified_replica(3)
    held.timeline.readable_seq = BASE + 3  # acknowledged
    forged = Tx(BASE + 9, 0, 1, 7, "p", 9, b"forged")
    base = genesis("s")
    outcome = held.adopt(0, 2, 0, base, (forged,), (fold_tx(base, forged),), ())
    assert isinstance(outcome, SliceRefused) and held.timeline.head_seq == BASE + 3


def test_verified_txs_never_acknowledged_are_given_up_once_two_peers_vouch() -> None:
    """Found by the simulator: after a power loss of every node, a replica whose mark covered
    a tx that no quorum marked (so never acknowledged) kept it as verified, while the others
    refolded it away; every slice they sent left it out, and it stayed diverged for good."""
    source = verified_replica(2)
    lone = verified_replica(2)
    lone.take(Tx(BASE + 3, BASE + 2, 1, 7, "p", 3, b"lost elsewhere"))
    lone.lanes[1].claim(BASE + 3, BASE + 100)
    stabilize(lone)
    take_vote(lone, 2, BASE + 3, lone.timeline.head_digest)
    assert lone.verified_seq == BASE + 3
    lone.timeline.readable_seq = BASE + 2  # only this replica's mark reached BASE + 3
    other = Tx(BASE + 4, BASE + 2, 1, 7, "p", 4, b"what the quorum kept")
    source.take(other)
    promise_all(source, BASE + 100)
    stabilize(source)
    take_vote(source, 2, BASE + 4, source.timeline.head_digest)
    base_seq, base_digest, txs, digests = slice_of(source, BASE + 2)
    assert lone.adopt(0, 1, base_seq, base_digest, txs, digests, ()) is None  # one voice
    assert lone.verified_seq == BASE + 3
    adopted = lone.adopt(0, 2, base_seq, base_digest, txs, digests, ())
    assert isinstance(adopted, SliceAdopted) and adopted.txs == 1
    assert lone.timeline.seqs == source.timeline.seqs and lone.verified_seq == BASE + 4
    assert lone.timeline.head_digest == source.timeline.head_digest
    lone.timeline.readable_seq = BASE + 4
    again = verified_replica(2)
    again.timeline.readable_seq = again.verified_seq
    forged = Tx(BASE + 9, 0, 1, 7, "p", 9, b"forged")  # below what readers saw: never
    verdict = again.adopt(0, 2, 0, genesis("s"), (forged,), (fold_tx(genesis("s"), forged),), ())
    assert isinstance(verdict, SliceRefused) and again.verified_seq == BASE + 2


def test_a_slice_that_agrees_but_ends_early_moves_the_next_ask_on() -> None:
    """Found by a campaign (seed 1120238): a diverged replica asked from its oldest entry; the
    peers answered from their logs only up to their memory rings, all of it agreeing with
    what it held, and it asked the same again for good."""
    held = verified_replica(5)
    base_seq, base_digest, txs, digests = slice_of(held, 0)
    assert held.adopt(0, 1, base_seq, base_digest, txs[:2], digests[:2], ()) is None
    assert held.vouchers.next_ask() == txs[1].seq
    assert held.vouchers.next_ask() is None  # once


def test_an_empty_replica_takes_a_slice_from_genesis_from_one_peer() -> None:
    """Nothing it holds is replaced, and with one node down a single peer is all it has."""
    source = verified_replica(3)
    fresh = replica()
    adopted = fresh.adopt(0, 1, *slice_of(source, 0), ())
    assert isinstance(adopted, SliceAdopted) and adopted.txs == 3


def test_the_dedup_window_moves_with_each_tx_not_with_a_loop_turn() -> None:
    """Replicas cut the same timeline into different batches; what the index holds at a tx
    must not depend on that, or one replica skips a copy another keeps (found by a review:
    the window used to move once per batch, from the batch's last seq)."""
    limits = StreamLimits(buffer_txs_max=100, dedup_window_ms=50, dedup_keys_max=1000)
    t0 = 1_800_000_000_000
    first = Tx(make_seq(t0, 2), 0, 2, 7, "p", 1, b"x")
    unkeyed = Tx(make_seq(t0 + 100, 3), 0, 3, 7, "", 0, b"y")
    again = Tx(make_seq(t0 + 101, 2), first.seq, 2, 7, "p", 1, b"x")  # past the window: kept
    heads = []
    for batches in ([[first], [unkeyed], [again]], [[first], [unkeyed, again]]):
        r = replica(limits=limits)
        for batch in batches:
            for tx in batch:
                r.take(tx)
            promise_all(r, batch[-1].seq)
            stabilize(r)
        assert r.timeline.seqs == [first.seq, unkeyed.seq, again.seq]
        heads.append(r.timeline.head_digest)
    assert heads[0] == heads[1]


def test_two_copies_of_a_key_in_one_request_follow_the_first() -> None:
    """The first copy gets a seq; a second with the same content is its retry, one with other
    content a conflict naming it; a later retry of the first is still its retry (a review
    found it refused once both copies got seqs)."""
    r = replica()
    publishes = Publishes(5000)
    items = (Item(5, b"A"), Item(5, b"A"), Item(5, b"B"), Item(6, b"C"))
    req = PublishRequested(b"c", 1, "s", "p", items)
    pending = publishes.start(0, req)
    fresh, copies = attach_retries(r, req, pending)
    assert [item.payload for item in fresh] == [b"A", b"C"]
    origin = Origin(1, 7, BASE)
    txs = origin.originate("s", Now(1_800_000_000_000, 0), "p", fresh)
    r.take_chain(1, txs)
    pending.originated(txs, copies)
    assert pending.seqs == [txs[0].seq, txs[0].seq, txs[0].seq, txs[1].seq]
    third = pending.results[2]
    assert isinstance(third, Rejected) and third.code == errors.CONFLICT
    assert pending.results[:2] == [None, None]
    retry = PublishRequested(b"c", 2, "s", "p", (Item(5, b"A"),))
    again = publishes.start(0, retry)
    assert attach_retries(r, retry, again) == ([], [])
    assert again.seqs == [txs[0].seq] and again.results == [None]


def test_a_sync_slice_the_replica_already_holds_keeps_the_paging_going() -> None:
    """A replica that holds a peer's verified txs but verified fewer marks them verified page
    by page, asking for the next page at once (a review found it stopped after one)."""
    source, behind = replica(), replica()
    chain = []
    for i in range(1, 9):
        chain.append(Tx(BASE + i, BASE + i - 1 if i > 1 else 0, 2, 7, "", 0, bytes([i])))
    for r in (source, behind):
        for tx in chain:
            r.take(tx)
        promise_all(r, BASE + 20)
        stabilize(r)
    source.timeline.verify_upto(BASE + 8)
    behind.timeline.verify_upto(BASE + 2)
    found = source.sync_slice(behind.verified_seq, 3)
    assert found is not None
    data = SyncData("s", 1, 2, *found)
    outcome, ask = behind.take_sync(data, 0, 3)
    assert outcome == HeldVerified(3, BASE + 5) and behind.verified_seq == BASE + 5
    assert ask is not None and ask.after_seq == BASE + 5
    assert behind.timeline.head_seq == BASE + 8  # its own tail stayed


def test_a_repair_speaks_only_for_the_asked_epoch() -> None:
    """After a power loss an origin's restored, never verified tail of an older epoch can lie
    above where its new epoch starts (a campaign seed, perturbed, found it). An answer for the
    new epoch carried that tx, the asker's lane refused it, so the answer never counted as
    whole and a cut there never settled. The answer now holds the asked epoch only, and an
    asker judges an answer by the txs of the epoch it asked about."""
    r = replica()
    old = Tx(BASE + 3, 0, 2, 6, "", 0, b"old")  # epoch 6, restored above epoch 7's start
    r.timeline.extend([old], [fold_tx(genesis("s"), old)])
    new = Tx(BASE + 5, 0, 2, 7, "", 0, b"new")
    r.take(new)
    assert r.txs_of(2, 7, 0, BASE + 9, 100) == ([new], BASE + 5)

    asker = replica()
    asker.lanes[2] = asker.lanes[2].apply(LaneInput.SUSPECTED)
    asker.lanes[2].cut_at = BASE + 5
    answer = RepairData("s", 3, 2, 7, (old, new), after_seq=0, complete_upto=BASE + 5)
    assert asker.take_repair(answer) == BASE + 5
    assert asker.lanes[2].contig == BASE + 5


def test_a_retry_and_a_reuse_of_a_key_in_flight_are_answered_with_the_first_copy() -> None:
    """A retry of a message still in flight at its coordinator attaches to it and is answered
    with its seq and digest once a quorum verified it; a new message reusing the key is a
    conflict at once (an index of stable keys only gave each a seq of its own, and their
    answers waited until the verified seq passed those: on a quiet stream, until they timed
    out)."""
    r = replica()
    publishes = Publishes(5000)
    origin = Origin(1, 7, BASE)
    now = Now(1_800_000_000_000, 0)
    first = PublishRequested(b"c", 1, "s", "p", (Item(5, b"A"),))
    pending = publishes.start(0, first)
    fresh, copies = attach_retries(r, first, pending)
    txs = origin.originate("s", now, "p", fresh)
    r.take_chain(1, txs)
    pending.originated(txs, copies)
    publishes.wait("s", pending)
    for req_id, payload in ((2, b"A"), (3, b"B")):  # both arrive while the first is in flight
        req = PublishRequested(b"c", req_id, "s", "p", (Item(5, payload),))
        again = publishes.start(0, req)
        assert attach_retries(r, req, again) == ([], [])
        publishes.wait("s", again)
    promise_all(r, txs[-1].seq)
    stabilize(r)
    take_vote(r, 2, r.timeline.head_seq, r.timeline.head_digest)
    r.timeline.readable_seq = r.timeline.verified_seq
    replies = publishes.resolve(r)
    answers = {reply.req_id: reply.body.results[0] for reply in replies}  # type: ignore[union-attr]
    digest = fold(genesis("s"), txs[0].seq, 1, "p", 5, b"A")
    assert answers[1] == answers[2] == (txs[0].seq, digest)
    assert isinstance(answers[3], Rejected) and answers[3].code == errors.CONFLICT
