"""The C allocator's policy for a process that moves large frames and holds payloads a while.

How this works: glibc serves a block of at least ``M_MMAP_THRESHOLD`` bytes with its own
``mmap`` and unmaps it when freed; every byte of such a block is a fresh page, faulted in and
zeroed by the kernel. Under glibc's dynamic threshold, at 10 KB payloads a node's frames
(requests of 320 KB, replication bundles of up to 4 MiB, and their CURVE copies in libzmq's I/O
thread) are all mapped afresh: 12 page faults per tx in node 1's I/O thread, 27 us of system
time per tx. The threshold is therefore fixed at ``MMAP_THRESHOLD_BYTES`` (32 MiB, the most
glibc's dynamic threshold would reach, and half a thread arena's heap): frames come from the
heap, whose freed space is used again (10 KB payloads: 9.8k -> 12.8k tx/s; 1 KB: 66k -> 72k).

Freed heap space stays in the process, though: untrimmed, a node that has replicated 400
payloads of 1 MiB stays at 200-250 MB resident with a ring of 16 MiB. ``trim_heap`` hands back
every whole free page inside the heaps, and the main heap's top above ``TRIM_THRESHOLD_BYTES``
(``malloc_trim``: 0.6-1.5 ms on a loaded node); the node calls it twice a second, so what the
byte bounds let go leaves the process within a second (the same flood: 53-86 MB). The top of a
thread's heap (libzmq's I/O thread makes its copies there) is only cut above the trim threshold,
so each keeps up to 16 MiB.

Fixing the mmap threshold also fixes the trim threshold, at its default of 128 KiB unless set:
every turn's frames would be freed at the top of the heap, handed back to the system, and
faulted in again by the next turn. Measured on a replica under load: 0.16 page faults per tx and
0.33 us of system time per tx at 128 KiB; with ``TRIM_THRESHOLD_BYTES`` 0.09 and 0.20. Elsewhere
than glibc this all does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_TRIM_THRESHOLD = -1
MMAP_THRESHOLD_BYTES = 32 << 20
TRIM_THRESHOLD_BYTES = 16 << 20


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, if it is glibc (it has ``mallopt`` and ``malloc_trim``)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return libc


def tune_allocator() -> bool:
    """Whether the allocator now serves frames from the heap (and keeps its top)."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def trim_heap() -> None:
    """Hand the heaps' whole free pages back to the system (the main heap keeps
    ``TRIM_THRESHOLD_BYTES`` at its top, for the next turns)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(TRIM_THRESHOLD_BYTES)
