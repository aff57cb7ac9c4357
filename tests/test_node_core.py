"""NodeCore decisions that need no network: redirects, refusals, reads."""

from relay import errors
from relay.core.events import (
    MeshReceived,
    Notice,
    PublishRequested,
    Redirect,
    Rejected,
    Reply,
    Tick,
)
from relay.core.messages import Heartbeat
from relay.core.node import NodeCore
from relay.core.params import CoreConfig, CoreParams
from relay.core.routing import Subscription

NOW = 1_795_000_000_000
SUBS = (
    Subscription(1, ("orders.*",)),
    Subscription(2, ("orders.*", "payments.*")),
    Subscription(3, ("orders.*", "payments.*")),
    Subscription(4, ("payments.*",)),
)


def core(node_id: int = 1, **params: int) -> NodeCore:
    return NodeCore(CoreConfig(node_id, SUBS, CoreParams(**params)), epoch=NOW)


def publish(node: NodeCore, stream: str, payload: bytes = b"x") -> object:
    effects = node.handle(NOW, [PublishRequested(b"c", 1, stream, "", ((1, payload),))])
    replies = [e for e in effects if isinstance(e, Reply)]
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
    node.handle(NOW, [Tick()])
    body = publish(node, "orders.x")
    assert isinstance(body, Rejected) and body.code == errors.UNAVAILABLE
    assert set(body.try_nodes) == {2, 3}


def test_reads_redirect_too() -> None:
    node = core(4)
    assert isinstance(node.read("orders.x", 0, 10, False), Redirect)


def test_a_node_that_hears_no_quorum_is_fenced_and_serves_nothing() -> None:
    node = core(4)
    node.handle(NOW, [Tick()])
    assert node.state_name() == "fenced"
    result = node.read("payments.x", 0, 10, False)
    assert isinstance(result, Rejected) and result.code == errors.UNAVAILABLE
    assert "fenced" in result.message
    body = publish(node, "payments.x")
    assert isinstance(body, Rejected) and "fenced" in body.message


def heartbeat(sender: int) -> MeshReceived:
    return MeshReceived(Heartbeat(sender, NOW + sender, 0, (), ()))


def test_time_spent_fenced_does_not_count_as_a_peers_silence() -> None:
    """A clock that jumps forward fences the node; when it hears some peers again it must not
    cut the ones whose heartbeats have not arrived yet."""
    node = core(2)
    node.handle(NOW, [heartbeat(1), heartbeat(3), heartbeat(4), Tick()])
    assert node.state_name() == "serving"
    jumped = NOW + 1500  # the node's clock steps forward past suspect_after_ms
    node.handle(jumped, [Tick()])
    assert node.state_name() == "fenced"
    effects = node.handle(jumped + 20, [heartbeat(1), heartbeat(3), Tick()])
    assert node.state_name() == "serving"
    downs = [e for e in effects if isinstance(e, Notice) and e.kind == "peer_down"]
    assert downs == [] and node.peers[4].up
    effects = node.handle(jumped + 1100, [heartbeat(1), heartbeat(3), Tick()])  # 4 stays silent
    assert [e.text for e in effects if isinstance(e, Notice) and e.kind == "peer_down"] == [
        "node 4 was silent for 1080 ms; cutting its epoch"
    ]
