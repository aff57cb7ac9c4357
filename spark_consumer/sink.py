"""The ``relay`` Spark sink: ``df.write.format("relay")`` and ``writeStream.format("relay")``
publish rows as transactions, exactly once per (query, batch, partition).

How this works: each task publishes its rows as one producer whose id names the query, the
micro-batch and the partition, numbering the rows 1, 2, ... as message ids. A task that Spark
retries, or a micro-batch replayed after a restart (same batch id, same rows, same
partitions), sends the same ids again, and the nodes answer with the seqs they gave the first
time instead of publishing copies (invariant 6), within the cluster's dedup window
(``dedup_window_ms``, 2 minutes by default); past it, a named write's commit records
(``sink_commits``) say what is there. Columns as Kafka's sink takes them: ``value`` (or
``payload``; binary or string), optional ``key``, ``headers`` (array of struct key, value) and
``stream`` (or ``topic``) naming each row's stream; without one, option ``stream`` does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack
from blake3 import blake3
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from relay.core.routing import stream_name_problem
from spark_consumer import sink_commits

SINK_OPTIONS = {
    "config": "a cluster config file (TOML) readable on the driver and every executor",
    "nodes": "comma-separated host:port (KEY@host:port for CURVE) client addresses of nodes",
    "clientKey": 'a .key_secret file for a cluster with client_auth = "keys"',
    "stream": "the stream of rows that have no stream (or topic) column or a null there",
    "publishTimeoutMs": "how long a task keeps trying to publish its rows",
    "producerId": "names this write, so that writing the same rows again under the same name "
    "(a foreachBatch replay) adds nothing; give each write of one batch its own (default: the "
    "streaming query's id, else a new name per write)",
    "commitStream": "where a named write keeps its commit records (default: "
    "<stream>.__sink.<name>; a stream the config's patterns cover; empty: none, and a replay "
    "past the dedup window publishes again)",
}
SPARKS_OWN = {"checkpointlocation", "path"}  # options Spark hands every writer
STREAM_COLUMNS = ("stream", "topic")
VALUE_COLUMNS = ("value", "payload")


@dataclass(frozen=True, slots=True)
class SinkOptions:
    config: str | None
    nodes: tuple[str, ...]
    client_key: str | None
    stream: str  # "" when every row names its stream
    value: str  # the column holding each row's payload
    key: str | None  # the columns that are there, or None
    headers: str | None
    stream_column: str | None
    timeout_s: float
    name: str  # option producerId: names every write of these rows ("" if not given)
    job: str  # names this write when nothing else does (a new id per write)
    commit_stream: str | None  # option commitStream (None if not given, "" for none)


@dataclass
class Published(WriterCommitMessage):
    rows: int


def parse_sink_options(raw: Mapping[str, str], schema: StructType) -> SinkOptions:
    by_lower = {name.lower(): name for name in SINK_OPTIONS}
    options = {
        by_lower.get(str(k).lower(), str(k)): str(v)
        for k, v in raw.items()
        if str(k).lower() not in SPARKS_OWN
    }
    unknown = sorted(set(options) - set(SINK_OPTIONS))
    if unknown:
        known = "\n".join(f"  {name}: {what}" for name, what in SINK_OPTIONS.items())
        raise ValueError(f"relay sink: unknown option {unknown[0]!r}. Options:\n{known}")
    config, nodes = options.get("config"), options.get("nodes")
    if bool(config) == bool(nodes):
        raise ValueError("relay sink: give exactly one of option 'config' or option 'nodes'")
    types = {f.name: f.dataType for f in schema.fields}
    value = next((c for c in VALUE_COLUMNS if c in types), None)
    if value is None or not isinstance(types[value], BinaryType | StringType):
        raise ValueError("relay sink: the rows need a binary or string column 'value'")
    stream_column = next((c for c in STREAM_COLUMNS if c in types), None)
    stream = options.get("stream", "")
    if stream and (problem := stream_name_problem(stream)):
        raise ValueError(f"relay sink: option 'stream': {problem}")
    if not stream and stream_column is None:
        raise ValueError("relay sink: give option 'stream', or a column 'stream' (or 'topic')")
    commits = options.get("commitStream")
    if commits and (problem := stream_name_problem(commits)):
        raise ValueError(f"relay sink: option 'commitStream': {problem}")
    if commits and commits == stream:
        raise ValueError("relay sink: option 'commitStream' must not be the stream of the rows")
    timeout_ms = options.get("publishTimeoutMs", "30000")
    if not timeout_ms.isdigit() or int(timeout_ms) < 100:
        raise ValueError("relay sink: option 'publishTimeoutMs' is a number of ms, at least 100")
    return SinkOptions(
        config=config or None,
        nodes=tuple(n.strip() for n in (nodes or "").split(",") if n.strip()),
        client_key=options.get("clientKey") or None,
        stream=stream,
        value=value,
        key="key" if "key" in types else None,
        headers="headers" if "headers" in types else None,
        stream_column=stream_column,
        timeout_s=int(timeout_ms) / 1000,
        name=options.get("producerId", ""),
        job=uuid.uuid4().hex,
        commit_stream=commits,
    )


def publish_rows(options: SinkOptions, rows: Iterator[Any], streaming: bool) -> Published:
    """Publish one task's rows under the producer id of its (write, batch, partition): the
    write is named by option ``producerId``, else by the streaming query, else anew. A named
    write keeps commit records (``sink_commits``), so a task run again publishes only what is
    not there, however long after. The rows of a partition must come in the same order when a
    batch is replayed (they do from the relay source, whose batches are fixed ranges; sort
    what comes from elsewhere)."""
    from relay import Producer

    context = TaskContext.get()
    assert context is not None, "a relay sink's write runs in a Spark task"
    query = context.getLocalProperty("sql.streaming.queryId")
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    if streaming and (query is None or batch_id is None):
        raise RuntimeError("relay sink: a streaming write without Spark's query and batch ids")
    named = options.name or query or ""
    task = sink_commits.Task(named or options.job, int(batch_id or 0), context.partitionId())
    commits = options.commit_stream
    if commits is None:  # by default a named write keeps them beside its stream
        default = named and options.stream
        commits = sink_commits.commit_stream(options.stream, task.write) if default else ""
    cluster = sink_commits.Cluster(
        options.config, list(options.nodes) or None, options.client_key, options.timeout_s
    )
    found = sink_commits.find(cluster, commits, task) if commits else sink_commits.Records(0, None)
    if found.committed_rows is not None:  # every row is there already, if they are these
        if _fingerprint(options, rows) != found.fingerprint:
            raise RuntimeError(
                f"relay sink: {task.producer_id} already published other rows (its commit is "
                f"in {commits!r}); give this write its own producerId"
            )
        return Published(found.committed_rows)
    there: set[tuple[str, int]] = set()
    if found.begin_seq:  # a run before this one published some rows: which?
        held = list(rows)
        rows = iter(held)
        streams = {_stream_of(options, row, i) for i, row in enumerate(held, start=1)}
        there = sink_commits.published_since(cluster, streams, found.begin_seq, task.producer_id)
    with Producer(
        config=options.config,
        nodes=list(options.nodes) or None,
        producer_id=task.producer_id,
        timeout_s=options.timeout_s,
        client_key=options.client_key,
    ) as producer:
        if commits and not found.begin_seq:
            _begin(producer, commits, task)
        count, fingerprint = _publish(options, producer, rows, there)
        if commits:
            sink_commits.write(producer, commits, task, count, fingerprint)
    return Published(count)


def _begin(producer: Any, commits: str, task: sink_commits.Task) -> None:
    from relay import RelayError

    try:
        sink_commits.write(producer, commits, task, None)
    except RelayError as exc:
        raise RuntimeError(
            f"relay sink: cannot write commit records to {commits!r} ({exc.code}: "
            f"{exc.message}); set option commitStream to a stream the cluster replicates and "
            "this client may publish to, or to '' to rely on the dedup window alone"
        ) from exc


def _publish(
    options: SinkOptions, producer: Any, rows: Iterator[Any], there: set[tuple[str, int]]
) -> tuple[int, str]:
    """Publish the rows not ``there`` (numbered 1, 2, ... as message ids) and wait for every
    acknowledgement; how many rows there were, and their fingerprint."""
    from relay import RelayError

    futures = []
    count = 0
    fingerprint = blake3()
    for msg_id, row in enumerate(rows, start=1):
        count = msg_id
        stream, message = _message(options, row, msg_id, fingerprint)
        if (stream, msg_id) in there:
            continue
        futures.append(producer.send(stream, message[0], msg_id, *message[1:]))
    producer.flush()
    for future in futures:
        try:
            future.result()
        except RelayError as exc:  # the task fails; Spark's retry resends the same ids
            raise RuntimeError(f"relay sink: {future.stream}: {exc.code}: {exc.message}") from exc
    return count, fingerprint.hexdigest()


def _fingerprint(options: SinkOptions, rows: Iterator[Any]) -> str:
    fingerprint = blake3()
    for number, row in enumerate(rows, start=1):
        _message(options, row, number, fingerprint)
    return fingerprint.hexdigest()


Message = tuple[bytes, bytes | None, list[tuple[str, bytes]]]


def _message(options: SinkOptions, row: Any, number: int, fingerprint: Any) -> tuple[str, Message]:
    """A row's stream and message (payload, key, headers), folded into ``fingerprint``."""
    stream = _stream_of(options, row, number)
    payload = _bytes(row[options.value])
    key, headers = _extras(options, row)
    fingerprint.update(msgpack.packb([stream, payload, key, headers]))
    return stream, (payload, key, headers)


def _stream_of(options: SinkOptions, row: Any, number: int) -> str:
    stream = (row[options.stream_column] if options.stream_column else None) or options.stream
    if not stream:
        raise ValueError(f"relay sink: row {number} names no stream and there is no default")
    return str(stream)


def _extras(options: SinkOptions, row: Any) -> tuple[bytes | None, list[tuple[str, bytes]]]:
    key = row[options.key] if options.key else None
    headers = row[options.headers] if options.headers else None
    pairs = [(h["key"], _bytes(h["value"])) for h in headers or ()]
    return (None if key is None else _bytes(key)), pairs


def _bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if value is None:
        return b""
    raise ValueError(f"relay sink: a {type(value).__name__} where bytes or a string belong")


class RelayWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return publish_rows(self.options, iterator, streaming=False)


class RelayStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return publish_rows(self.options, iterator, streaming=True)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every row is acknowledged by a quorum when its task returns: nothing to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Published rows stay (a stream is append-only); a replay of the batch reuses their
        ids, so the retry adds nothing twice."""
