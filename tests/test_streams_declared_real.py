"""``[[stream]]`` blocks on a running cluster: publishes checked against their stream's type and
bounds, ``relay stream info`` showing the settings in force, and a node that refuses to start
on a schema change that would break its streams' entries, then starts on one that adds a field
and still reads the entries written under the old version."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from relay_cli import relay
from waits import until

from relay import Consumer, Producer, RelayError
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

USERS = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["id"],
}
EVENTS = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "user": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
        },
        "key": {"type": "string"},
        "amount": {"type": ["number", "null"]},
        "meta": {"type": "object"},
    },
    "required": ["id"],
}
BLOCKS = """
[[stream]]
pattern = "users"
schema = "users.json"

[[stream]]
pattern = "events"
schema = "events.json"

[[stream]]
pattern = "pinned.*"
nodes = [1, 2, 3]

[[stream]]
pattern = "orders.eu"

[[stream]]
pattern = "orders.*"
create = false

[[stream]]
pattern = "small.*"
max_payload_bytes = 100
retention_txs = 1000
segment_bytes = 4096

[[stream]]
pattern = "aging.*"
retention_ms = 1000
segment_ms = 1000

[[stream]]
pattern = "kv.*"
cleanup = "compact"
"""


@pytest.fixture(scope="module")
def declared4(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("declared")
    (folder / "users.json").write_text(json.dumps(USERS))
    (folder / "events.json").write_text(json.dumps(EVENTS))
    with LocalCluster(folder, nodes=4, streams=BLOCKS) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:  # each test may rely on it
            assert producer.publish("users", b'{"id": 1, "name": "ada"}').seq
        yield cluster


def refusal(cluster: LocalCluster, stream: str, payload: bytes, key: str | None = None) -> str:
    with Producer(config=cluster.config_path) as producer, pytest.raises(RelayError) as info:
        producer.publish(stream, payload, key=key)
    return f"{info.value.code}: {info.value.message}"


def test_publishes_are_checked_against_their_streams_block(declared4: LocalCluster) -> None:
    cluster = declared4
    with Producer(config=cluster.config_path) as producer:
        assert producer.publish("orders.eu", b"declared by name").seq
        assert producer.publish("small.a", b"x" * 100).seq
        assert producer.publish("kv.a", b"v", key="k").seq
    assert refusal(cluster, "users", b'{"id": "one"}') == (
        "bad_request: message 0 is not of the stream's schema: $.id: 'one' is not of type 'integer'"
    )
    assert "is not UTF-8 JSON" in refusal(cluster, "users", b"not json")
    assert refusal(cluster, "orders.us", b"x").startswith("not_found: no stream 'orders.us'")
    assert "the stream's payload_bytes_max (100)" in refusal(cluster, "small.a", b"x" * 101)
    assert "compacted by key" in refusal(cluster, "kv.a", b"v")
    with Consumer("users", config=cluster.config_path, start="earliest") as consumer:
        got = consumer.take(1, timeout_s=10)
    assert [t.payload for t in got] == [b'{"id": 1, "name": "ada"}']  # nothing refused stored


def test_stream_info_shows_the_settings_in_force(declared4: LocalCluster) -> None:
    done = relay(declared4, "stream", "info", "small.b", "--json")
    assert done.returncode == 0, done.stderr
    settings = json.loads(done.stdout)["settings"]
    assert settings["pattern"] == "small.*" and settings["max_payload_bytes"] == 100
    assert settings["retention_txs"] == 1000 and settings["nodes"] == [1, 2, 3, 4]
    assert settings["segment_bytes"] == 4096 and settings["cleanup"] == "delete"
    done = relay(declared4, "stream", "info", "users")
    assert done.returncode == 0, done.stderr
    assert "block:         users" in done.stdout
    assert '"required":["id"]' in done.stdout and "schema_fingerprint:" in done.stdout


def test_a_node_refuses_a_breaking_schema_and_takes_an_added_field(
    declared4: LocalCluster,
) -> None:
    cluster = declared4
    with Producer(config=cluster.config_path) as producer:
        producer.publish("users", b'{"id": 2}')
    cluster.stop(1)
    schema_file = cluster.folder / "users.json"
    retyped = {**USERS, "properties": {"id": {"type": "string"}, "name": {"type": "string"}}}
    schema_file.write_text(json.dumps(retyped))
    cluster.start(1)
    proc = cluster.procs[1]
    proc.wait(30)
    assert proc.returncode != 0
    log = cluster.log(1)
    assert "'stream[0].schema' cannot replace the schema streams 'users' have" in log
    assert "$.id is retyped" in log
    added = {**USERS, "properties": {**USERS["properties"], "email": {"type": "string"}}}
    schema_file.write_text(json.dumps(added))
    cluster.start(1)
    cluster.wait_serving([1])
    assert "recovery:" not in cluster.log(1)  # the old version's segments are read, not cut
    with Consumer("users", config=cluster.config_path, node=1, start="earliest") as consumer:
        got = consumer.take(2, timeout_s=20)
    assert [t.payload for t in got] == [b'{"id": 1, "name": "ada"}', b'{"id": 2}']
    assert got[0].seq < got[1].seq


@pytest.mark.spark
def test_spark_reads_a_typed_streams_fields_as_columns(declared4: LocalCluster, spark: Any) -> None:
    entries = [
        {"id": 1, "user": {"name": "ada", "tags": ["a", "b"]}, "key": "k1", "amount": 2.5},
        {"id": 2, "amount": 3, "meta": {"x": [1, 2]}},
        {"id": 3, "amount": None},
    ]
    with Producer(config=declared4.config_path) as producer:
        for entry in entries:
            producer.publish("events", json.dumps(entry).encode(), key="row")
    df = spark.read.format("relay").option("config", str(declared4.config_path))
    rows = (
        df.option("stream", "events")
        .load()
        .orderBy("seq")
        .select("id", "user.name", "user.tags", "data_key", "key", "amount", "meta")
        .collect()
    )
    assert [tuple(r) for r in rows] == [
        (1, "ada", ["a", "b"], "k1", b"row", 2.5, None),
        (2, None, None, None, b"row", 3.0, '{"x": [1, 2]}'),
        (3, None, None, None, b"row", None, None),
    ]
    plain = df.option("stream", "orders.eu").load()
    assert "id" not in plain.columns and len(plain.columns) == 16


def log_txs(cluster: LocalCluster, stream: str) -> list[int]:
    found = []
    for spec in cluster.config.nodes:
        status = cluster.status(spec.id)
        s = status.stream(stream) if status else None
        found.append(s.log_txs if s else -1)
    return found


def test_each_stream_is_rolled_and_retained_by_its_own_block(declared4: LocalCluster) -> None:
    cluster = declared4
    with Producer(config=cluster.config_path, window=8, batch_max=50) as producer:
        for i in range(3000):
            producer.send("small.r", b"%d" % i)
            producer.send("orders.eu", b"%d" % i)
        producer.send("aging.a", b"first")
        producer.flush()
    kept = until(lambda: log_txs(cluster, "small.r"), lambda c: all(n <= 1100 for n in c), 20)
    assert all(1000 <= n <= 1100 for n in kept), kept  # at least retention_txs, in segments
    assert all(n >= 3000 for n in log_txs(cluster, "orders.eu"))  # its block keeps everything
    time.sleep(1.5)  # the work: "aging.a" needs its first segment to be older than 1 s
    with Producer(config=cluster.config_path) as producer:
        producer.publish("aging.a", b"second")  # rolls the old segment (segment_ms), sealed
    aged = until(lambda: log_txs(cluster, "aging.a"), lambda c: all(n == 1 for n in c), 20)
    assert aged == [1, 1, 1, 1]  # retention_ms took the sealed segment past its age


def test_a_block_that_names_its_nodes_sets_the_replicas(declared4: LocalCluster) -> None:
    cluster = declared4
    with Producer(config=cluster.config_path, node=4) as producer:  # node 4 redirects
        ack = producer.publish("pinned.a", b"on 1, 2 and 3")
    assert ack.node in (1, 2, 3)
    assert log_txs(cluster, "pinned.a")[3] == -1  # node 4 holds no copy
    assert all(n == 1 for n in log_txs(cluster, "pinned.a")[:3])
    done = relay(cluster, "stream", "info", "pinned.a", "--json")
    assert json.loads(done.stdout)["settings"]["nodes"] == [1, 2, 3]
