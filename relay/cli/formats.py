"""How ``relay consume`` writes a transaction: raw bytes, JSON, base64 or a kcat-like template.

``raw`` writes the payload's bytes and nothing else, so one binary message round-trips byte for
byte. ``json`` writes one object per line; text that is not UTF-8 goes as base64 under a
``*_b64`` name instead, and seqs are strings unless asked otherwise (flake seqs are above 2^53,
which JavaScript and jq would round). A template names fields with ``%`` (as kcat's ``-f``):
``%s`` seq, ``%v`` value (the payload), ``%k`` key, ``%h`` headers as ``name=value,...``, ``%t``
stream, ``%T`` timestamp in ms, ``%o`` origin node, ``%d`` digest (hex), ``%S`` payload size,
``%i`` dense index, ``%%`` a percent sign; ``\\n``, ``\\t`` and ``\\\\`` as escapes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from relay.client.tx_json import Row, as_json

Formatter = Callable[[Row], bytes]


class FormatError(ValueError):
    """A template that names no field this module knows."""


def formatter(spec: str, seq_numbers: bool = False) -> Formatter:
    """The writer for ``spec``: raw, json, base64 or a template."""
    if spec == "raw":
        return lambda row: row.payload
    if spec == "base64":
        return lambda row: base64.b64encode(row.payload) + b"\n"
    if spec == "json":
        return lambda row: (json.dumps(as_json(row, seq_numbers)) + "\n").encode()
    return _template(spec)


_ESCAPES: dict[str, Callable[[Row], bytes]] = {
    "n": lambda _r: b"\n",
    "t": lambda _r: b"\t",
    "\\": lambda _r: b"\\",
}


def _template(spec: str) -> Formatter:
    """Compile a template into a list of pieces: literal bytes or field readers."""
    fields: dict[str, Callable[[Row], bytes]] = {
        "s": lambda r: str(r.seq).encode(),
        "v": lambda r: r.payload,
        "k": lambda r: r.key or b"",
        "h": lambda r: b",".join(n.encode() + b"=" + v for n, v in r.headers),
        "t": lambda r: r.stream.encode(),
        "T": lambda r: str(r.timestamp_ms).encode(),
        "o": lambda r: str(r.origin).encode(),
        "d": lambda r: r.digest.hex().encode(),
        "S": lambda r: str(len(r.payload)).encode(),
        "i": lambda r: str(r.index).encode(),
        "%": lambda r: b"%",
    }
    pieces: list[bytes | Callable[[Row], bytes]] = []
    names_a_field = False
    i = 0
    while i < len(spec):
        c = spec[i]
        if c in "%\\" and i + 1 < len(spec):
            found = (fields if c == "%" else _ESCAPES).get(spec[i + 1])
            if found is None:
                raise FormatError(f"{spec!r}: unknown {c}{spec[i + 1]} (see relay consume --help)")
            pieces.append(found)
            names_a_field |= c == "%" and spec[i + 1] != "%"
            i += 2
            continue
        if c == "%":
            raise FormatError(f"{spec!r} ends in a lone %")
        pieces.append(c.encode())
        i += 1
    if not names_a_field:
        raise FormatError(
            f"{spec!r} is neither raw, json, base64 nor a template naming a field (%s, %v, ...)"
        )
    return lambda row: b"".join(p(row) if callable(p) else p for p in pieces)
