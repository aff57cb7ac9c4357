"""One memory budget per node (issue 31, item 2), under the two floods that used to grow a node
past a gigabyte: sixteen streams of 1 MiB payloads (each ring could hold 64 MiB) and twenty
connections that never read a hundred fetches each (each connection could hold 80 MiB of
answers). With ``memory_bytes_max`` = 256 MiB every node stays under it plus the process's
own ``BASE_MB``, and the oldest entries, shed from memory, are read from the log."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from urllib.request import urlopen

import psutil
import pytest
import zmq
from waits import until

from relay import Consumer, Producer
from relay.runtime.local_cluster import LocalCluster
from relay.wire.client import fetch_request

pytestmark = pytest.mark.slow
MIB = 1 << 20
BUDGET_MB = 256
BASE_MB = 120  # the interpreter, its modules and a node's sockets, measured idle: 70-80 MB


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    overrides = {"memory_bytes_max": BUDGET_MB * MIB}
    with LocalCluster(tmp_path_factory.mktemp("budget"), nodes=3, overrides=overrides) as made:
        made.start()
        made.wait_serving()
        yield made


class PeakRss:
    """The highest resident size of the nodes, sampled every 50 ms while in use."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.procs = [psutil.Process(cluster.procs[n].pid) for n in (1, 2, 3)]
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            mb = max(p.memory_info().rss for p in self.procs) / MIB
            self.peak_mb = max(self.peak_mb, mb)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_sixteen_streams_of_large_payloads_stay_within_the_budget(cluster: LocalCluster) -> None:
    with PeakRss(cluster) as rss, Producer(config=cluster.config_path, node=1) as producer:
        futures = [
            producer.send(f"orders.big{s}", bytes([i]) * MIB) for i in range(24) for s in range(16)
        ]
        producer.flush()
        assert all(f.result().seq > 0 for f in futures)
    assert rss.peak_mb < BUDGET_MB + BASE_MB, f"peak {rss.peak_mb:.0f} MB"
    with Consumer("orders.big0", config=cluster.config_path, node=2) as consumer:
        first = consumer.take(24, timeout_s=30)  # the oldest were shed: they come from the log
    assert [tx.payload[:1] for tx in first] == [bytes([i]) for i in range(24)]


def unread_fetches(cluster: LocalCluster) -> list[zmq.Socket[Any]]:
    """Twenty connections to node 3, each sending a hundred fetches it never reads."""
    socks = []
    for _ in range(20):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 1)  # its library takes in no more than it reads
        cluster.secure(sock, 3)
        sock.connect(cluster.config.node(3).client_address)
        socks.append(sock)
    for req_id in range(1, 101):
        for sock in socks:
            sock.send(fetch_request(req_id, "orders.unread", 0, 5000, 0))
    return socks


def answered_all(cluster: LocalCluster, socks: list[zmq.Socket[Any]]) -> bool:
    """Every connection has answers to read, and node 3 holds no request open."""
    if not all(sock.get(zmq.EVENTS) & zmq.POLLIN for sock in socks):
        return False
    url = f"http://127.0.0.1:{cluster.config.node(3).metrics_port}/metrics"
    text = urlopen(url, timeout=5).read().decode()
    return "\nrelay_client_requests_open 0.0\n" in text


def test_fetches_nobody_reads_on_twenty_connections_stay_within_the_budget(
    cluster: LocalCluster,
) -> None:
    with Producer(config=cluster.config_path, node=3) as producer:
        for i in range(64):  # 4 MiB of 64 KiB payloads: a fetch would answer 1 MiB of them
            producer.send("orders.unread", bytes([i]) * (64 << 10))
        producer.flush()
    with PeakRss(cluster) as rss:
        socks = unread_fetches(cluster)
        try:
            # answers go out until every queue is full; the rest wait or are dropped
            answered = until(lambda: answered_all(cluster, socks), bool, timeout_s=60)
            assert answered, "node 3 did not answer every connection and empty its requests"
            with Consumer("orders.unread", config=cluster.config_path, node=3) as consumer:
                assert len(consumer.take(64, timeout_s=30)) == 64  # answered amid the flood
        finally:
            for sock in socks:
                sock.close(linger=0)
    assert rss.peak_mb < BUDGET_MB + BASE_MB, f"peak {rss.peak_mb:.0f} MB"
