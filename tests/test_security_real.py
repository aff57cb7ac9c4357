"""The attacks of issue 12 on a real cluster, each of which used to work: an eavesdropper on
the mesh, a process on a stopped node's mesh port forging replication, sync and an epoch of
2^62, a node (holding its own key) speaking for another, an unauthenticated admin, and a
client outside the allowlist. With CURVE on (the default) none of them works."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
import zmq
from click.testing import CliRunner
from mesh_frames import encode
from prometheus_client.parser import text_string_to_metric_families
from test_faults_real import FAST
from waits import until
from zmq.utils.monitor import recv_monitor_message

from relay import Consumer, Producer
from relay.auth import keys
from relay.auth.keys import KeyPair
from relay.auth.sockets import serve
from relay.cli import main
from relay.core.digest import genesis
from relay.core.flake import make_seq
from relay.core.messages import Heartbeat, Replicate, SyncData, Tx, fold_tx
from relay.errors import RelayError
from relay.runtime.admin import admin_call
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(fast_admin_cluster3: LocalCluster) -> LocalCluster:
    return fast_admin_cluster3


def metric(cluster: LocalCluster, node_id: int, name: str, **labels: str) -> float:
    """A counter's value on a node's metrics endpoint (0 if it has no such sample)."""
    port = cluster.config.node(node_id).metrics_port
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def publish_real(cluster: LocalCluster, count: int) -> list[bytes]:
    payloads = [f"real-{i}".encode() for i in range(count)]
    with Producer(config=cluster.config_path, node=1) as producer:
        for p in payloads:
            producer.publish("orders", p)
    return payloads


def read_all(cluster: LocalCluster, node_id: int, count: int) -> list[bytes]:
    with Consumer("orders", config=cluster.config_path, node=node_id) as consumer:
        return [tx.payload for tx in consumer.take(count + 100, timeout_s=3)]


def forgeries(claimed: int, victim_seq: int) -> list[tuple[bytes, bytes]]:
    """Well-formed frames from node ``claimed``: txs below the victims' history, a sync slice
    replacing it from genesis, and a heartbeat with an epoch of 2^62."""
    fake = [Tx(victim_seq - 1000 + i, 0, claimed, 7, "evil", i + 1, b"forged") for i in range(5)]
    digests, digest = [], genesis("orders")
    for tx in fake:
        digest = fold_tx(digest, tx)
        digests.append(digest)
    return [
        encode(Heartbeat(claimed, 1 << 62, 1 << 62, (("orders", 1 << 62),), (), False)),
        encode(Replicate("orders", claimed, 7, victim_seq, tuple(fake))),
        encode(
            SyncData("orders", claimed, 1, 0, genesis("orders"), tuple(fake), tuple(digests), ())
        ),
        encode(
            SyncData("orders", claimed, 2, 0, genesis("orders"), tuple(fake), tuple(digests), ())
        ),
    ]


def impersonate(
    cluster: LocalCluster,
    node_id: int,
    pair: KeyPair | None,
    frames: list[tuple[bytes, bytes]],
    seconds: float = 2,
) -> int:
    """Bind node ``node_id``'s mesh port (as a CURVE server with ``pair``, or plain) and send
    ``frames`` for ``seconds``; how many peers completed a handshake."""
    ctx = zmq.Context.instance()
    fake = ctx.socket(zmq.PUB)
    fake.setsockopt(zmq.LINGER, 0)
    if pair is not None:
        serve(fake, pair, "mesh")
    monitor = fake.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_ACCEPTED)
    handshakes = accepted = 0
    try:
        fake.bind(cluster.config.node(node_id).mesh_address)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and accepted < 2:  # both peers reconnect to it
            if monitor.poll(100):
                event = recv_monitor_message(monitor)["event"]
                accepted += event == zmq.EVENT_ACCEPTED
                handshakes += event == zmq.EVENT_HANDSHAKE_SUCCEEDED
        assert accepted == 2, "the peers never connected to the impostor"
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for frame in frames:
                fake.send(b"\0".join(frame))
            while monitor.poll(0):
                event = recv_monitor_message(monitor)["event"]
                handshakes += event == zmq.EVENT_HANDSHAKE_SUCCEEDED
            time.sleep(0.02)  # not a wait: paces the frames sent for ``seconds``
    finally:
        fake.disable_monitor()
        monitor.close(linger=0)
        fake.close(linger=0)
    return handshakes


def assert_history_kept(cluster: LocalCluster, real: list[bytes]) -> None:
    """Publishes still succeed on both live nodes, and each serves exactly the real history."""
    with Producer(config=cluster.config_path, node=1, timeout_s=10) as producer:
        after = [producer.publish("orders", b"after").seq for _ in range(3)]
    assert len(after) == 3
    for node_id in (1, 2):
        got = read_all(cluster, node_id, len(real) + 3)
        assert got == [*real, b"after", b"after", b"after"], f"node {node_id} served {got[:5]}"


def test_an_eavesdropper_on_a_mesh_port_receives_nothing(cluster: LocalCluster) -> None:
    ctx = zmq.Context.instance()
    plain, stranger = ctx.socket(zmq.SUB), ctx.socket(zmq.SUB)
    try:
        for sock in (plain, stranger):
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
        cluster.secure(stranger, 1, keys.generate())  # the node's real key, an unlisted own key
        for sock in (plain, stranger):
            sock.connect(cluster.config.node(1).mesh_address)
        publish_real(cluster, 50)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            assert not plain.poll(50) and not stranger.poll(50), "a payload reached an outsider"
        assert metric(cluster, 1, "relay_auth_refused_total", domain="mesh") >= 1
    finally:
        plain.close(linger=0)
        stranger.close(linger=0)


@pytest.mark.parametrize("impostor_key", ["none", "own"])
def test_a_process_on_a_stopped_nodes_mesh_port_is_not_believed(
    cluster: LocalCluster, impostor_key: str
) -> None:
    real = publish_real(cluster, 20)
    cluster.stop(3)
    pair = keys.generate() if impostor_key == "own" else None
    victim = make_seq(int(time.time() * 1000), 1, 0)
    handshakes = impersonate(cluster, 3, pair, forgeries(3, victim))
    assert handshakes == 0
    assert_history_kept(cluster, real)


def test_a_node_holding_its_key_cannot_speak_for_another(cluster: LocalCluster) -> None:
    """Node 3's key opens the mesh, but a frame on node 3's connection that claims to come
    from node 2 is node 3's protocol fault: dropped and counted against node 3."""
    real = publish_real(cluster, 20)
    cluster.stop(3)
    victim = make_seq(int(time.time() * 1000), 1, 0)
    handshakes = impersonate(cluster, 3, cluster.node_pair(3), forgeries(2, victim))
    assert handshakes == 2  # the peers did take node 3's key and hear what it sent
    assert_history_kept(cluster, real)
    for node_id in (1, 2):
        assert metric(cluster, node_id, "relay_peer_faults_total", peer="3") > 0


def compromised(claimed: int, victim_seq: int) -> list[tuple[bytes, bytes]]:
    """What node ``claimed`` could send as itself to rewrite history: the forgeries above,
    a snapshot for each victim based past its verified seq (it would replace everything), a
    heartbeat naming each victim's epoch as 2^62, and a promise that never moves."""
    now = int(time.time() * 1000)
    fake = Tx(victim_seq + 2000, 0, claimed, now, "evil", 1, b"forged")
    base = bytes(32)
    snapshots = [
        encode(
            SyncData(
                "orders", claimed, n, victim_seq + 1000, base, (fake,), (fold_tx(base, fake),), ()
            )
        )
        for n in (1, 2)
    ]
    named = Heartbeat(claimed, now, 0, (), (), False, ((1, 1 << 62), (2, 1 << 62)))
    frozen = Heartbeat(claimed, now, 0, (), (), False)
    return [*forgeries(claimed, victim_seq), *snapshots, encode(named), encode(frozen)]


def test_a_compromised_node_cannot_make_the_others_lose_or_rewrite_acknowledged_txs(
    cluster: LocalCluster,
) -> None:
    """Node 3's own key, in an attacker's hands, speaking as node 3: every way it tried to
    replace, hide or stall acknowledged history is refused and counted against it."""
    real = publish_real(cluster, 20)
    epochs = {n: cluster.status(n).epoch for n in (1, 2)}  # type: ignore[union-attr]
    cluster.stop(3)
    victim = make_seq(int(time.time() * 1000), 1, 0)
    handshakes = impersonate(cluster, 3, cluster.node_pair(3), compromised(3, victim), seconds=5)
    assert handshakes == 2
    assert_history_kept(cluster, real)
    for node_id in (1, 2):
        assert metric(cluster, node_id, "relay_peer_faults_total", peer="3") > 0
        assert cluster.status(node_id).epoch == epochs[node_id]  # type: ignore[union-attr]


def test_the_admin_port_answers_only_an_admitted_admin_key(cluster: LocalCluster) -> None:
    address = f"127.0.0.1:{cluster.admin_ports[1]}"
    node_key = cluster.config.node(1).public_key
    for pair in (None, keys.generate(), cluster.client_pair):  # none, a stranger, a client
        with pytest.raises(TimeoutError):
            admin_call(address, "status", None, 1000, node_key, pair)
    with pytest.raises(TimeoutError):  # no CURVE at all
        admin_call(address, "status", None, 1000)
    reply: dict[str, Any] = admin_call(address, "status", None, 3000, node_key, cluster.admin_pair)
    assert reply["ok"] is True
    assert metric(cluster, 1, "relay_auth_refused_total", domain="admin") >= 2


def test_client_auth_keys_admits_only_listed_clients(tmp_path: Path) -> None:
    overrides = {**FAST, "client_auth": "keys"}
    with LocalCluster(tmp_path / "c", nodes=3, overrides=overrides) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path, timeout_s=20) as producer:
            assert producer.publish("orders", b"listed").seq > 0  # keys/client.key_secret
        stranger = tmp_path / "stranger"
        keys.write(stranger, "client")
        strange_key = keys.secret_file(stranger, "client")
        started = time.monotonic()
        with (
            pytest.raises(RelayError) as refused,
            Producer(config=cluster.config_path, timeout_s=30, client_key=strange_key) as producer,
        ):
            producer.publish("orders", b"stranger")
        assert refused.value.code == "auth" and "every node refused this client's key" in str(
            refused.value
        )
        with (
            pytest.raises(RelayError) as refused,
            Consumer("orders", config=cluster.config_path, client_key=strange_key) as consumer,
        ):
            consumer.take(1, timeout_s=30)
        assert refused.value.code == "auth"
        assert time.monotonic() - started < 10  # told, not timed out (it took 10-30 s)
        assert metric(cluster, 1, "relay_auth_refused_total", domain="client") >= 1
        with Consumer("orders", config=cluster.config_path) as consumer:
            assert [tx.payload for tx in consumer.take(10, timeout_s=3)] == [b"listed"]
        with Consumer("orders", config=cluster.config_path, group="g") as member:
            assert [tx.payload for tx in member.take(1, timeout_s=3)] == [b"listed"]
            member.commit()
        with Producer(config=cluster.config_path, timeout_s=20) as producer:
            producer.publish("orders", b"after the commit")
        # the group's anchor reaches a second replica with the client's key too (it timed out)
        with Consumer("orders", config=cluster.config_path, group="g") as member:
            assert [tx.payload for tx in member.take(1, timeout_s=10)] == [b"after the commit"]


def test_relay_fault_reaches_the_admin_port_through_the_config(cluster: LocalCluster) -> None:
    address = f"127.0.0.1:{cluster.admin_ports[2]}"
    common = ["fault", "--admin", address, "--config", str(cluster.config_path)]
    done = CliRunner().invoke(main, [*common, "--node", "2", "--loss-in", "0.1"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["loss_in"] == 0.1
    cleared = CliRunner().invoke(main, [*common, "--node", "2", "--clear"])
    assert cleared.exit_code == 0 and json.loads(cleared.output)["loss_in"] == 0
    unnamed = CliRunner().invoke(main, common)
    assert unnamed.exit_code != 0 and "--node ID is needed" in unnamed.output


def test_a_node_key_receives_only_the_streams_its_node_replicates(cluster5: LocalCluster) -> None:
    """Issue 31: a process holding node 4's key subscribed to node 1's mesh and received an
    orders.eu payload (orders.* lives on nodes 1-3). Node 1 now applies only the subscriptions
    node 4's own patterns give."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    try:
        for prefix in (b"", b"tx|orders.", b"hb|"):  # everything, another's stream, its own
            sub.setsockopt(zmq.SUBSCRIBE, prefix)
        cluster5.secure(sub, 1, cluster5.node_pair(4))
        sub.connect(cluster5.config.node(1).mesh_address)
        with Producer(config=cluster5.config_path, node=1) as producer:
            for i in range(20):
                producer.publish("orders.eu", b"secret-%d" % i)
        topics: set[bytes] = set()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if sub.poll(50):
                frame = sub.recv()
                assert b"secret" not in frame, "a payload of orders.eu reached node 4's key"
                topics.add(frame.partition(b"\0")[0])
        assert topics == {b"hb|"}  # its own subscription works: the connection is up
        assert metric(cluster5, 1, "relay_errors_total", kind="mesh_subscription_refused") >= 2
    finally:
        sub.close(linger=0)


def test_a_node_key_that_writes_other_messages_to_a_mesh_publisher_is_banned(
    fresh_cluster3: LocalCluster,
) -> None:
    """A message that is not a subscription, written to node 1's XPUB by a holder of node
    3's key, shifted which connection libzmq applied each later subscription to. Node 1 now
    refuses that key and makes its XPUB anew; node 2 reconnects and the cluster serves."""
    cluster = fresh_cluster3

    def attacker() -> zmq.Socket[Any]:
        sock = zmq.Context.instance().socket(zmq.XSUB)
        sock.setsockopt(zmq.LINGER, 0)
        cluster.secure(sock, 1, cluster.node_pair(3))
        sock.connect(cluster.config.node(1).mesh_address)
        return sock

    first = attacker()
    try:
        first.send(b"\x01hb|")  # a subscription it may make: the connection is up
        assert first.poll(3000), "node 1 sent node 3's key no heartbeat"
        first.send(b"not a subscription")
        kind = "mesh_not_a_subscription"
        assert until(lambda: metric(cluster, 1, "relay_errors_total", kind=kind), bool, 10)
    finally:
        first.close(linger=0)
    again = attacker()
    try:
        again.send(b"\x01hb|")
        assert not again.poll(2000), "node 1 still admits node 3's key"
    finally:
        again.close(linger=0)
    with Producer(config=cluster.config_path, node=1) as producer:  # nodes 1 and 2: a quorum
        assert producer.publish("after.ban", b"x").seq > 0


def test_client_tables_say_which_streams_each_key_may_publish_and_read(tmp_path: Path) -> None:
    """Issue 31: any admitted key could publish to and read every stream. A [[client]] table
    now limits its key, names it and the stream in each refusal, and admits it."""
    with LocalCluster(tmp_path / "c", nodes=3) as cluster:
        billing = keys.write(tmp_path / "billing", "client")
        reader = keys.write(tmp_path / "reader", "client")
        tables = (
            f'\n[[client]]\nname = "billing"\nkey = "{billing.public}"\n'
            'publish = ["orders.*"]\nconsume = ["orders.*"]\n'
            f'\n[[client]]\nname = "reader"\nkey = "{reader.public}"\nconsume = ["orders.*"]\n'
        )
        cluster.config_path.write_text(cluster.config_path.read_text() + tables)
        cluster.start()
        cluster.wait_serving()
        as_billing = {
            "config": cluster.config_path,
            "client_key": tmp_path / "billing" / "client.key_secret",
        }
        as_reader = {
            "config": cluster.config_path,
            "client_key": tmp_path / "reader" / "client.key_secret",
        }
        with Producer(**as_billing) as producer:  # type: ignore[arg-type]
            assert producer.publish("orders.eu", b"allowed").seq > 0
            with pytest.raises(RelayError) as refused:
                producer.publish("payments.eu", b"not allowed")
        assert refused.value.code == "forbidden"
        assert (
            "client billing" in refused.value.message and "'payments.eu'" in refused.value.message
        )
        with Consumer("orders.eu", group="g", **as_billing) as member:  # type: ignore[arg-type]
            assert [t.payload for t in member.take(1, timeout_s=10)] == [b"allowed"]
            member.commit()  # a group's commit: a publish to orders.eu.__group.g
        with (
            Producer(**as_reader) as producer,  # type: ignore[arg-type]
            pytest.raises(RelayError, match=r"client reader .* may not publish to"),
        ):
            producer.publish("orders.eu", b"a reader")
        with Consumer("orders.eu", **as_reader) as consumer:  # type: ignore[arg-type]
            assert [t.payload for t in consumer.take(1, timeout_s=10)] == [b"allowed"]
        with (
            Consumer("payments.eu", **as_reader) as consumer,  # type: ignore[arg-type]
            pytest.raises(RelayError, match=r"may not read stream 'payments\.eu'"),
        ):
            consumer.take(1, timeout_s=10)
        with Producer(config=cluster.config_path) as producer:  # a key with no table: all
            assert producer.publish("payments.eu", b"the operator's client").seq > 0
