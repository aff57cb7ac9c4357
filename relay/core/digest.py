"""The rolling digest: a hash chain over a stream's timeline, like git's.

``digest(s) = blake3(digest(previous tx) || seq || origin || payload)`` and the chain starts
from ``genesis(stream)``. Equal digests at ``s`` mean equal timelines up to and including
``s``, so one comparison proves a whole prefix. A consumer recomputes the chain with
``fold`` from what it received.
"""

from __future__ import annotations

from struct import Struct

from blake3 import blake3

DIGEST_BYTES = 32


def genesis(stream: str) -> bytes:
    """The digest before a stream's first transaction."""
    return blake3(b"relay/v1 genesis " + stream.encode()).digest()


_HEADER = Struct(">QH").pack  # seq (8 bytes), origin (2 bytes), big-endian


def fold(previous: bytes, seq: int, origin: int, payload: bytes) -> bytes:
    """The digest after appending one transaction to a timeline ending in ``previous``."""
    return blake3(previous + _HEADER(seq, origin) + payload).digest()
