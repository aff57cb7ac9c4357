"""A sink write's commit records: what keeps a replayed batch from publishing its rows twice
long after the cluster's dedup window has forgotten them.

How this works: a named write (a streaming query, or option ``producerId``) keeps records in
its commit stream, ``<stream>.__sink.<name>`` (or option ``commitStream``), replicated and
verified like any stream. The task of batch B, partition P publishes as producer
``spark-<name>-B-P`` a *begin* record (keyed by that producer id) before its first row and a
*commit* record (its row count and a fingerprint of its rows) after its last row is
acknowledged. A task run again looks for them first (``find``): with a commit for the same rows
it publishes nothing (other rows under the same name are refused: the name was reused); with
only a begin it reads the streams its rows go to from a minute before the begin (seqs of
different coordinators order only within their clocks' skew) and publishes only the rows whose
message ids are not there (``published_since``); with neither it publishes everything.
Micro-batches run in order, so a task's records lie after any record of an earlier batch of
its write: the search looks back from the stream's head over windows that grow tenfold and
stops at a window that holds such a record (or the whole stream). Every read is a verifying
``Consumer`` (its first digests confirmed by a second replica), so one node cannot make a task
skip its rows.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from relay import Consumer, Producer
from relay.client.consumer import Transaction
from relay.core.flake import make_seq, seq_unix_ms

SUFFIX = ".__sink."
LOOK_BACK_S = 60.0  # the first window the search looks back over
BEGIN, COMMIT = 1, 2  # the msg ids of a task's two records (retries of them dedup)
SKEW_MS = 60_000  # how far before its begin record a task's rows may be stamped


@dataclass(frozen=True, slots=True)
class Records:
    begin_seq: int  # 0 if no begin record was found
    committed_rows: int | None  # the row count of the commit record, None if none
    fingerprint: str = ""  # of the committed rows


@dataclass(frozen=True, slots=True)
class Task:
    write: str  # the write's name
    batch: int
    partition: int

    @property
    def producer_id(self) -> str:
        return f"spark-{self.write}-{self.batch}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Cluster:
    config: str | None
    nodes: list[str] | None
    client_key: str | None
    timeout_s: float

    def consumer(self, stream: str, start: int | str | datetime) -> Consumer:
        return Consumer(
            stream,
            config=self.config,
            nodes=self.nodes,
            start=start,
            client_key=Path(self.client_key) if self.client_key else None,
        )


def commit_stream(stream: str, name: str) -> str:
    return f"{stream}{SUFFIX}{name}"


def find(cluster: Cluster, stream: str, task: Task) -> Records:
    """The records of ``task`` in the commit stream ``stream``."""
    key = task.producer_id.encode()
    window_s = LOOK_BACK_S
    deadline = time.monotonic() + cluster.timeout_s
    while True:
        since = datetime.now(UTC) - timedelta(seconds=window_s)
        begin, rows, fingerprint, earlier = 0, None, "", False
        whole = window_s > 10 * 86_400
        with cluster.consumer(stream, "earliest" if whole else since) as reader:
            for tx in _to_head(reader, deadline):
                record = _record(tx.payload)
                if record is None or record.get("write") != task.write:
                    continue
                earlier |= record["batch"] < task.batch
                if tx.key == key and record.get("state") == "begin":
                    begin = begin or tx.seq
                elif tx.key == key and record.get("state") == "commit":
                    rows, fingerprint = record.get("rows", 0), str(record.get("rows_digest"))
        if begin or rows is not None or earlier or whole:
            return Records(begin, rows, fingerprint)
        window_s *= 10


def published_since(
    cluster: Cluster, streams: Iterable[str], since_seq: int, producer_id: str
) -> set[tuple[str, int]]:
    """(stream, msg id) of the txs ``producer_id`` published in ``streams`` from ``SKEW_MS``
    before ``since_seq`` (a seq of another stream) on."""
    found: set[tuple[str, int]] = set()
    deadline = time.monotonic() + cluster.timeout_s
    start = make_seq(max(0, seq_unix_ms(since_seq) - SKEW_MS), 0, 0)
    for stream in streams:
        with cluster.consumer(stream, start) as reader:
            found.update(
                (stream, tx.msg_id)
                for tx in _to_head(reader, deadline)
                if tx.producer_id == producer_id
            )
    return found


def write(
    producer: Producer, stream: str, task: Task, rows: int | None, fingerprint: str = ""
) -> None:
    """The begin record (``rows`` None) or the commit record of a task, acknowledged."""
    state = "begin" if rows is None else "commit"
    body: dict[str, Any] = {
        "write": task.write,
        "batch": task.batch,
        "partition": task.partition,
        "state": state,
    }
    if rows is not None:
        body["rows"], body["rows_digest"] = rows, fingerprint
    producer.publish(
        stream,
        json.dumps(body).encode(),
        msg_id=BEGIN if rows is None else COMMIT,
        key=task.producer_id.encode(),
    )


def _to_head(reader: Consumer, deadline: float) -> Iterable[Transaction]:
    """What ``reader`` reads up to the head its node had verified when it first answered."""
    head = None
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"relay sink: reading {reader.stream!r} took too long")
        txs = reader.poll(timeout_s=1.0)
        yield from txs
        if head is None and reader.verified_head is not None:
            head = reader.verified_head
        if head is not None and (reader.position >= head or (not txs and reader.at_end())):
            return


def _record(payload: bytes) -> dict[str, Any] | None:
    """A record's fields, None for a payload that is not one (only ints count as numbers)."""
    try:
        found = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict) or type(found.get("batch")) is not int:
        return None
    if type(found.get("rows", 0)) is not int:
        return None
    return found
