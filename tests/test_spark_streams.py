"""The relay Spark source as a Kafka user drives it (issue 13): several streams by list or
pattern with offsets per stream, Kafka's column names, ending and trigger bounds, a checkpoint
that belongs to its streams, and the relay sink writing rows exactly once per batch."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_spark import publish, relay_read, wait_until
from waits import until

from relay import Consumer, Producer
from relay.core.flake import seq_unix_ms
from relay.runtime.local_cluster import LocalCluster
from spark_consumer import sink_commits
from spark_consumer.options import parse_options
from spark_consumer.source import RelayStreamReader

pytest.importorskip("pyspark")
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(cluster3: LocalCluster) -> LocalCluster:
    return cluster3


def stream_reader(cluster: LocalCluster, spark: SparkSession, **options: Any) -> Any:
    reader = spark.readStream.format("relay").option("config", str(cluster.config_path))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_a_kafka_users_query_runs_unchanged(spark: SparkSession, cluster: LocalCluster) -> None:
    seqs = publish(cluster, "kafka.cols", 30)
    rows = (
        relay_read(spark, cluster, "kafka.cols")
        .selectExpr(
            "CAST(key AS STRING)",
            "CAST(value AS STRING)",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestampType",
        )
        .orderBy("offset")
        .collect()
    )
    assert [r.offset for r in rows] == seqs and {r.topic for r in rows} == {"kafka.cols"}
    assert rows[0].value == '{"amount": 0}' and rows[0].key == "k0" and rows[1].key is None
    assert {(r.partition, r.timestampType) for r in rows} == {(0, 0)}


def test_several_streams_by_list_with_offsets_per_stream(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    eu, us = publish(cluster, "multi.eu", 40), publish(cluster, "multi.us", 30)
    df = (
        spark.read.format("relay")
        .option("config", str(cluster.config_path))
        .option("subscribe", "multi.eu,multi.us")
        .option("startingOffsets", f'{{"multi.eu": {eu[10]}, "multi.us": -2}}')
        .option("endingOffsets", f'{{"multi.eu": {eu[19]}, "multi.us": -1}}')
        .load()
    )
    got = sorted((r.stream, r.seq) for r in df.select("stream", "seq").collect())
    assert got == sorted([("multi.eu", s) for s in eu[10:20]] + [("multi.us", s) for s in us])
    first_wave_ms = seq_unix_ms(max(us)) + 1  # the second wave starts in a later millisecond
    now_ms = until(lambda: time.time() * 1000, lambda ms: ms > first_wave_ms, timeout_s=5)
    assert now_ms > first_wave_ms, "the clock never passed the first wave's last seq"
    us += publish(cluster, "multi.us", 10)
    upto = seq_unix_ms(us[30])  # every tx before the second wave's first millisecond
    before = relay_read(spark, cluster, "multi.us", endingTimestamp=upto).collect()
    assert [r.seq for r in before] == [s for s in us if seq_unix_ms(s) < upto] == us[:30]
    nothing = relay_read(spark, cluster, "multi.us", endingTimestamp=seq_unix_ms(us[0]))
    assert nothing.count() == 0  # a plan of no ranges reads no rows


def test_a_pattern_picks_up_streams_that_appear_later(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    first = publish(cluster, "pat.a", 20)
    publish(cluster, "other.x", 5)  # not matched
    rows = stream_reader(cluster, spark, subscribePattern="pat.*", startingOffsets="earliest")
    query = (
        rows.select("stream", "seq")
        .writeStream.format("memory")
        .queryName("pattern_rows")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:

        def read() -> list[tuple[str, int]]:
            return sorted((r.stream, r.seq) for r in spark.table("pattern_rows").collect())

        wait_until(lambda: len(read()) >= 20, 90, query)
        later = publish(cluster, "pat.b", 15)  # a new stream: read from its beginning
        wait_until(lambda: len(read()) >= 35, 90, query)
        assert read() == sorted([("pat.a", s) for s in first] + [("pat.b", s) for s in later])
    finally:
        query.stop()


def test_a_checkpoint_reused_for_another_stream_is_refused(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    publish(cluster, "ck.one", 10)
    publish(cluster, "ck.two", 10)
    checkpoint = str(tmp_path / "checkpoint")

    def run(stream: str) -> None:
        query = (
            stream_reader(cluster, spark, stream=stream, startingOffsets="earliest")
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(120), "the query did not finish"
        finally:
            query.stop()

    run("ck.one")
    with pytest.raises(Exception, match="belongs to one query"):
        run("ck.two")


def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay(cluster: LocalCluster) -> None:
    """The source's own admission (Spark passes one limit; the minimum is the source's)."""
    options = {
        "config": str(cluster.config_path),
        "stream": "trig.s",
        "minOffsetsPerTrigger": "50",
        "maxTriggerDelay": "60s",
    }
    publish(cluster, "trig.s", 1)
    reader = RelayStreamReader(parse_options(options, default_start="latest"), ())
    try:
        start = reader.initialOffset()
        publish(cluster, "trig.s", 10)
        assert reader.latestOffset(start, ReadAllAvailable()) == start  # 10 < 50: wait
        reader.waiting_since = time.monotonic() - 61  # maxTriggerDelay has passed
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end["trig.s"] > start["trig.s"]
        publish(cluster, "trig.s", 60)
        assert reader.latestOffset(end, ReadAllAvailable())["trig.s"] > end["trig.s"]
    finally:
        reader.stop()


def copy_in_batches(
    spark: SparkSession,
    cluster: LocalCluster,
    source: str,
    checkpoint: Path,
    columns: list[str],
    **sink_options: str,
) -> None:
    """Copy ``source`` from earliest into relay in batches of 100, ``columns`` selected, as
    one streaming query with ``checkpoint`` that runs until it has all there is."""
    writer = (
        stream_reader(
            cluster, spark, stream=source, startingOffsets="earliest", maxOffsetsPerTrigger=100
        )
        .selectExpr(*columns)
        .writeStream.format("relay")
        .option("config", str(cluster.config_path))
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(180), "the copy did not finish"
    assert query.exception() is None, query.exception()


def forget_last_batch(checkpoint: Path) -> None:
    """Forget the third batch's commit: the query's restart replays it."""
    for name in ("2", ".2.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)


def test_rows_written_to_relay_arrive_once_even_when_a_batch_is_replayed(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    frame = spark.createDataFrame(
        [(f"v{i}", f"k{i % 3}", [("h", b"\x01")], "sink.batch") for i in range(25)],
        "value STRING, key STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, topic STRING",
    )
    frame.write.format("relay").option("config", str(cluster.config_path)).mode("append").save()
    with Consumer("sink.batch", config=cluster.config_path) as consumer:
        txs = consumer.take(25, timeout_s=20)
    assert sorted(t.payload for t in txs) == sorted(f"v{i}".encode() for i in range(25))
    assert {t.key for t in txs} == {b"k0", b"k1", b"k2"}
    assert {t.headers for t in txs} == {(("h", b"\x01"),)}

    source = publish(cluster, "sink.in", 300)
    checkpoint = tmp_path / "checkpoint"
    copy = functools.partial(copy_in_batches, spark, cluster, "sink.in", checkpoint)
    copy(["value", "key", "'sink.out' AS stream"])
    forget_last_batch(checkpoint)
    copy(["value", "key", "'sink.out' AS stream"])
    with Consumer("sink.out", config=cluster.config_path) as consumer:
        copied = consumer.take(400, timeout_s=5)
    assert len(copied) == len(source) == 300  # the replayed batch's 100 rows came back once
    with Producer(config=cluster.config_path) as producer:  # the sink's acks were quorum acks
        assert producer.publish("sink.out", b"after").seq > copied[-1].seq


@pytest.fixture
def small_window_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster whose dedup window holds 20,000 ids per stream (200,000 by default)."""
    with LocalCluster(tmp_path / "c", nodes=3, overrides={"dedup_keys_max": 20_000}) as made:
        made.start()
        made.wait_serving()
        yield made


def test_a_batch_replayed_after_five_dedup_windows_of_later_messages_adds_nothing(
    spark: SparkSession, small_window_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The dedup window had long forgotten the batch's ids, and a replay published copies;
    now each named write keeps commit records."""
    cluster = small_window_cluster
    publish(cluster, "late.in", 300)
    checkpoint = tmp_path / "checkpoint"
    copy = functools.partial(copy_in_batches, spark, cluster, "late.in", checkpoint)
    copy(["value"], stream="late.out")
    # a batch write named "w1" that died after its begin record and 10 of its 25 rows
    with Producer(config=cluster.config_path, producer_id="spark-w1-0-0") as crashed:
        sink_commits.write(crashed, "late.out.__sink.w1", sink_commits.Task("w1", 0, 0), None)
        for msg_id in range(1, 11):
            crashed.send("late.out", b"w%d" % msg_id, msg_id)
        crashed.flush()
    with Producer(config=cluster.config_path) as flood:
        for _ in range(100_000):
            flood.send("late.out", b"later")
        flood.flush()
        after_flood = flood.publish("late.out", b"end of the flood").seq
    forget_last_batch(checkpoint)
    copy(["value"], stream="late.out")
    rows = spark.createDataFrame([(b"w%d" % i,) for i in range(1, 26)], "value BINARY")
    (
        rows.coalesce(1)
        .write.format("relay")
        .option("config", str(cluster.config_path))
        .option("stream", "late.out")
        .option("producerId", "w1")
        .mode("append")
        .save()
    )
    with Consumer("late.out", config=cluster.config_path, start=after_flood + 1) as consumer:
        new = consumer.take(100, timeout_s=5)
    assert [t.payload for t in new] == [b"w%d" % i for i in range(11, 26)]  # the rest of w1
    other = spark.createDataFrame([(b"other",)], "value BINARY").coalesce(1).write
    with pytest.raises(Exception, match="already published other rows"):  # w1 reused
        (
            other.format("relay")
            .option("config", str(cluster.config_path))
            .option("stream", "late.out")
            .option("producerId", "w1")
            .mode("append")
            .save()
        )


def test_the_example_job_publishes_its_totals_into_a_relay_stream(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """The job's second stage, run as a user runs it: its own Spark, until the data read."""
    publish(cluster, "job.orders", 200)  # amounts i % 10: 900 in all
    args = ["--config", str(cluster.config_path), "--stream", "job.orders", "--available-now"]
    done = subprocess.run(
        [sys.executable, "-m", "spark_consumer.job", *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.split("summary ", 1)[1])
    assert (summary["txs"], summary["total"], summary["bad"]) == (200, 900.0, 0)
    with Consumer("job.orders.minutes", config=cluster.config_path) as consumer:
        rows = [json.loads(tx.payload) for tx in consumer.take(1000, timeout_s=3)]
    assert rows and sum(r["txs"] for r in rows) == 200 and sum(r["total"] for r in rows) == 900
