"""How many rows per second a Spark streaming query reads from a local 3-node cluster.

The cluster is filled with ``--count`` txs first; then a query with ``Trigger.AvailableNow``
drains them, once per setting: the raw rows into Spark's ``noop`` sink (the source's own
cost: fetch, digest check, Arrow) and the example job's per-minute totals (JSON decode and
aggregation on top). ``rows/s`` is rows over the query's wall time (start, planning, commits;
the session start excluded); ``in batch`` is rows over the time Spark spent in its
micro-batches (``durationMs.triggerExecution``), the rate a long-running query sustains.
Usage: scripts/bench_spark.sh [--count N] [--partitions 1,2] [--max-per-trigger N]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import click
from pyspark.sql import SparkSession

import spark_consumer
from relay import Producer
from relay.runtime.local_cluster import LocalCluster
from spark_consumer.job import minute_totals

STREAM = "orders.bench"


def fill(cluster: LocalCluster, count: int) -> None:
    started = time.monotonic()
    with Producer(config=cluster.config_path, window=64, batch_max=256) as producer:
        for i in range(count):
            body = b'{"order": %d, "amount": %d.25, "note": "%s"}' % (i, i % 500, b"x" * 40)
            producer.send(STREAM, body)
        producer.flush()
    took = time.monotonic() - started
    print(f"filled {count} txs of ~100 bytes in {took:.1f} s", flush=True)


def drain(
    spark: SparkSession,
    cluster: LocalCluster,
    partitions: int,
    per_trigger: int,
    job: bool,
    folder: Path,
) -> tuple[int, float, float, int]:
    rows = (
        spark.readStream.format("relay")
        .option("config", str(cluster.config_path))
        .option("stream", STREAM)
        .option("startingOffsets", "earliest")
        .option("minPartitions", partitions)
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
    )
    checkpoint = tempfile.mkdtemp(dir=folder)
    if job:
        writer = rows.writeStream.foreachBatch(
            lambda batch, _id: minute_totals(batch, "amount").collect()
        )
    else:
        writer = rows.writeStream.format("noop")
    started = time.monotonic()
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    try:
        if not query.awaitTermination(900):
            raise RuntimeError("the query did not finish in 900 s")
    finally:
        query.stop()
    took = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    busy = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return sum(int(p["numInputRows"]) for p in progress), took, busy, len(progress)


@click.command()
@click.option("--count", type=int, default=150_000, show_default=True)
@click.option("--partitions", default="1,2", show_default=True, help="minPartitions to try.")
@click.option("--max-per-trigger", type=int, default=50_000, show_default=True)
@click.option("--runs", type=int, default=2, show_default=True, help="Runs per setting.")
def main(count: int, partitions: str, max_per_trigger: int, runs: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="relay-bench-spark-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with LocalCluster(folder / "cluster", nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        fill(cluster, count)
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark_consumer.register(spark)
        try:
            drain(spark, cluster, 1, 1000, False, folder)  # warm the Python workers up
            print(
                f"{'sink':<16} {'partitions':>10} {'rows':>8} {'batches':>7} "
                f"{'seconds':>8} {'rows/s':>9} {'in batch':>9}"
            )
            for job in (False, True):
                for parts in (int(p) for p in partitions.split(",")):
                    for _ in range(runs):
                        rows, took, busy, batches = drain(
                            spark, cluster, parts, max_per_trigger, job, folder
                        )
                        sink = "minute totals" if job else "noop"
                        print(
                            f"{sink:<16} {parts:>10} {rows:>8} {batches:>7} {took:>8.1f} "
                            f"{rows / took:>9,.0f} {rows / busy:>9,.0f}",
                            flush=True,
                        )
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
