"""A compacted stream on a running cluster: every node compacts its log in the background, a
reader from the earliest gets the newest value of each key (each record proven on its own),
``relay consume --compacted-view`` prints the table, and a consumer group's committed position
holds compaction back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from relay_cli import relay
from waits import until

from relay import Consumer, Producer
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

BLOCKS = """
[[stream]]
pattern = "kv.*"
cleanup = "compact"
segment_bytes = 4096
delete_retention_ms = 1000
"""
KEYS = 20


@pytest.fixture
def compacting3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("compact")
    overrides = {"dedup_window_ms": 1000, "buffer_txs_max": 200}  # older reads: from the logs
    with LocalCluster(folder, nodes=3, overrides=overrides, streams=BLOCKS) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


def publish(cluster: LocalCluster, stream: str, start: int, count: int) -> dict[bytes, bytes]:
    """``count`` updates of ``KEYS`` keys (update ``i`` of key ``k<i % KEYS>``); the newest
    value of each key."""
    newest = {}
    with Producer(config=cluster.config_path, window=8, batch_max=50) as producer:
        for i in range(start, start + count):
            key, value = b"k%d" % (i % KEYS), b"value %d" % i
            producer.send(stream, value, key=key)
            newest[key] = value
        producer.flush()
    return newest


def held(cluster: LocalCluster, stream: str) -> list[int]:
    """The txs each node's log holds of ``stream``."""
    found = []
    for spec in cluster.config.nodes:
        status = cluster.status(spec.id)
        s = next((s for s in status.streams if s.name == stream), None) if status else None
        found.append(s.log_txs if s else -1)
    return found


def test_each_node_compacts_and_a_reader_gets_the_newest_of_each_key(
    compacting3: LocalCluster,
) -> None:
    cluster = compacting3
    newest = publish(cluster, "kv.a", 0, 2000)
    with Producer(config=cluster.config_path) as producer:
        producer.publish("kv.a", b"", key=b"k7")  # a tombstone: k7 is deleted
        del newest[b"k7"]
    counts = until(lambda: held(cluster, "kv.a"), lambda c: all(0 < n < 1000 for n in c), 30)
    assert all(0 < n < 1000 for n in counts), counts  # every node compacted its own log
    with Consumer("kv.a", config=cluster.config_path, start="earliest") as consumer:
        got = consumer.take(min(counts), timeout_s=20)
        table: dict[bytes, bytes] = {}
        while True:
            for tx in got:
                assert tx.key is not None
                table[tx.key] = tx.payload
            if consumer.at_end():
                break
            got = consumer.poll(timeout_s=1)
    assert {k: v for k, v in table.items() if v} == newest
    done = relay(cluster, "consume", "--stream", "kv.a", "--compacted-view", "--json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["key"].encode(): r["payload"].encode() for r in rows} == newest
    assert [int(r["seq"]) for r in rows] == sorted(int(r["seq"]) for r in rows)


def test_a_groups_committed_position_holds_compaction_back(compacting3: LocalCluster) -> None:
    cluster = compacting3
    publish(cluster, "kv.g", 0, 200)
    with Consumer("kv.g", config=cluster.config_path, start="earliest", group="slow") as c:
        first = c.take(100, timeout_s=20)
        assert len(first) == 100
        c.processed(first[-1])
        c.commit()
    committed = first[-1].seq
    publish(cluster, "kv.g", 200, 1800)
    publish(cluster, "kv.other", 0, 2000)  # a stream no group reads: compacted meanwhile
    until(lambda: held(cluster, "kv.other"), lambda c: all(0 < n < 1000 for n in c), 30)
    with Consumer("kv.g", config=cluster.config_path, start=committed + 1) as consumer:
        after = consumer.take(1900, timeout_s=30)
    assert len(after) == 1900  # every update after the group's position is still there
    assert [t.payload for t in after] == [b"value %d" % i for i in range(100, 2000)]


@pytest.mark.spark
def test_spark_reads_a_compacted_stream_verified_and_as_a_table(
    compacting3: LocalCluster, spark: Any
) -> None:
    cluster = compacting3
    newest = publish(cluster, "kv.s", 0, 2000)
    until(lambda: held(cluster, "kv.s"), lambda c: all(0 < n < 1000 for n in c), 30)
    reader = spark.read.format("relay").option("config", str(cluster.config_path))
    rows = reader.option("stream", "kv.s").load().select("seq", "key", "verified").collect()
    assert rows and all(r.verified for r in rows)
    assert len(rows) < 2000  # the compacted range: fewer than were published
    table = reader.option("stream", "kv.s").option("compactedView", "true").load()
    got = {bytes(r.key): bytes(r.payload) for r in table.select("key", "payload").collect()}
    assert got == newest
