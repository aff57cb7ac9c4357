"""NodeCore decisions that need no network: redirects, refusals, reads."""

from relay import errors
from relay.core.digest import genesis
from relay.core.events import (
    Broadcast,
    Effect,
    FetchRequested,
    MeshReceived,
    Notice,
    PeerFault,
    PublishReply,
    PublishRequested,
    ReadReply,
    Redirect,
    Rejected,
    Reserved,
    ShutdownRequested,
    Tick,
)
from relay.core.flake import COUNTER_MAX, NODE_ID_MAX, make_seq
from relay.core.messages import Heartbeat, Item, Replicate, StreamAck
from relay.core.node import NodeCore
from relay.core.params import CoreConfig, CoreParams
from relay.core.publish_intake import HELD_BYTES_MAX, HELD_MAX, HOLD_MS
from relay.core.reads import PARKED_FETCHES_MAX
from relay.core.routing import Subscription
from relay.core.timer import Now

NOW = 1_795_000_000_000
SUBS = (
    Subscription(1, ("orders.*",)),
    Subscription(2, ("orders.*", "payments.*")),
    Subscription(3, ("orders.*", "payments.*")),
    Subscription(4, ("payments.*",)),
)


def at(elapsed_ms: int, wall_step_ms: int = 0) -> Now:
    """``elapsed_ms`` after the test began, on a wall clock stepped by ``wall_step_ms``."""
    return Now(NOW + elapsed_ms + wall_step_ms, elapsed_ms)


def core(node_id: int = 1, **params: int) -> NodeCore:
    return NodeCore(CoreConfig(node_id, SUBS, CoreParams(**params)), epoch=NOW)


def publish(node: NodeCore, stream: str, payload: bytes = b"x") -> object:
    effects = node.handle(at(0), [PublishRequested(b"c", 1, stream, "", (Item(1, payload),))])
    replies = [e for e in effects if isinstance(e, PublishReply)]
    assert len(replies) == 1
    return replies[0].body


def test_a_stream_this_node_does_not_replicate_is_redirected() -> None:
    body = publish(core(1), "payments.eu")
    assert isinstance(body, Redirect)
    assert set(body.nodes) == {2, 3, 4}


def test_a_stream_no_node_replicates_is_refused_clearly() -> None:
    body = publish(core(1), "misc")
    assert isinstance(body, Rejected) and body.code == errors.NO_REPLICAS
    assert "misc" in body.message


def test_bad_stream_names_and_oversized_payloads_are_bad_requests() -> None:
    for stream in ("", "orders *", "a" * 300):
        body = publish(core(1), stream)
        assert isinstance(body, Rejected) and body.code == errors.BAD_REQUEST
    body = publish(core(1, payload_bytes_max=10), "orders.x", b"y" * 11)
    assert isinstance(body, Rejected) and body.code == errors.BAD_REQUEST


def test_without_a_quorum_up_a_publish_is_unavailable_and_names_other_nodes() -> None:
    node = core(1)
    node.handle(at(0), [Tick()])
    body = publish(node, "orders.x")
    assert isinstance(body, Rejected) and body.code == errors.UNAVAILABLE
    assert set(body.try_nodes) == {2, 3}


def test_reads_redirect_too() -> None:
    node = core(4)
    assert isinstance(node.read("orders.x", 0, 10), Redirect)


def test_a_node_that_hears_no_quorum_is_fenced_and_serves_nothing() -> None:
    node = core(4)
    node.handle(at(0), [Tick()])
    assert node.state_name() == "fenced"
    result = node.read("payments.x", 0, 10)
    assert isinstance(result, Rejected) and result.code == errors.UNAVAILABLE
    assert "fenced" in result.message
    body = publish(node, "payments.x")
    assert isinstance(body, Rejected) and "fenced" in body.message


def heartbeat(sender: int, follows: NodeCore | None = None) -> MeshReceived:
    """A peer's heartbeat; an honest peer's promise follows the ones ``follows`` sent it."""
    floor = follows.origin.clock.floor if follows else 0
    return MeshReceived(Heartbeat(sender, NOW + sender, floor, (), ()))


def heard(stream: str, *senders: int) -> list[MeshReceived]:
    """Peers' first acks of ``stream``: what their logs restored (nothing). A replica folds
    and coordinates there once a quorum of its replicas has been heard."""
    return [
        MeshReceived(StreamAck(stream, n, NOW + n, 0, 0, 0, genesis(stream), 0)) for n in senders
    ]


def test_time_spent_fenced_does_not_count_as_a_peers_silence() -> None:
    """A node that was paused fences itself; when it hears some peers again it must not cut
    the ones whose heartbeats have not arrived yet."""
    node = core(2)
    node.handle(at(0), [heartbeat(1), heartbeat(3), heartbeat(4), Tick()])
    assert node.state_name() == "serving"
    node.handle(at(1500), [Tick()])  # paused past suspect_after_ms
    assert node.state_name() == "fenced"
    effects = node.handle(at(1520), [heartbeat(1, node), heartbeat(3, node), Tick()])
    assert node.state_name() == "serving"
    downs = [e for e in effects if isinstance(e, Notice) and e.kind == "peer_down"]
    assert downs == [] and node.peers.by_id[4].up
    effects = node.handle(at(2620), [heartbeat(1, node), heartbeat(3, node), Tick()])  # 4 silent
    assert [e.text for e in effects if isinstance(e, Notice) and e.kind == "peer_down"] == [
        "node 4 was silent for 1100 ms; cutting its epoch"
    ]


def test_wall_clock_steps_neither_fence_nor_cut() -> None:
    """Timers run on elapsed time: a step of the wall clock either way changes nothing."""
    for step_ms in (-5000, 5000, -(10**6)):
        node = core(2)
        for t in range(0, 3000, 50):
            step = step_ms if t >= 1000 else 0
            beats = [heartbeat(1, node), heartbeat(3, node), heartbeat(4, node)]
            effects = node.handle(at(t, step), [*beats, Tick()])
            assert node.state_name() == "serving" or t == 0
            assert not [e for e in effects if isinstance(e, Notice) and e.kind == "peer_down"]
        kinds = {e.kind for e in effects if isinstance(e, Notice)}
        assert "peer_down" not in kinds


def test_a_wall_clock_step_back_does_not_delay_fencing() -> None:
    node = core(2, fence_after_ms=800)
    node.handle(at(0), [heartbeat(1), heartbeat(3), heartbeat(4), Tick()])
    node.handle(at(100, -5000), [heartbeat(1), heartbeat(3), heartbeat(4), Tick()])
    fenced_at = next(
        t
        for t in range(100, 6000, 10)
        if node.handle(at(t, -5000), [Tick()]) is not None and node.state_name() == "fenced"
    )
    assert fenced_at <= 100 + 800 + 10


def test_heartbeats_keep_their_pace_when_the_wall_clock_steps_back() -> None:
    node = core(2, heartbeat_ms=100)
    sent = 0
    for t in range(0, 2000, 10):
        effects = node.handle(at(t, -2000 if t >= 500 else 0), [Tick()])
        sent += sum(
            1 for e in effects if isinstance(e, Broadcast) and isinstance(e.message, Heartbeat)
        )
    assert 19 <= sent <= 21


def serving(node_id: int = 2) -> NodeCore:
    node = core(node_id)
    node.handle(at(0), [heartbeat(1), heartbeat(3), heartbeat(4), Tick()])
    assert node.state_name() == "serving"
    return node


def fetch(req_id: int, wait_ms: int = 1000) -> FetchRequested:
    return FetchRequested(b"c", req_id, "orders.x", 0, 10, wait_ms)


def test_a_fetch_with_nothing_to_read_is_parked_until_its_wait_runs_out() -> None:
    node = serving()
    assert not [e for e in node.handle(at(10), [fetch(1)]) if isinstance(e, ReadReply)]
    assert node.parked.count == 1
    alive = [heartbeat(1), heartbeat(3), heartbeat(4), Tick()]
    assert not [e for e in node.handle(at(500), alive) if isinstance(e, ReadReply)]
    assert not [e for e in node.handle(at(1000), alive) if isinstance(e, ReadReply)]
    replies = [e for e in node.handle(at(1011), [Tick()]) if isinstance(e, ReadReply)]
    assert [r.req_id for r in replies] == [1] and node.parked.count == 0


def test_parked_fetches_are_bounded_and_answered_when_the_node_stops_serving() -> None:
    node = serving()
    node.handle(at(10), [fetch(i) for i in range(PARKED_FETCHES_MAX + 5)])
    assert node.parked.count == PARKED_FETCHES_MAX  # the rest were answered at once
    effects = node.handle(at(20), [ShutdownRequested()])
    answers = [e for e in effects if isinstance(e, ReadReply)]
    assert len(answers) == PARKED_FETCHES_MAX and node.parked.count == 0
    assert all(isinstance(a.body, Rejected) and a.body.code == "unavailable" for a in answers)


def faults_of(effects: list[Effect]) -> list[tuple[int, str]]:
    return [(e.peer, e.text) for e in effects if isinstance(e, PeerFault)]


def test_claims_far_ahead_of_this_nodes_clock_are_peer_faults_and_change_nothing() -> None:
    """Found as attacks: a heartbeat claiming epoch 2^62 made every later message of that
    peer stale; one naming a far epoch of this node made it restart there; a promise
    years ahead would drag every seq the cluster stamps."""
    node = serving()
    floor = node.origin.clock.floor
    forged = [
        Heartbeat(3, 2**62, 0, (), ()),
        Heartbeat(3, NOW + 3, make_seq(NOW + 10**9, 3), (), ()),
        Heartbeat(1, NOW + 1, 0, (), (), epochs=((2, 2**62),)),
    ]
    effects = node.handle(at(10), [MeshReceived(m) for m in forged])
    assert [peer for peer, _ in faults_of(effects)] == [3, 3, 1]
    assert "ahead of this node's clock" in faults_of(effects)[0][1]
    assert node.peers.by_id[3].epoch == NOW + 3 and node.epoch == NOW
    assert node.origin.clock.floor <= max(floor, make_seq(NOW + 10, NODE_ID_MAX, COUNTER_MAX))
    near = Heartbeat(3, NOW + 30_000, 0, (), ())  # a restart on a clock 30 s ahead: believed
    assert not faults_of(node.handle(at(20), [MeshReceived(near)]))
    assert node.peers.by_id[3].epoch == NOW + 30_000


def test_a_step_back_of_this_nodes_clock_does_not_make_honest_peers_look_ahead() -> None:
    node = serving()
    beats = [MeshReceived(Heartbeat(n, NOW + 5000 + n, 0, (), ())) for n in (1, 3, 4)]
    assert not faults_of(node.handle(at(100, -(10**6)), beats))  # restarted peers, 16 min on


def test_the_guard_holds_for_a_node_whose_wall_and_elapsed_clocks_start_equal() -> None:
    """Found by a read of the core: the wall clock at elapsed 0 of a node whose two clocks
    read the same (every simulated node without skew) is 0, which the guard took for unset,
    so the first step back became its baseline and honest peers looked far ahead."""
    node = core(1)
    node.handle(Now(NOW, NOW), [Tick()])
    beats = [MeshReceived(Heartbeat(n, NOW + 5000 + n, 0, (), ())) for n in (3, 4)]
    assert not faults_of(node.handle(Now(NOW - 10**6 + 100, NOW + 100), beats))


def test_a_peer_whose_promise_never_moves_is_cut_and_the_others_are_not() -> None:
    """Found as an attack: a peer that heartbeats but keeps its promise stalls every stream's
    folding, and so every publish, for as long as it likes."""
    node = serving()
    effects: list[Effect] = []
    for t in range(50, 3000, 50):
        frozen = MeshReceived(Heartbeat(3, NOW + 3, 0, (), ()))
        effects += node.handle(at(t), [heartbeat(1, node), frozen, heartbeat(4, node), Tick()])
    downs = [e.text for e in effects if isinstance(e, Notice) and e.kind == "peer_down"]
    assert downs == ["node 3 did not move its promise; cutting its epoch"]
    assert [peer for peer, _ in faults_of(effects)] == [3]


def test_a_peer_this_node_reads_late_is_not_cut_for_a_late_promise() -> None:
    """After a restart with thousands of streams, a node reading a backlog of acks hears its
    peers' heartbeats late; the shell says so, and nobody is cut for it."""
    node = serving()
    effects: list[Effect] = []
    for t in range(50, 3000, 50):
        late = MeshReceived(Heartbeat(3, NOW + 3, 0, (), ()))
        tick = Tick(frozenset({3}))
        effects += node.handle(at(t), [heartbeat(1, node), late, heartbeat(4, node), tick])
    assert not [e for e in effects if isinstance(e, Notice) and e.kind == "peer_down"]


def test_a_peer_that_admits_nobody_cannot_stall_publishes() -> None:
    node = core(1)
    accepts = ((1, NOW), (2, NOW + 2), (3, NOW + 3))
    beats = [
        MeshReceived(Heartbeat(2, NOW + 2, 0, (), accepts)),
        MeshReceived(Heartbeat(3, NOW + 3, 0, (), ())),  # admits no one
    ]
    node.handle(at(0), [*beats, *heard("orders.x", 2, 3), Tick()])
    node.handle(at(10), [Tick()])
    effects = node.handle(at(20), [PublishRequested(b"c", 1, "orders.x", "", (Item(1, b"x"),))])
    assert not [e for e in effects if isinstance(e, PublishReply)]  # waiting for votes, not refused
    assert any(isinstance(e, Broadcast) and isinstance(e.message, Replicate) for e in effects)


def admitted(reserved: int) -> NodeCore:
    """Node 1, serving and admitted by nodes 2 and 3, its seqs reserved up to ``reserved``."""
    node = NodeCore(CoreConfig(1, SUBS, CoreParams()), epoch=NOW, reserved=reserved)
    node.handle(at(0), [*admitting(node), *heard("orders.x", 2, 3), Tick()])
    assert node.state_name() == "serving"
    return node


def admitting(node: NodeCore) -> list[MeshReceived]:
    """Heartbeats of honest peers 2, 3 and 4 that admitted ``node``."""
    accepts = ((1, NOW), (2, NOW + 2), (3, NOW + 3))
    floor = node.origin.clock.floor
    return [MeshReceived(Heartbeat(n, NOW + n, floor, (), accepts)) for n in (2, 3, 4)]


def sent_txs(effects: list[Effect]) -> list[tuple[int, int]]:
    """(msg id, seq) of every tx this node broadcast, in order."""
    return [
        (tx.msg_id, tx.seq)
        for e in effects
        if isinstance(e, Broadcast) and isinstance(e.message, Replicate)
        for tx in e.message.txs
    ]


def test_publishes_without_room_in_the_seq_reservation_wait_for_it_in_order() -> None:
    """Found in CI: the first publish was refused while the reservation was renewed, the
    producer's next one got a seq, and the first, sent again, landed after it."""
    node = admitted(reserved=make_seq(NOW + 5, NODE_ID_MAX, COUNTER_MAX))
    first = PublishRequested(b"c", 1, "orders.x", "p", (Item(1, b"one"),))
    effects = node.handle(at(20), [first])
    assert not [e for e in effects if isinstance(e, PublishReply)]  # held, not refused
    assert node.origin.reserving and sent_txs(effects) == []  # a renewal is on its way
    second = PublishRequested(b"c", 2, "orders.x", "p", (Item(2, b"two"),))
    renewed = Reserved(make_seq(NOW + 2000, NODE_ID_MAX, COUNTER_MAX))
    effects = node.handle(at(21), [renewed, second])  # room again, but the first goes first
    sent = sent_txs(effects)
    assert [msg_id for msg_id, _ in sent] == [1, 2] and sent[0][1] < sent[1][1]


def test_a_held_publish_is_refused_after_a_while_and_the_number_held_is_bounded() -> None:
    node = admitted(reserved=make_seq(NOW + 5, NODE_ID_MAX, COUNTER_MAX))
    requests = [
        PublishRequested(b"c", i, "orders.x", "p", (Item(i, b"x"),)) for i in range(1, HELD_MAX + 2)
    ]
    effects = node.handle(at(20), requests)
    refused = [e.body for e in effects if isinstance(e, PublishReply)]
    assert len(refused) == 1 and isinstance(refused[0], Rejected)
    assert refused[0].code == errors.UNAVAILABLE and str(HELD_MAX) in refused[0].message
    effects = []
    for t in range(100, HOLD_MS + 100, 100):  # the peers are there; the disk never answers
        effects += node.handle(at(20 + t), [*admitting(node), Tick()])
    bodies = [e.body for e in effects if isinstance(e, PublishReply)]
    assert len(bodies) == HELD_MAX
    assert all(isinstance(b, Rejected) and b.code == errors.UNAVAILABLE for b in bodies)
    assert "reservation" in bodies[0].message and set(bodies[0].try_nodes) == {2, 3}
    assert sent_txs(effects) == []


def test_held_publishes_are_bounded_in_bytes_too() -> None:
    node = admitted(reserved=make_seq(NOW + 5, NODE_ID_MAX, COUNTER_MAX))
    payload = b"x" * (1 << 20)
    per_request = HELD_BYTES_MAX // 4 >> 20  # items of 1 MiB: four requests fill the bound
    requests = [
        PublishRequested(
            b"c", i, "orders.x", "p", tuple(Item(i * 100 + j, payload) for j in range(per_request))
        )
        for i in range(1, 6)
    ]
    effects = node.handle(at(20), requests)
    refused = [e.body for e in effects if isinstance(e, PublishReply)]
    assert len(refused) == 1 and isinstance(refused[0], Rejected)
    assert refused[0].code == errors.UNAVAILABLE and "bytes" in refused[0].message
    held = node.publish_intake
    assert held.held_count == 4 and held.held_bytes == HELD_BYTES_MAX


def test_held_publishes_count_keys_and_headers_as_bytes() -> None:
    """Found on review: only payloads were counted, so requests of empty payloads under large
    keys and headers could be held without a byte bound."""
    node = admitted(reserved=make_seq(NOW + 5, NODE_ID_MAX, COUNTER_MAX))
    key, value = b"k" * (512 << 10), b"v" * ((512 << 10) - 1)  # with the name "h": 1 MiB
    per_request = HELD_BYTES_MAX // 4 >> 20  # items of 1 MiB (a key and a header): four fill it
    requests = [
        PublishRequested(
            b"c",
            i,
            "orders.x",
            "p",
            tuple(Item(i * 100 + j, b"", key, (("h", value),)) for j in range(per_request)),
        )
        for i in range(1, 6)
    ]
    effects = node.handle(at(20), requests)
    refused = [e.body for e in effects if isinstance(e, PublishReply)]
    assert len(refused) == 1 and isinstance(refused[0], Rejected)
    held = node.publish_intake
    assert held.held_count == 4 and held.held_bytes == HELD_BYTES_MAX


def test_a_publish_before_the_replicas_admitted_this_node_waits_for_them() -> None:
    """Found in CI too: just after a start, a peer is up but its heartbeat that admits this
    node's epoch is a moment away; the first publish was refused and the next one was not."""
    node = core(1)
    node.handle(at(0), [heartbeat(2), heartbeat(3), heartbeat(4), *heard("orders.x", 2), Tick()])
    assert node.state_name() == "serving"
    effects = node.handle(at(10), [PublishRequested(b"c", 1, "orders.x", "p", (Item(1, b"one"),))])
    assert not [e for e in effects if isinstance(e, PublishReply)] and sent_txs(effects) == []
    effects = node.handle(at(20), [PublishRequested(b"c", 2, "orders.x", "p", (Item(2, b"two"),))])
    assert sent_txs(effects) == []
    effects = node.handle(at(60), admitting(node))
    assert [msg_id for msg_id, _ in sent_txs(effects)] == [1, 2]


def test_a_peers_new_epoch_takes_back_the_votes_of_its_old_one() -> None:
    """A vote speaks for the incarnation that cast it (one on a replaced disk no longer holds
    what it voted for): hearing a peer's new epoch, a node counts none of its old votes."""
    node = core(1)
    stream = "orders.x"
    node.handle(at(0), heard(stream, 2))
    votes = node.streams[stream].votes
    votes.matched[2] = 5  # as a vote of epoch NOW + 2 would have matched
    node.handle(at(10), [MeshReceived(Heartbeat(2, NOW + 2, 0, (), ()))])
    assert votes.matched[2] == 5, "the same epoch: its votes stand"
    node.handle(at(20), [MeshReceived(Heartbeat(2, NOW + 50, 0, (), ()))])
    assert votes.matched[2] == 0 and 2 not in votes.verified
