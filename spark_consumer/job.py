"""Example job: per-minute counts and sums of a relay stream's JSON payloads, kept in Parquet.

    python -m spark_consumer.job --config cluster.toml --stream orders --out /tmp/orders-minutes
    spark-submit --master spark://host:7077 spark_consumer/job.py --nodes h1:7101,h2:7101 ...

Each micro-batch's per-minute totals go to ``OUT/minutes/batch=<id>``, written in overwrite
mode: a batch replayed after a restart (same id, same seq range, same rows) replaces its own
output, so every transaction counts exactly once. ``OUT/checkpoint`` holds the offsets. The
per-minute totals are the sum over batches, which is what the summary at the end prints.
Payloads are JSON objects; the field named by ``--field`` (default ``amount``) is summed, and
payloads that are not JSON or lack a number there are counted as ``bad``.

The second stage publishes the same per-batch totals into the relay stream
``<stream>.minutes`` (``--totals-stream``) through the relay sink, one JSON transaction per
minute and batch, under producer ids named by the query and the batch: a replayed batch's rows
are kept once.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

import spark_consumer

TOTALS_SCHEMA = "minute TIMESTAMP, txs BIGINT, total DOUBLE, bad BIGINT"


def minute_totals(rows: DataFrame, field: str) -> DataFrame:
    """Per-minute ``txs``, ``total`` (the sum of ``field``) and ``bad`` (unreadable payloads)."""
    value = F.get_json_object(F.col("payload").cast("string"), f"$.{field}").cast("double")
    return (
        rows.select(F.date_trunc("minute", "timestamp").alias("minute"), value.alias("value"))
        .groupBy("minute")
        .agg(
            F.count(F.lit(1)).alias("txs"),
            F.sum("value").alias("total"),
            F.count_if(F.col("value").isNull()).alias("bad"),
        )
    )


def start(
    spark: SparkSession,
    source: dict[str, str],
    out: Path,
    field: str,
    trigger_ms: int,
    available_now: bool,
    totals_stream: str | None = None,
) -> StreamingQuery:
    """Start the streaming query; ``source`` holds the relay source's options. With
    ``totals_stream``, each batch's per-minute totals are also published there."""
    minutes = str(out / "minutes")

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        totals = sorted(minute_totals(batch, field).collect(), key=lambda r: r.minute)
        frame = spark.createDataFrame(totals, schema=TOTALS_SCHEMA)
        frame.write.mode("overwrite").parquet(f"{minutes}/batch={batch_id}")
        if totals_stream:  # the second stage: the same totals as transactions of a stream
            publish_totals(frame, source, totals_stream)
        print(f"batch {batch_id}: {sum(r.txs for r in totals)} txs", flush=True)

    rows = spark.readStream.format("relay").options(**source).load()
    writer = (
        rows.writeStream.foreachBatch(write_batch)
        .option("checkpointLocation", str(out / "checkpoint"))
        .queryName("relay-minutes")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_ms} milliseconds")
    query = writer.start()
    print(f"query started: {rows_source(source)} -> {out}", flush=True)
    return query


def publish_totals(frame: DataFrame, source: dict[str, str], stream: str) -> None:
    """Publish a batch's totals into a relay stream, one JSON object per minute, keyed by the
    minute, through the relay sink. Inside ``foreachBatch`` the sink names the write by the
    query and the batch, and the rows come sorted by minute: a replayed batch writes the same
    rows under the same producer and message ids, so the cluster keeps them once (within its
    dedup window). A minute that spans batches has a row from each: sum ``txs`` and ``total``
    by ``minute``."""
    target = {k: v for k, v in source.items() if k in ("config", "nodes", "clientKey")}
    rows = frame.select(
        F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'").alias("key"),
        F.to_json(
            F.struct(
                F.date_format("minute", "yyyy-MM-dd'T'HH:mm'Z'").alias("minute"),
                "txs",
                "total",
                "bad",
            )
        ).alias("value"),
    )
    rows.write.format("relay").options(**target).option("stream", stream).mode("append").save()


def rows_source(source: dict[str, str]) -> str:
    return f"relay stream {source['stream']!r} from {source.get('startingOffsets', 'latest')}"


def read_totals(spark: SparkSession, out: Path) -> DataFrame:
    """The per-minute totals over every batch written so far."""
    return (
        spark.read.parquet(str(out / "minutes"))
        .groupBy("minute")
        .agg(F.sum("txs").alias("txs"), F.sum("total").alias("total"), F.sum("bad").alias("bad"))
        .orderBy("minute")
    )


def wait_idle(query: StreamingQuery, idle_s: float, limit_s: float) -> None:
    """Return once no rows arrived for ``idle_s`` after the first ones (or ``limit_s`` passed)."""
    started = last_rows = time.monotonic()
    last_batch, seen = -1, False
    while query.isActive and time.monotonic() - started < limit_s:
        for progress in query.recentProgress:
            if progress["batchId"] > last_batch:
                last_batch = progress["batchId"]
                if progress["numInputRows"] > 0:
                    seen, last_rows = True, time.monotonic()
        if seen and time.monotonic() - last_rows > idle_s:
            return
        time.sleep(0.5)


def session(master: str | None, app: str) -> SparkSession:
    builder = SparkSession.builder.appName(app)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: we pick the master
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need relay installed
        master = master or "local[2]"
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
    elif master:
        builder = builder.master(master)
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@click.command()
@click.option("--config", help="Cluster config file (readable on the driver and executors).")
@click.option("--nodes", help="Comma-separated host:port client addresses, instead of --config.")
@click.option("--stream", required=True, help="The stream to read.")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Output folder.")
@click.option("--field", default="amount", show_default=True, help="JSON field to sum.")
@click.option(
    "--from",
    "starting",
    default="earliest",
    show_default=True,
    help="earliest, latest or a seq (only for a new checkpoint).",
)
@click.option("--max-per-trigger", type=int, help="At most this many txs per micro-batch.")
@click.option("--trigger-ms", type=int, default=1000, show_default=True)
@click.option("--available-now", is_flag=True, help="Read what is there now, then stop.")
@click.option(
    "--until-idle",
    type=float,
    default=10.0,
    show_default=True,
    help="Stop after this many seconds without new txs.",
)
@click.option(
    "--limit",
    type=float,
    default=3600.0,
    show_default=True,
    help="Stop after this many seconds in any case.",
)
@click.option(
    "--totals-stream",
    help="Also publish each batch's per-minute totals into this relay stream "
    "(default: <stream>.minutes; '' for none).",
)
@click.option("--master", help="Spark master URL (default local[2]; spark-submit's own wins).")
def main(
    config: str | None,
    nodes: str | None,
    stream: str,
    out: Path,
    field: str,
    starting: str,
    max_per_trigger: int | None,
    trigger_ms: int,
    available_now: bool,
    until_idle: float,
    limit: float,
    totals_stream: str | None,
    master: str | None,
) -> None:
    """Per-minute counts and sums of a relay stream's JSON payloads, written to Parquet."""
    source = {"stream": stream, "startingOffsets": starting}
    if config:
        source["config"] = str(Path(config).resolve())
    if nodes:
        source["nodes"] = nodes
    if max_per_trigger:
        source["maxOffsetsPerTrigger"] = str(max_per_trigger)
    spark = session(master, f"relay-minutes-{stream}")
    try:
        spark_consumer.register(spark)
        totals = f"{stream}.minutes" if totals_stream is None else totals_stream
        query = start(spark, source, out, field, trigger_ms, available_now, totals)
        try:
            if available_now:
                query.awaitTermination(int(limit))
            else:
                wait_idle(query, until_idle, limit)
        finally:
            query.stop()
        if query.exception() is not None:
            raise click.ClickException(f"the streaming query failed: {query.exception()}")
        report(spark, out, stream)
    finally:
        spark.stop()


def report(spark: SparkSession, out: Path, stream: str) -> None:
    if not (out / "minutes").exists():
        click.echo(f"no transactions read from {stream!r}")
        summary: dict[str, Any] = {"stream": stream, "txs": 0, "total": 0.0, "bad": 0}
    else:
        totals = read_totals(spark, out).collect()
        click.echo(f"{'minute (UTC)':<20} {'txs':>8} {'total':>14} {'bad':>5}")
        for row in totals:
            click.echo(
                f"{row.minute:%Y-%m-%d %H:%M}     {row.txs:>8} {row.total or 0:>14,.2f} "
                f"{row.bad:>5}"
            )
        summary = {
            "stream": stream,
            "txs": sum(r.txs for r in totals),
            "total": sum(r.total or 0 for r in totals),
            "bad": sum(r.bad for r in totals),
        }
    click.echo(f"summary {json.dumps(summary)}")


if __name__ == "__main__":
    main(sys.argv[1:])
