"""The rows the ``relay`` source gives: relay's own columns, and Kafka's names beside them.

A Kafka user's query runs unchanged: ``value``, ``topic``, ``offset``, ``partition`` and
``timestampType`` sit beside ``payload``, ``stream`` and ``seq`` (the same data; Arrow shares
the payload's buffers between ``payload`` and ``value``). ``partition`` is always 0 (a relay
stream is one timeline) and ``timestampType`` 0 (Kafka's CreateTime: the coordinator stamped
the seq). ``key`` and ``headers`` have Kafka's types already.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
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

from relay.core.flake import EPOCH_MS, TIME_SHIFT
from relay.wire.replies import TxRow
from spark_consumer.typed import arrays as typed_arrays
from spark_consumer.typed import arrow_fields

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
        StructField("value", BinaryType()),  # Kafka's names for payload, stream and seq
        StructField("topic", StringType()),
        StructField("offset", LongType()),
        StructField("partition", IntegerType()),
        StructField("timestampType", IntegerType()),
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
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("offset", pa.int64()),
        ("partition", pa.int32()),
        ("timestampType", pa.int32()),
    ]
)


def to_arrow(
    stream: str, rows: list[TxRow], verified: list[bool], typed: Sequence[StructField] = ()
) -> pa.RecordBatch:
    """The rows as Arrow columns: relay's own, then a typed stream's fields (``typed``)."""
    seqs, origins, pids, mids, payloads, keys, headers, digests = zip(*rows, strict=True)
    count = len(seqs)
    names = pa.array([stream] * count, pa.string())
    seq_array = pa.array(seqs, pa.int64())
    payload_array = pa.array(payloads, pa.binary())
    zeros = _zeros(count)
    unix_ms = pc.add(pc.shift_right(seq_array, TIME_SHIFT), EPOCH_MS)  # the seq's time part
    stamps = pc.multiply(unix_ms, 1000).cast(pa.timestamp("us", tz="UTC"))
    if any(headers):
        header_array = pa.array(
            [[{"key": n, "value": v} for n, v in h] for h in headers], ARROW_HEADERS
        )
    else:  # the common case: every list empty, built from its offsets alone
        header_array = pa.ListArray.from_arrays(_zeros(count + 1), _NO_HEADER, ARROW_HEADERS)
    extra, schema = [], ARROW_SCHEMA
    if typed:
        extra = typed_arrays(typed, payloads)
        schema = pa.schema([*ARROW_SCHEMA, *arrow_fields(typed)])
    return pa.RecordBatch.from_arrays(
        [
            names,
            seq_array,
            stamps,
            pa.array(origins, pa.int32()),
            pa.array(pids, pa.string()),
            pa.array(mids, pa.int64()),
            pa.array(keys, pa.binary()),
            header_array,
            payload_array,
            pa.array(digests, pa.binary()),
            pa.array(verified, pa.bool_()),
            payload_array,
            names,
            seq_array,
            zeros,
            zeros,
            *extra,
        ],
        schema=schema,
    )


_NO_HEADER = pa.array([], ARROW_HEADERS.value_type)


def _zeros(count: int) -> pa.Array:
    """``count`` int32 zeros, from one zeroed buffer."""
    return pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(bytes(4 * count))])
