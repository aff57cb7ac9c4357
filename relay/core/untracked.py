"""What a node holds for long, out of the cyclic garbage collector's sight.

A replica holds each verified tx for as long as its ring keeps it (up to ``buffer_txs_max``,
200,000 by default) and its dedup key for the dedup window. A ``Tx`` is a named tuple, which
CPython never stops tracking (it untracks only exact tuples, and those only once a collection
has scanned them), so each young collection scanned every tx and key folded since the last
one, and each full collection every tx in the ring and every entry of the lists and dicts that
hold them: measured at 20,000 tx/s on 3 nodes (``docs/benchmarks.md``), young collections of
60-87 ms, the same moment on every node, which stalled every publish in flight.

None of these objects can be part of a reference cycle: a tx and a key are immutable and hold
only ints, strings, bytes, None and tuples of (str, bytes) pairs, and the lists and dicts that
hold them hold nothing else, so no cycle can pass through them and the collector has nothing to find
there. ``untrack`` takes such an object out of the collector's lists (CPython's
``PyObject_GC_UnTrack``, what it does itself for an exact tuple of atoms; through
``ctypes.pythonapi`` the call holds the GIL, and it is made only for an object the collector
tracks: on an int or bytes, objects of no collected type, it would read memory that is not
there). A dict left untracked stays so while every key and value put in it is of a type the
collector never tracks or an untracked exact tuple (any other object tracks it again), which
is why a key is untracked before it goes in. Untracking does not make collections rarer (the
young count falls only when an object is freed); it makes each one cheap.
Reference counting still frees each of them the moment the last holder lets go.
"""

from __future__ import annotations

import ctypes
from collections import deque
from collections.abc import Iterable
from gc import is_tracked

_untrack = ctypes.pythonapi.PyObject_GC_UnTrack
_untrack.argtypes = [ctypes.py_object]
_untrack.restype = None


def untrack(held: object) -> None:
    """Stop the collector scanning ``held``, which no reference cycle can pass through (an
    object it does not track, such as an int, is left as it is)."""
    if is_tracked(held):
        _untrack(held)


def untrack_all(held: Iterable[object]) -> None:
    """``untrack`` each, in a C-speed pass."""
    deque(map(_untrack, filter(is_tracked, held)), maxlen=0)
