"""A cluster across hosts, on one machine: each node in a network namespace of its own with its
own address on a bridge (CURVE on, as by default), clients in the root namespace; a partition
and packet loss are nftables rules in the nodes' namespaces, not the node's own admin hooks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_faults_real import FAST
from waits import until

from relay import Consumer, Producer
from relay.runtime.local_cluster import LocalCluster
from relay.runtime.netns import unavailable

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(unavailable()), reason=f"netns: {unavailable()}"),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path / "c", nodes=3, overrides=FAST, netns=True) as made:
        made.start()
        made.wait_serving(timeout_s=30)
        yield made


def wait_state(cluster: LocalCluster, node_id: int, state: str, timeout_s: float = 15) -> None:
    def seen() -> str | None:
        status = cluster.status(node_id)
        return status.state if status else None

    found = until(seen, lambda now: now == state, timeout_s)
    assert found == state, f"node {node_id} is {found}, not {state}, after {timeout_s} s"


def test_nodes_on_their_own_addresses_replicate_and_redirect(cluster: LocalCluster) -> None:
    hosts = {spec.host for spec in cluster.config.nodes}
    assert len(hosts) == 3 and not any(h.startswith("127.") for h in hosts)
    with Producer(config=cluster.config_path, node=1) as producer:
        acks = [producer.publish("orders", f"m{i}".encode()) for i in range(50)]
    assert {a.node for a in acks} == {1}
    with Consumer("orders", config=cluster.config_path, node=3) as consumer:
        got = consumer.take(50, timeout_s=10)
    assert [tx.payload for tx in got] == [f"m{i}".encode() for i in range(50)]


def test_a_node_cut_off_by_the_kernel_fences_and_rejoins(cluster: LocalCluster) -> None:
    for node_id, blocked in ((3, [1, 2]), (1, [3]), (2, [3])):
        cluster.net_faults(node_id, blocked, 0.0)
    wait_state(cluster, 3, "fenced")
    with Producer(config=cluster.config_path, node=1, timeout_s=10) as producer:
        during = [producer.publish("orders", b"during").seq for _ in range(20)]
    for node_id in (1, 2, 3):
        cluster.net_faults(node_id, [], 0.0)
    wait_state(cluster, 3, "serving", 30)
    with Consumer("orders", config=cluster.config_path, node=3) as consumer:
        held = {tx.seq for tx in consumer.take(10_000, timeout_s=5)}
    assert set(during) <= held


def test_packet_loss_on_every_mesh_link_loses_no_acknowledged_publish(
    cluster: LocalCluster,
) -> None:
    for node_id in (1, 2, 3):
        cluster.net_faults(node_id, [], 0.2)
    with Producer(config=cluster.config_path, timeout_s=30) as producer:
        futures = [producer.send("orders", f"lossy {i}".encode()) for i in range(500)]
        producer.flush()
        acked = {f.result().seq for f in futures}
    for node_id in (1, 2, 3):
        cluster.net_faults(node_id, [], 0.0)
    for node_id in (1, 2, 3):
        with Consumer("orders", config=cluster.config_path, node=node_id) as consumer:
            held = {tx.seq for tx in consumer.take(10_000, timeout_s=5)}
        assert acked <= held, f"node {node_id} lacks {len(acked - held)} acked txs"
