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
