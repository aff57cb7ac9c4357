"""A transaction as a JSON object: what ``relay consume --json`` and the HTTP API write.

Text that is not UTF-8 goes as base64 under a ``*_b64`` name instead, and seqs are strings
unless asked otherwise (flake seqs are above 2^53, which JavaScript and jq would round).
"""

from __future__ import annotations

import base64
from typing import Protocol

from relay.core.digest import Headers

JSON_SAFE_MAX = (1 << 53) - 1


class Row(Protocol):
    """What a format reads of a transaction (``relay.Transaction``)."""

    @property
    def stream(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def origin(self) -> int: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def digest(self) -> bytes: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def timestamp_ms(self) -> int: ...
    @property
    def index(self) -> int: ...


def as_json(row: Row, seq_numbers: bool = False) -> dict[str, object]:
    seq: int | str = row.seq if seq_numbers or row.seq <= JSON_SAFE_MAX else str(row.seq)
    out: dict[str, object] = {
        "stream": row.stream,
        "seq": seq,
        "index": row.index,
        "origin": row.origin,
        "timestamp_ms": row.timestamp_ms,
        "digest": row.digest.hex(),
    }
    if row.key is not None:
        out.update(text_field("key", row.key))
    out["headers"] = [{"name": name, **text_field("value", v)} for name, v in row.headers]
    out.update(text_field("payload", row.payload))
    return out


def text_field(name: str, data: bytes) -> dict[str, str]:
    """``{name: text}`` if ``data`` is UTF-8, else ``{name_b64: base64}``."""
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode()}
