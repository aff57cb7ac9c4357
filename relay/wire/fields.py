"""Type checks for decoded msgpack fields, shared by the mesh and client codecs: a wrong
type raises ValueError, which each codec turns into its own malformed-frame error."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import gt, itemgetter
from typing import Annotated, Any

import msgspec

from relay.core.flake import NODE_ID_MAX
from relay.core.messages import Tx


def as_int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r:.40}")
    return v


def as_node_id(v: Any) -> int:
    node = as_int(v)
    if node > NODE_ID_MAX:
        raise ValueError(f"expected a node id of 0..{NODE_ID_MAX}, got {node}")
    return node


def as_str(v: Any) -> str:
    if type(v) is not str:
        raise ValueError(f"expected a string, got {v!r:.40}")
    return v


def as_bytes(v: Any) -> bytes:
    if type(v) is not bytes:
        raise ValueError(f"expected bytes, got {type(v).__name__}")
    return v


def as_list(v: Any) -> list[Any]:
    if type(v) is not list:
        raise ValueError(f"expected a list, got {type(v).__name__}")
    return v


def as_rows(v: Any, width: int) -> list[list[Any]]:
    """A list of rows of ``width`` fields each (a map never passes for a row)."""
    found = as_list(v)
    for row in found:
        if type(row) is not list or len(row) != width:
            raise ValueError(f"expected rows of {width} fields, got {row!r:.40}")
    return found


def array_len(body: bytes | bytearray | memoryview) -> int:
    """How many items the msgpack array at the start of ``body`` declares (0 if it is not an
    array): a frame can be refused by its field count before anything is decoded."""
    if not body:
        return 0
    first = body[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC and len(body) >= 3:
        return int.from_bytes(body[1:3], "big")
    if first == 0xDD and len(body) >= 5:
        return int.from_bytes(body[1:5], "big")
    return 0


def as_key(v: Any) -> bytes | None:
    """A message key: bytes, or None for no key."""
    return None if v is None else as_bytes(v)


def as_headers(v: Any) -> tuple[tuple[str, bytes], ...]:
    """Message headers: a list of [name, value] pairs, names non-empty strings."""
    pairs = []
    for pair in as_list(v):
        if type(pair) is not list or len(pair) != 2:
            raise ValueError("a header is a [name, value] pair")
        name, value = as_str(pair[0]), as_bytes(pair[1])
        if not name:
            raise ValueError("a header name is never empty")
        pairs.append((name, value))
    return tuple(pairs)


# Values a typed decoder checks while it reads (msgpack integers stop at 2^64 - 1).
U64 = Annotated[int, msgspec.Meta(ge=0)]
HeaderName = Annotated[str, msgspec.Meta(min_length=1)]
HeaderRows = tuple[tuple[HeaderName, bytes], ...]
# A tx as a typed decoder reads it: exactly these nine fields (``Tx`` itself would let the
# trailing key and headers be left out), each in range but for ``seq > prev``.
NodeId = Annotated[int, msgspec.Meta(ge=0, le=NODE_ID_MAX)]
TxRow = tuple[U64, U64, NodeId, U64, str, U64, bytes, bytes | None, HeaderRows]
_SEQ, _PREV = itemgetter(0), itemgetter(1)


def checked_txs(rows: Sequence[TxRow]) -> tuple[Tx, ...]:
    """Txs from rows a typed decoder read (types and ranges already checked), each one's seq
    above its ``prev``."""
    if not all(map(gt, map(_SEQ, rows), map(_PREV, rows))):
        bad = next(row for row in rows if row[0] <= row[1])
        raise ValueError(f"a tx's seq must be above its prev: {bad!r:.80}")
    return tuple(map(tuple.__new__, repeat(Tx), rows))
