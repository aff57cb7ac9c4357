"""Clients bounded by bytes and by requests in flight (issue 12, item 4): a 50 MB frame, a
request of 60 x 1 MiB items and a connection that parks more long polls than its share each
used to grow a node without bound; now the frame and the request are dropped by the socket
(``request_bytes_max``), the extra polls are answered ``busy``, and the node serves on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import zmq
from test_fuzz_live import rss_mb

from relay import Consumer, Producer
from relay.runtime.local_cluster import LocalCluster
from relay.wire.client import fetch_request, publish_request

pytestmark = pytest.mark.slow
MIB = 1 << 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    overrides = {"client_inflight_max": 64}
    with LocalCluster(tmp_path_factory.mktemp("bounds"), nodes=3, overrides=overrides) as made:
        made.start()
        made.wait_serving()
        yield made


def dealer(cluster: LocalCluster, node_id: int) -> zmq.Socket[Any]:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    cluster.secure(sock, node_id)
    sock.connect(cluster.config.node(node_id).client_address)
    return sock


def test_a_frame_over_request_bytes_max_never_reaches_the_node(cluster: LocalCluster) -> None:
    sock = dealer(cluster, 1)
    try:
        for _ in range(4):
            sock.send(b"x" * (50 * MIB))
        items = [[i, b"y" * MIB, None, []] for i in range(60)]
        sock.send(publish_request(1, "orders", "big", items))
        assert not sock.poll(1000), "a request over request_bytes_max was answered"
    finally:
        sock.close(linger=0)
    assert rss_mb(cluster.procs[1].pid) < 400
    with Producer(config=cluster.config_path, node=1) as producer:  # packs under the limit
        futures = [producer.send("orders.big", b"z" * MIB) for _ in range(20)]
        producer.flush()
        assert all(f.result().seq > 0 for f in futures)


def test_a_connection_over_its_share_of_requests_is_answered_busy(
    cluster: LocalCluster,
) -> None:
    sock = dealer(cluster, 2)
    try:
        for req_id in range(1, 101):  # long polls on a stream with nothing to read: parked
            sock.send(fetch_request(req_id, "orders.quiet", 0, 10, 20_000, False))
        busy = 0
        while sock.poll(1000):
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert reply[1] == "error" and reply[3] == "busy", reply
            busy += 1
        assert busy == 100 - 64
    finally:
        sock.close(linger=0)
    with Producer(config=cluster.config_path, node=2) as producer:
        producer.publish("orders.quiet", b"wakes the parked polls")
    with Consumer("orders.quiet", config=cluster.config_path, node=2) as consumer:
        assert [tx.payload for tx in consumer.take(1, timeout_s=10)] == [b"wakes the parked polls"]
