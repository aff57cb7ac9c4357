"""The relay Spark data source against real nodes, in one local[2] Spark session."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from load import Load
from waits import until

from relay import Consumer, Producer
from relay.client.directory import resolve
from relay.client.fetcher import Fetcher
from relay.client.groups import group_stream, read_committed
from relay.runtime.local_cluster import LocalCluster

pyspark = pytest.importorskip("pyspark")
from pyspark.sql import DataFrame, SparkSession  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUFFER = 5000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("spark-cluster")
    with LocalCluster(folder, nodes=3, overrides={"buffer_txs_max": BUFFER}, admin=True) as c:
        c.start()
        c.wait_serving()
        yield c


def publish(cluster: LocalCluster, stream: str, count: int) -> list[int]:
    """Publish ``count`` JSON txs; their seqs in order."""
    with Producer(config=cluster.config_path) as producer:
        futures = [
            producer.send(
                stream,
                b'{"amount": %d}' % (i % 10),
                key=None if i % 3 else f"k{i}",
                headers={"n": str(i)} if i % 2 else [("a", b""), ("a", b"\xff")],
            )
            for i in range(count)
        ]
        producer.flush()
        return sorted(f.result().seq for f in futures)


def relay_read(
    spark: SparkSession, cluster: LocalCluster, stream: str, **options: Any
) -> DataFrame:
    reader = spark.read.format("relay").option("stream", stream)
    if "nodes" not in options:
        reader = reader.option("config", str(cluster.config_path))
    else:  # the cluster admits only its client key
        reader = reader.option("clientKey", str(cluster.config.keys_dir() / "client.key_secret"))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_a_batch_read_of_a_range_equals_what_the_python_consumer_reads(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    seqs = publish(cluster, "orders.batch", 1500)
    df = relay_read(
        spark,
        cluster,
        "orders.batch",
        startingOffsets=seqs[100],
        endingOffsets=seqs[1199],
        minPartitions=3,
    )
    assert df.rdd.getNumPartitions() == 3
    rows = df.orderBy("seq").collect()
    with Consumer("orders.batch", config=cluster.config_path, start=seqs[100]) as consumer:
        txs = consumer.take(1100, timeout_s=30)
    assert [
        (r.stream, r.seq, r.origin, r.producer_id, r.msg_id, bytes(r.payload), bytes(r.digest))
        for r in rows
    ] == [(t.stream, t.seq, t.origin, t.producer_id, t.msg_id, t.payload, t.digest) for t in txs]
    assert [
        (None if r.key is None else bytes(r.key), [(h.key, bytes(h.value)) for h in r.headers])
        for r in rows
    ] == [(t.key, list(t.headers)) for t in txs]
    assert {t.key for t in txs} > {None} and any(len(t.headers) == 2 for t in txs)
    assert [r.timestamp.replace(tzinfo=UTC) for r in rows] == [
        datetime.fromtimestamp(t.timestamp_ms / 1000, UTC) for t in txs
    ]
    assert all(r.verified for r in rows)
    assert relay_read(spark, cluster, "orders.batch").count() == 1500


def test_a_streaming_query_restarted_from_its_checkpoint_writes_each_tx_once(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    stream = "orders.stream"
    out, checkpoint = tmp_path / "rows", tmp_path / "checkpoint"

    def run() -> None:
        rows = (
            spark.readStream.format("relay")
            .option("config", str(cluster.config_path))
            .option("stream", stream)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 700)
            .option("minPartitions", 2)
            .option("group", "spark")  # progress shown to relay groups describe
            .load()
        )

        def write(batch: DataFrame, batch_id: int) -> None:
            batch.select("seq", "digest").write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

        query = (
            rows.writeStream.foreachBatch(write)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180), "the query did not finish in 180 s"
            assert query.exception() is None, query.exception()
        finally:
            query.stop()

    first = publish(cluster, stream, 2500)
    run()
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed == [0, 1, 2, 3]  # 2500 txs at most 700 per micro-batch

    # Forget that the last batch was committed, as if the job died before its commit: the
    # restart must replay that batch (same id, same seq range, overwriting its output), then
    # read what came after.
    for name in ("3", ".3.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    second = publish(cluster, stream, 1500)
    run()
    seqs = [r.seq for r in spark.read.parquet(str(out)).select("seq").collect()]
    assert len(seqs) == len(set(seqs)) == 4000
    assert sorted(seqs) == first + second
    reported = Fetcher(
        group_stream(stream, "spark"), resolve(cluster.config_path), pair=cluster.client_pair
    )
    try:
        found = read_committed(reported, 10.0)
    finally:
        reported.close()
    # Spark hands a source the end of a batch once it plans the next, so the report trails
    # the checkpoint by at most the last batch
    assert found is not None and first[-1] <= found.seq <= second[-1] and found.seq in seqs
    later = [s for s in first + second if s > found.seq]
    with Consumer(stream, config=cluster.config_path, group="spark") as after:
        assert [t.seq for t in after.take(len(later), timeout_s=20)] == later


def test_a_payload_tampered_inside_a_node_fails_verification(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    seqs = publish(cluster, "orders.tamper", 500)
    victim = seqs[250]
    cluster.tamper(2, "orders.tamper", victim)
    spec = cluster.config.node(2)
    node_2 = f"{spec.public_key}@127.0.0.1:{spec.client_port}"  # the nodes option with a key
    with pytest.raises(Exception, match="digest_mismatch") as failure:
        relay_read(spark, cluster, "orders.tamper", nodes=node_2).collect()
    assert f"seq {victim}" in str(failure.value) and "corrupt" in str(failure.value)

    flagged = relay_read(spark, cluster, "orders.tamper", nodes=node_2, verification="flag")
    assert [r.seq for r in flagged.where("not verified").collect()] == [victim]
    assert flagged.count() == 500

    first = cluster.config.node(1)
    node_1 = f"{first.public_key}@127.0.0.1:{first.client_port}"
    clean = relay_read(spark, cluster, "orders.tamper", nodes=node_1)
    assert clean.where("verified").count() == 500


def test_a_range_older_than_the_memory_ring_is_read_from_the_log(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    seqs = publish(cluster, "orders.old", 4 * BUFFER)
    rows = relay_read(spark, cluster, "orders.old", startingOffsets=seqs[0], minPartitions=3)
    assert sorted(r.seq for r in rows.collect()) == seqs
    assert rows.where("verified").count() == 4 * BUFFER


def test_a_node_killed_mid_stream_does_not_stop_the_query(
    spark: SparkSession, tmp_path: Path
) -> None:
    stream = "orders.kill"
    out = tmp_path / "rows"
    with LocalCluster(tmp_path / "cluster", nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        load = Load(cluster, [stream])
        rows = (
            spark.readStream.format("relay")
            .option("config", str(cluster.config_path))  # node 1 is asked first
            .option("stream", stream)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 2000)
            .load()
        )
        query = (
            rows.writeStream.foreachBatch(
                lambda batch, batch_id: (
                    batch.select("seq").write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
                )
            )
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(processingTime="300 milliseconds")
            .start()
        )
        try:
            wait_until(lambda: written(query) > 0, 90, query)
            cluster.stop(1, signal.SIGKILL)
            load.wait_for(len(load.acks) + 1000)
            acked = sorted(a.seq for a in load.finish())
            wait_until(lambda: written(query) >= len(acked), 90, query)
        finally:
            load.stop.set()
            query.stop()
        assert query.exception() is None, query.exception()
        seqs = [r.seq for r in spark.read.parquet(str(out)).collect()]
        assert len(seqs) == len(set(seqs))
        assert sorted(seqs) == acked


def written(query: Any) -> int:
    """Rows the query has handed to its sink so far."""
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def wait_until(condition: Any, timeout_s: float, query: Any) -> None:
    """Until ``condition()`` holds while the streaming ``query`` runs without an error."""
    failed, reached = until(
        lambda: (query.exception(), bool(condition())),
        lambda seen: seen[0] is not None or seen[1],
        timeout_s,
    )
    assert failed is None, failed
    assert reached, f"not reached within {timeout_s} s"
