"""Type checks for decoded msgpack fields, shared by the mesh and client codecs: a wrong
type raises ValueError, which each codec turns into its own malformed-frame error."""

from __future__ import annotations

from typing import Any


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
