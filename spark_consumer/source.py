"""The ``relay`` Spark data source: ``spark.read.format("relay")`` and
``spark.readStream.format("relay")``.

How this works: offsets are seqs, ``{"seq": S}`` meaning "every verified tx up to S". Planning
(``latestOffset``, ``partitions``) asks a node for a span: where the range ends under the read
limit, and where to cut it, with the rolling digest at each cut. Each Spark task reads its
range from a node of its own (ranges are spread over the nodes) and proves it against those
digests before the batch can commit (see ``spark_consumer.ranges``). A micro-batch is a closed
seq range, so a batch replayed from the checkpoint reads exactly the same transactions.

Spark runs planning and reading in different Python processes, on pickled copies of these
objects: they hold options only, and open connections inside the call that needs them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from relay.client.fetcher import Fetcher
from relay.core.flake import seq_unix_ms
from spark_consumer import ranges
from spark_consumer.options import SourceOptions, parse_options
from spark_consumer.progress import report_progress

# as Kafka's source: each header a struct of its name ("key") and its value
HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

SCHEMA = StructType(
    [
        StructField("stream", StringType()),
        StructField("seq", LongType()),
        StructField("timestamp", TimestampType()),  # when the coordinator assigned the seq
        StructField("origin", IntegerType()),  # the coordinator's node id
        StructField("producer_id", StringType()),
        StructField("msg_id", LongType()),  # the producer's id for the tx (dedup key)
        StructField("key", BinaryType()),  # null when the producer sent no key
        StructField("headers", ArrayType(HEADER)),  # (name, value) pairs in order
        StructField("payload", BinaryType()),
        StructField("digest", BinaryType()),  # the rolling blake3 digest at this tx
        StructField("verified", BooleanType()),  # false only with verification=flag
    ]
)

ARROW_SCHEMA = pa.schema(
    [
        ("stream", pa.string()),
        ("seq", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("origin", pa.int32()),
        ("producer_id", pa.string()),
        ("msg_id", pa.int64()),
        ("key", pa.binary()),
        ("headers", ARROW_HEADERS),
        ("payload", pa.binary()),
        ("digest", pa.binary()),
        ("verified", pa.bool_()),
    ]
)


class RelayDataSource(DataSource):
    """Verified transactions of one relay stream, one row each."""

    @classmethod
    def name(cls) -> str:
        return "relay"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RelayBatchReader(parse_options(self.options, default_start="earliest"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RelayStreamReader(parse_options(self.options, default_start="latest"))


class RangePartition(InputPartition):
    def __init__(self, seq_range: ranges.SeqRange) -> None:
        super().__init__(seq_range.index)
        self.seq_range = seq_range


class RelayBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        fetcher = Fetcher(o.stream, list(o.nodes), pair=o.pair())
        try:
            after = ranges.resolve_start(fetcher, o.starting, o.read_timeout_s)
            planned = ranges.plan(fetcher, after, o.ending, o, exact=False)
        finally:
            fetcher.close()
        return [RangePartition(r) for r in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_partition(self.options, partition.seq_range)


class RelayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.target = 0  # with Trigger.AvailableNow: read no further than this seq
        self._fetcher: Fetcher | None = None

    def initialOffset(self) -> dict[str, int]:
        o = self.options
        return {"seq": ranges.resolve_start(self._planner(), o.starting, o.read_timeout_s)}

    def prepareForTriggerAvailableNow(self) -> None:
        o = self.options
        self.target = ranges.resolve_start(self._planner(), "latest", o.read_timeout_s)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger:
            return ReadMaxRows(self.options.max_per_trigger)
        return super().getDefaultReadLimit()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        after = int(start["seq"])
        if self.target and after >= self.target:
            return {"seq": after}
        max_txs = limit.max_rows if isinstance(limit, ReadMaxRows) else 0
        o = self.options
        spanned = ranges.ask_span(
            self._planner(), after, self.target, max_txs, 1, False, o.read_timeout_s
        )
        return {"seq": spanned.bounds[-1][0] if spanned.bounds else after}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        after, upto = int(start["seq"]), int(end["seq"])
        if upto <= after:
            return []
        planned = ranges.plan(self._planner(), after, upto, self.options, exact=True)
        return [RangePartition(r) for r in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_partition(self.options, partition.seq_range)

    def commit(self, end: dict[str, int]) -> None:
        """With option ``group``, report ``end`` as the group's committed position, so that
        ``relay groups describe`` shows how far the query has read. Best effort: the
        checkpoint holds the offsets, and a report that fails is logged, not raised."""
        if self.options.group:
            report_progress(self._planner(), self.options, int(end["seq"]))

    def stop(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None

    def _planner(self) -> Fetcher:
        if self._fetcher is None:
            self._fetcher = Fetcher(
                self.options.stream, list(self.options.nodes), pair=self.options.pair()
            )
        return self._fetcher

    def __getstate__(self) -> dict[str, object]:
        return {"options": self.options, "target": self.target, "_fetcher": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)


def read_partition(options: SourceOptions, seq_range: ranges.SeqRange) -> Iterator[pa.RecordBatch]:
    fetcher = Fetcher(options.stream, options.nodes_from(seq_range.index), pair=options.pair())
    try:
        for chunk in ranges.read(fetcher, seq_range, options):
            yield to_arrow(options.stream, chunk)
    finally:
        fetcher.close()


def to_arrow(stream: str, chunk: ranges.Chunk) -> pa.RecordBatch:
    seqs, origins, pids, mids, payloads, keys, headers, digests = zip(*chunk.rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([stream] * len(seqs), pa.string()),
            pa.array(seqs, pa.int64()),
            pa.array([seq_unix_ms(s) * 1000 for s in seqs], pa.int64()).cast(
                pa.timestamp("us", tz="UTC")
            ),
            pa.array(origins, pa.int32()),
            pa.array(pids, pa.string()),
            pa.array(mids, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array([[{"key": n, "value": v} for n, v in h] for h in headers], ARROW_HEADERS),
            pa.array(payloads, pa.binary()),
            pa.array(digests, pa.binary()),
            pa.array(chunk.verified, pa.bool_()),
        ],
        schema=ARROW_SCHEMA,
    )
