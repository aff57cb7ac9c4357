"""What a node exports to Prometheus (issue 13): parsed with prometheus_client's parser,
checked by ``promtool check metrics`` where it is installed, and holding every metric the
Grafana dashboard in docs/ queries."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families
from waits import until

from relay import Producer
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow
DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json"
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",)}


def scrape(cluster: LocalCluster, node_id: int) -> str:
    port = cluster.config.node(node_id).metrics_port
    return urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def samples(cluster: LocalCluster, node_id: int) -> dict[tuple[str, tuple[Any, ...]], float]:
    """Every sample a node exports, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scrape(cluster, node_id))
        for s in family.samples
    }


def exported(text: str) -> set[str]:
    """Every series name the text can hold: each family and its type's suffixes."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + s for s in SUFFIXES.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


def queried() -> set[str]:
    """The metric names the dashboard's queries use."""
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    found = {m for e in exprs for m in re.findall(r"\b((?:relay|process)_[a-z_]+)", e)}
    assert len(found) >= 10, found
    return found


@pytest.fixture(scope="module")
def cluster(cluster3: LocalCluster) -> LocalCluster:
    with Producer(config=cluster3.config_path) as producer:
        for i in range(50):
            producer.send("metrics.m", b"%d" % i)
        producer.flush()
    return cluster3


def test_every_metric_the_dashboard_queries_exists_on_each_node(cluster: LocalCluster) -> None:
    wanted = queried()
    for node_id in (1, 2, 3):
        missing = wanted - exported(scrape(cluster, node_id))
        assert not missing, f"node {node_id} does not export {sorted(missing)}"


def test_identity_verified_counts_and_process_metrics(cluster: LocalCluster) -> None:
    found = samples(cluster, 2)
    info = [k for k in found if k[0] == "relay_node_info"]
    assert info and dict(info[0][1])["node_id"] == "2"
    key = ("relay_verified_txs_total", (("stream", "metrics.m"),))
    found = until(lambda: samples(cluster, 2), lambda now: now.get(key) == 50, timeout_s=10)
    assert found.get(key) == 50  # a count, which a float carries exactly (a seq it would not)
    stamp = found[("relay_verified_timestamp_seconds", (("stream", "metrics.m"),))]
    assert abs(stamp - time.time()) < 120
    assert found[("process_resident_memory_bytes", ())] > 10 << 20
    assert not any(name == "relay_verified_seq" for name, _ in found)


def test_a_request_takes_one_stream_batch_max_messages_and_bounded_payload_bytes(
    cluster: LocalCluster,
) -> None:
    """The producer cuts its queue into requests at a change of stream, at ``batch_max``
    messages and at ``REQUEST_PAYLOAD_BYTES`` of payload: counted by the node that answers
    them, and every message acknowledged in send order per stream."""
    key = ("relay_publish_requests_total", (("outcome", "ok"),))
    before = samples(cluster, 1)[key]
    big = b"x" * 1_000_000  # four fit in one request's 4 MiB, a fifth does not
    groups = [
        [("metrics.a", b"a")] * 3 + [("metrics.b", b"b")] * 2 + [("metrics.a", b"a")] * 3,
        [("metrics.a", big)] * 5,
        [("metrics.b", b"c")] * 10,
    ]
    with Producer(config=cluster.config_path, node=1, batch_max=8) as producer:
        for group in groups:
            futures = [producer.send(stream, payload) for stream, payload in group]
            producer.flush()
            acks = [f.result() for f in futures]
            for stream in ("metrics.a", "metrics.b"):
                seqs = [a.seq for a in acks if a.stream == stream]
                assert seqs == sorted(seqs)
    assert samples(cluster, 1)[key] - before == 3 + 2 + 2  # [a3 b2 a3], [4 big, 1], [b8, b2]


def test_the_quorum_latency_is_timed_by_the_node_from_arrival_to_answer(
    cluster: LocalCluster,
) -> None:
    """Each answered publish request is observed once, in the node's own time from its
    arrival to its answer: within what the producer waited, and finer than a millisecond."""
    count, total = "relay_quorum_latency_seconds_count", "relay_quorum_latency_seconds_sum"
    before = samples(cluster, 1)
    with Producer(config=cluster.config_path, node=1) as producer:
        started = time.perf_counter()
        for i in range(20):
            future = producer.send("metrics.latency", b"%d" % i)
            producer.flush()
            future.result()
        waited = time.perf_counter() - started
    after = samples(cluster, 1)
    assert after[(count, ())] - before[(count, ())] == 20
    timed = after[(total, ())] - before[(total, ())]
    assert 0 < timed < waited
    assert abs(timed * 1000 - round(timed * 1000)) > 1e-6  # not whole milliseconds


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_check_metrics_passes_on_every_node(cluster: LocalCluster) -> None:
    for node_id in (1, 2, 3):
        checked = subprocess.run(
            ["promtool", "check", "metrics"],
            input=scrape(cluster, node_id),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert checked.returncode == 0, f"node {node_id}: {checked.stdout}{checked.stderr}"


def test_a_restarted_node_counts_only_what_becomes_verified_after_it(
    cluster: LocalCluster,
) -> None:
    cluster.stop(3)
    cluster.start(3)
    cluster.wait_serving()
    with Producer(config=cluster.config_path) as producer:
        for i in range(5):
            producer.publish("metrics.m", b"after %d" % i)
    key = ("relay_verified_txs_total", (("stream", "metrics.m"),))
    counted = until(lambda: samples(cluster, 3).get(key, 0.0), lambda n: n >= 5, timeout_s=10)
    assert 5 <= counted < 50  # not the 50 the log held as verified before the restart
