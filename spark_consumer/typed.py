"""A typed stream's fields as columns: its JSON Schema's properties mapped to Spark types, and
each payload's fields read into them, so that a query selects ``id`` or ``user.name`` with no
``from_json`` by hand.

The mapping: ``string`` to string, ``integer`` to long, ``number`` to double, ``boolean`` to
boolean, an object with ``properties`` to a struct of them, an array with typed ``items`` to an
array; a type list of one type and ``null`` to that type; anything else (no type, several
types, an object with no properties) to a string holding the value's JSON text. The columns
follow relay's own; a property named as one of them (``key``, ``timestamp``...) is the column
``data_<name>``. A value that does not fit its column (an entry of an older major version, one
written before the stream was typed) is null there, as a missing field is; the row's
``payload`` still holds the entry whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress
from relay.client.status import stream_settings

FIELD = "relay.field"  # a typed column's metadata: the property it holds
PREFIX = "data_"  # a property named as one of relay's columns gets this in front
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def stream_columns(
    streams: Sequence[str], nodes: list[NodeAddress], pair: KeyPair, taken: set[str]
) -> list[StructField]:
    """The typed columns of a read of ``streams``: their schema's, when every one of them has
    the same schema (asked of the cluster: ``relay stream info``); none otherwise."""
    found = {stream_settings(nodes, s, pair).get("schema", "") for s in streams}
    if len(found) != 1 or not (text := found.pop()):
        return []
    document = json.loads(text)
    return columns(document, taken) if isinstance(document, dict) else []


def columns(document: dict[str, Any], taken: set[str]) -> list[StructField]:
    """The columns of a schema's top-level properties, none named as one in ``taken``."""
    properties = document.get("properties")
    if not isinstance(properties, dict):
        return []
    return [
        StructField(PREFIX + name if name in taken else name, spark_type(node), True, {FIELD: name})
        for name, node in properties.items()
    ]


def spark_type(node: Any) -> DataType:
    if not isinstance(node, dict):
        return StringType()
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind == "string":
        return StringType()
    if kind == "integer":
        return LongType()
    if kind == "number":
        return DoubleType()
    if kind == "boolean":
        return BooleanType()
    if kind == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
        return StructType([StructField(n, spark_type(p)) for n, p in node["properties"].items()])
    if kind == "array" and isinstance(node.get("items"), dict):
        return ArrayType(spark_type(node["items"]))
    return StringType()  # the value's JSON text


def arrow_fields(fields: Sequence[StructField]) -> list[pa.Field]:
    return [pa.field(f.name, to_arrow_type(f.dataType)) for f in fields]


def arrays(fields: Sequence[StructField], payloads: Sequence[bytes]) -> list[pa.Array]:
    """Each typed column's values, read from the payloads' JSON."""
    docs = [_document(p) for p in payloads]
    found = []
    for f in fields:
        name = (f.metadata or {}).get(FIELD, f.name)
        fit = _fitter(f.dataType)
        values = [fit(d.get(name)) if isinstance(d, dict) else None for d in docs]
        found.append(pa.array(values, to_arrow_type(f.dataType)))
    return found


def _document(payload: bytes) -> Any:
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        return None


Fitter = Callable[[Any], Any]


def _fitter(kind: DataType) -> Fitter:
    """What makes a JSON value a value of ``kind`` (None where it does not fit)."""
    if isinstance(kind, LongType):
        return lambda v: v if type(v) is int and LONG_MIN <= v <= LONG_MAX else None
    if isinstance(kind, DoubleType):
        return _double
    if isinstance(kind, BooleanType):
        return lambda v: v if type(v) is bool else None
    if isinstance(kind, StructType):
        inner = [(f.name, _fitter(f.dataType)) for f in kind.fields]
        return lambda v: {n: fit(v.get(n)) for n, fit in inner} if isinstance(v, dict) else None
    if isinstance(kind, ArrayType):
        each = _fitter(kind.elementType)
        return lambda v: [each(x) for x in v] if isinstance(v, list) else None
    return lambda v: v if type(v) is str or v is None else json.dumps(v)


def _double(v: Any) -> float | None:
    if type(v) is float:
        return v
    if type(v) is int and abs(v) < 1 << 1000:  # a larger one has no double
        return float(v)
    return None
