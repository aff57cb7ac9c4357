"""Type checks for decoded msgpack fields, shared by the mesh and client codecs: a wrong
type raises ValueError, which each codec turns into its own malformed-frame error."""

from __future__ import annotations

from collections.abc import Sequence
from operator import gt, itemgetter
from typing import Any

from relay.core.messages import U64, HeaderName, NodeId, Tx

__all__ = ["U64", "HeaderName", "NodeId"]  # the ranges the wire's typed decoders check


def as_int(v: Any) -> int:
    if type(v) is not int or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r:.40}")
    return v


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


def array_len(body: bytes) -> int:
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


HeaderRows = tuple[tuple[HeaderName, bytes], ...]
_SEQ, _PREV = itemgetter(0), itemgetter(1)


def check_txs(txs: Sequence[Tx]) -> None:
    """Raise ``ValueError`` unless each of ``txs`` (read by a typed decoder, which checked
    types and ranges by ``Tx``'s annotations) has its seq above its ``prev``."""
    if not all(map(gt, map(_SEQ, txs), map(_PREV, txs))):
        bad = next(tx for tx in txs if tx.seq <= tx.prev)
        raise ValueError(f"a tx's seq must be above its prev: {bad!r:.80}")
