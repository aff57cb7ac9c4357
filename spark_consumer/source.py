"""The ``relay`` Spark data source: ``spark.read.format("relay")`` and
``spark.readStream.format("relay")``, over one stream, a list or a pattern.

How this works: an offset names a seq per stream, ``{"orders.eu": S}`` meaning "every verified
tx of orders.eu up to S" (``spark_consumer.streams``). Planning (``latestOffset``,
``partitions``) asks a node of each stream for a span: where the range ends under the read
limit, and where to cut it, with the rolling digest at each cut. Each Spark task reads one
stream's range from a node of its own (ranges are spread over the nodes) and proves it against
those digests before the batch can commit (``spark_consumer.ranges``). A micro-batch is a
closed seq range per stream, so a batch replayed from the checkpoint reads exactly the same
transactions.

Spark runs planning and reading in different Python processes, on pickled copies of these
objects: they hold options only, and open connections inside the call that needs them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructField, StructType

from relay import errors
from relay.client.anchor import Anchor
from relay.client.fetcher import Fetcher
from relay.wire.replies import TxRow
from spark_consumer import ranges
from spark_consumer.options import SourceOptions, parse_options
from spark_consumer.progress import report_progress
from spark_consumer.schema import SCHEMA, to_arrow
from spark_consumer.sink import RelayStreamWriter, RelayWriter, parse_sink_options
from spark_consumer.streams import read_offset, subscribed
from spark_consumer.typed import stream_columns

FETCHERS_MAX = 64


class RelayDataSource(DataSource):
    """Verified transactions of relay streams, one row each; and rows published as
    transactions (``df.write.format("relay")``)."""

    @classmethod
    def name(cls) -> str:
        return "relay"

    def schema(self) -> StructType:
        """relay's columns, and a typed stream's fields after them (``spark_consumer.typed``)."""
        o = parse_options(self.options, default_start="earliest")
        typed = stream_columns(o.streams, list(o.nodes), o.pair(), set(SCHEMA.fieldNames()))
        return StructType([*SCHEMA.fields, *typed])

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options, default_start="earliest")
        return RelayBatchReader(options, _typed(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_options(self.options, default_start="latest")
        if options.compacted_view:
            raise ValueError("relay source: compactedView is for batch reads (spark.read)")
        return RelayStreamReader(options, _typed(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RelayWriter(parse_sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RelayStreamWriter(parse_sink_options(self.options, schema))


def _typed(schema: StructType) -> tuple[StructField, ...]:
    """The typed columns of the schema a read was planned with (after relay's own)."""
    return tuple(schema.fields[len(SCHEMA.fields) :])


class RangePartition(InputPartition):
    def __init__(self, stream: str, seq_range: ranges.SeqRange, index: int) -> None:
        super().__init__(index)
        self.stream = stream
        self.seq_range = seq_range
        self.index = index  # across every stream's ranges: spreads the tasks over the nodes


class TablePartition(InputPartition):
    """Every planned range of one stream, read in one task as a table (``compactedView``)."""

    def __init__(self, stream: str, seq_ranges: list[ranges.SeqRange], index: int) -> None:
        super().__init__(index)
        self.stream = stream
        self.seq_ranges = seq_ranges
        self.index = index


class Planner:
    """A fetcher per stream, opened when first asked for (driver side only); at most
    ``FETCHERS_MAX`` stay open, so a pattern over thousands of streams holds few sockets."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.fetchers: dict[str, Fetcher] = {}  # in order of last use

    def of(self, stream: str) -> Fetcher:
        fetcher = self.fetchers.pop(stream, None)
        if fetcher is None:
            o = self.options
            fetcher = Fetcher(stream, list(o.nodes), pair=o.pair())
            if len(self.fetchers) >= FETCHERS_MAX:
                self.fetchers.pop(next(iter(self.fetchers))).close()
        self.fetchers[stream] = fetcher
        return fetcher

    def start(self, stream: str, position: str | int) -> int:
        return ranges.resolve_start(self.of(stream), position, self.options.read_timeout_s)

    def plan(
        self, after: dict[str, int], upto: dict[str, int], exact: bool
    ) -> list[RangePartition]:
        """Partitions for every stream's range (``after[s]``, ``upto[s]``]."""
        found: list[RangePartition] = []
        for stream in sorted(upto):
            if exact and upto[stream] <= after[stream]:
                continue
            fetcher = self.of(stream)
            planned = ranges.plan(fetcher, after[stream], upto[stream], self.options, exact)
            self.confirm(stream, fetcher, planned)
            found += [RangePartition(stream, r, len(found) + i) for i, r in enumerate(planned)]
        return found

    def confirm(self, stream: str, fetcher: Fetcher, planned: list[ranges.SeqRange]) -> None:
        """A second replica holds the digest the planning node gave at each range's end, as a
        ``Consumer`` anchors its first batch: equal digests at a seq prove equal histories, so
        a node that rewrote a stream consistently cannot plan (and then serve) its version.
        ``DigestMismatchError`` if one disagrees; ``Unreachable`` if none confirms in time."""
        o = self.options
        anchor = Anchor(stream, list(o.nodes), o.read_timeout_s, o.pair())
        try:
            for part in planned:  # None: the other replica compacted the tx away
                seqs, digests = [part.digest_seq], [part.digest]
                if anchor.confirm(fetcher.node, seqs, digests, o.read_timeout_s) is False:
                    raise ranges.Unreachable(
                        errors.UNAVAILABLE,
                        f"{stream!r}: no second replica confirmed seq {part.digest_seq} within "
                        f"{o.read_timeout_s:g} s (a plan is checked against two replicas)",
                    )
        finally:
            anchor.close()

    def close(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.close()
        self.fetchers.clear()


class RelayBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, typed: tuple[StructField, ...]) -> None:
        self.options = options
        self.typed = typed

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        planner = Planner(o)
        try:
            streams = subscribed(o)
            after = {s: planner.start(s, o.start_of(s)) for s in streams}
            planned = planner.plan(after, {s: o.end_of(s) for s in streams}, exact=False)
        finally:
            planner.close()
        if not o.compacted_view:
            return planned
        by_stream: dict[str, list[ranges.SeqRange]] = {}
        for part in planned:
            if isinstance(part, RangePartition):
                by_stream.setdefault(part.stream, []).append(part.seq_range)
        return [TablePartition(s, r, i) for i, (s, r) in enumerate(sorted(by_stream.items()))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.typed)


class RelayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, typed: tuple[StructField, ...]) -> None:
        self.options = options
        self.typed = typed
        self.targets: dict[str, int] | None = None  # Trigger.AvailableNow: read up to these
        self.waiting_since = time.monotonic()  # the last batch, for minOffsetsPerTrigger
        self.turn = 0  # which stream's turn it is to be asked first (a shared read limit)
        self._planner: Planner | None = None

    def initialOffset(self) -> dict[str, int]:
        o = self.options
        return {s: self.planner.start(s, o.start_of(s)) for s in subscribed(o)}

    def prepareForTriggerAvailableNow(self) -> None:
        self.targets = {s: self.planner.start(s, "latest") for s in subscribed(self.options)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_per_trigger:
            return ReadMaxRows(self.options.max_per_trigger)
        return super().getDefaultReadLimit()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        o = self.options
        after = read_offset(o, start)
        for stream in subscribed(o):  # a stream that appeared since: from its beginning
            after.setdefault(stream, 0)
        streams = sorted(after)
        if self.targets is not None:  # AvailableNow: only what was there when it began
            streams = [s for s in streams if after[s] < self.targets.get(s, 0)]
        self.turn += 1
        if streams:  # under a shared limit, a different stream goes first each trigger
            k = self.turn % len(streams)
            streams = streams[k:] + streams[:k]
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else 0
        end, counted = dict(after), 0
        for i, stream in enumerate(streams):
            share = -(-(budget - counted) // (len(streams) - i)) if budget else 0
            if budget and share <= 0:
                break
            target = self.targets.get(stream, 0) if self.targets is not None else 0
            spanned = ranges.ask_span(
                self.planner.of(stream), after[stream], target, share, 1, o.read_timeout_s
            )
            if spanned.bounds:
                end[stream] = spanned.bounds[-1][0]
                counted += spanned.bounds[-1][2]
        waited = time.monotonic() - self.waiting_since
        if o.min_per_trigger and counted < o.min_per_trigger and waited < o.max_trigger_delay_s:
            return after  # too few yet: wait for more, up to maxTriggerDelay
        if end != after:
            self.waiting_since = time.monotonic()
        return end

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        after, upto = read_offset(self.options, start), read_offset(self.options, end)
        for stream in upto:
            after.setdefault(stream, 0)  # a stream new in this batch is read from its start
        return self.planner.plan(after, upto, exact=True)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.typed)

    def commit(self, end: dict[str, int]) -> None:
        """With option ``group``, report each stream's end as the group's committed position,
        so that ``relay groups describe`` shows how far the query has read. Best effort: the
        checkpoint holds the offsets, and a report that fails is logged, not raised."""
        if self.options.group:
            for stream, seq in read_offset(self.options, end).items():
                report_progress(self.planner.of(stream), self.options, seq)

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        return self._planner

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_planner": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)


def read_partition(
    options: SourceOptions, partition: InputPartition, typed: tuple[StructField, ...] = ()
) -> Iterator[pa.RecordBatch]:
    """The rows of one planned range. Spark reads a plan of no ranges (nothing to read) as one
    partition of its own making, which holds no rows."""
    if isinstance(partition, TablePartition):
        yield from read_table(options, partition, typed)
        return
    if not isinstance(partition, RangePartition):
        return
    order = options.nodes_from(partition.index)
    fetcher = Fetcher(partition.stream, order, pair=options.pair())
    try:
        for chunk in ranges.read(fetcher, partition.seq_range, options):
            yield to_arrow(partition.stream, chunk.rows, chunk.verified, typed)
    finally:
        fetcher.close()


def read_table(
    options: SourceOptions, partition: TablePartition, typed: tuple[StructField, ...]
) -> Iterator[pa.RecordBatch]:
    """A stream's ranges read in order, as a table: the newest row of each key, less the keys
    whose newest row is a tombstone (an empty payload); rows without a key are no table's."""
    newest: dict[bytes, tuple[TxRow, bool]] = {}
    fetcher = Fetcher(partition.stream, options.nodes_from(partition.index), pair=options.pair())
    try:
        for seq_range in partition.seq_ranges:
            for chunk in ranges.read(fetcher, seq_range, options):
                for row, ok in zip(chunk.rows, chunk.verified, strict=True):
                    if row.key is not None:
                        newest[row.key] = (row, ok)
    finally:
        fetcher.close()
    live = sorted((v for v in newest.values() if v[0].payload), key=lambda v: v[0].seq)
    for at in range(0, len(live), options.fetch_rows):
        part = live[at : at + options.fetch_rows]
        yield to_arrow(partition.stream, [r for r, _ in part], [ok for _, ok in part], typed)
