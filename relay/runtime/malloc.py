"""The C allocator's policy for a process that holds large payloads for a while.

How this works: glibc serves a block of at least ``M_MMAP_THRESHOLD`` bytes with its own
``mmap`` and gives it back to the system when freed, but by default it raises that threshold
each time such a block is freed, up to 32 MiB: after the first 1 MiB payload was freed, every
later one came from the heap, whose freed space stays in the process. A node that had
replicated a few hundred 1 MiB payloads kept ~350 MB resident with a ring bounded at 16 MiB.
Setting the threshold fixes it at ``MMAP_THRESHOLD_BYTES`` (glibc then stops moving it), so
what the byte bounds let go leaves the process. Elsewhere than glibc this does nothing.

Fixing that threshold also fixes the trim threshold at its default of 128 KiB: every turn's
frames (a bundle of a thousand txs is about 200 KiB) were freed at the top of the heap,
handed back to the system, and faulted in again by the next turn. Measured on a replica under
load: 0.16 page faults per tx and 0.33 us of system time per tx; with ``TRIM_THRESHOLD_BYTES``
0.09 and 0.20. Up to that much free heap stays in the process; large blocks still go back.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters
M_TRIM_THRESHOLD = -1
MMAP_THRESHOLD_BYTES = 256 << 10
TRIM_THRESHOLD_BYTES = 16 << 20


def return_large_frees() -> bool:
    """Whether the allocator now returns large freed blocks to the system."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
