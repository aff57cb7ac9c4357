"""Thousands of small streams on a real 3-node cluster (issue 31, item 1): one producer makes
6,000 streams with a message each, every one is acknowledged and no node cuts another; after
the whole cluster restarts, a new stream is served at once. ``/metrics`` keeps per-stream
series for ``metrics_streams_max`` streams and sums the others under ``stream="*"``."""

from __future__ import annotations

from pathlib import Path
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families

from relay import Producer
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow
STREAMS = 6000


def publish_one_each(cluster: LocalCluster, names: list[str]) -> None:
    with Producer(config=cluster.config_path, timeout_s=60) as producer:
        futures = [producer.send(name, b"x") for name in names]
        producer.flush()
        for future in futures:
            future.result()  # raises if a stream was not acknowledged


def stream_samples(cluster: LocalCluster, node_id: int, metric: str) -> dict[str, float]:
    port = cluster.config.node(node_id).metrics_port
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        s.labels["stream"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == metric
    }


def test_thousands_of_new_streams_are_served_and_survive_a_restart(tmp_path: Path) -> None:
    overrides = {"metrics_streams_max": 10}
    with LocalCluster(tmp_path, nodes=3, overrides=overrides) as cluster:
        cluster.start()
        cluster.wait_serving()
        publish_one_each(cluster, [f"s{i}" for i in range(STREAMS)])
        for node_id in (1, 2, 3):
            assert "peer_down" not in cluster.log(node_id), cluster.log(node_id)[-2000:]
        verified = stream_samples(cluster, 1, "relay_verified_txs_total")
        assert len(verified) == 11 and sum(verified.values()) == STREAMS
        assert verified["*"] == STREAMS - 10
        for node_id in (1, 2, 3):
            cluster.stop(node_id)
        for node_id in (1, 2, 3):
            cluster.start(node_id)
        cluster.wait_serving(timeout_s=30)
        with Producer(config=cluster.config_path, timeout_s=10) as producer:
            assert producer.publish("fresh", b"after the restart").seq > 0
        logged = stream_samples(cluster, 2, "relay_log_bytes")
        assert len(logged) == 11 and logged["*"] > 0
