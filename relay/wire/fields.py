"""Type checks for decoded msgpack fields, shared by the mesh and client codecs: a wrong
type raises ValueError, which each codec turns into its own malformed-frame error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from relay.core.messages import Tx


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


# A tx as a typed decoder reads it: exactly these nine fields (``Tx`` itself would let the
# trailing key and headers be left out).
TxRow = tuple[int, int, int, int, str, int, bytes, bytes | None, tuple[tuple[str, bytes], ...]]


def checked_txs(rows: Sequence[TxRow]) -> tuple[Tx, ...]:
    """Txs from rows a typed decoder read (types already checked), their values in range."""
    for row in rows:
        seq, prev, origin, epoch, _, msg_id, _, _, headers = row
        if not (
            seq > prev >= 0 and 0 <= origin <= 1023 and epoch >= 0 and msg_id >= 0 and seq < 1 << 64
        ):
            raise ValueError(f"bad tx {row!r:.80}")
        if headers and not all(name for name, _ in headers):
            raise ValueError("a header name is never empty")
    new = tuple.__new__
    return tuple([new(Tx, row) for row in rows])
