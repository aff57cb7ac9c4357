"""The garbage collector policy of a process that moves many transactions per second.

How this works: per-transaction garbage (tuples, futures, acks) is acyclic and freed by
reference counting, but every tracked allocation still counts towards the cyclic collector's
thresholds, and each full collection scans every live object. Measured on a producer at 60k
tx/s: about 2.7 us per transaction, nearly half of its CPU, went to collections. ``tune_gc``
moves what start-up built out of the collector's sight (``gc.freeze``) and scans for cycles
rarely: a young collection once 200,000 tracked objects more are alive. Measured on a 3-node
cluster at 140k tx/s, per node over 600,000 txs: young collections took 61-175 ms with a
threshold of 50,000 and 83-111 ms with 200,000 (the longest one 23-32 ms; 50-63 ms with
500,000). ``relay bench`` calls it, and a program that publishes or consumes at high rates may
call it once after its own start-up.

A node keeps what it holds of each tx (a ``Tx``, a named tuple, which the collector never
untracks as it does a plain tuple: 200,000 of a full ring were nearly every tracked object of a
node) for as long as its ring does, so even rare collections scan those txs over and over: at
20,000 tx/s each node paused 35-57 ms in young collections and 70-78 ms in a full one within
ten seconds, and they made the open loop's p99. So a node (``Collector``) turns the automatic
collector off and, between loop turns, once ``YOUNG`` tracked objects more are alive, runs a
young collection itself (which frees the cycles among them and untracks the plain tuples: 2-7
ms in a loaded node) and freezes what survived: the collector then scans each object once,
never a held tx twice. Frozen objects that form garbage cycles later are never freed by
reference counting (the node's loop made none under load: every collection above freed nothing;
its HTTP thread and rarer paths may), so once the frozen objects may be more than twice as many
as the last full collection left, plus ``SLACK``, the node unfreezes them and runs a full
collection: cyclic garbage can never hold more than that bound, and a node whose objects only
churn never pauses for it.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("relay.node")

THRESHOLDS = (200_000, 20, 100)  # young, middle and old generation (the defaults: 700, 10, 10)
YOUNG = 20_000  # a young collection of 20,000 txs and dedup keys: 1.4 ms idle, 2-7 ms loaded
# objects past twice the last full collection's before the next: more than a ring of 200,000
# txs and their dedup keys add as they fill (the young counts count the keys' plain tuples too)
SLACK = 1_000_000


def tune_gc() -> None:
    gc.collect()
    gc.freeze()  # what start-up built lives as long as the process: never scan it again
    gc.set_threshold(*THRESHOLDS)


class Collector:
    """A node's collector: ``turn`` after every loop turn."""

    def __init__(self) -> None:
        tune_gc()
        gc.disable()
        self.kept = gc.get_freeze_count()  # what the last full collection left
        self.grown = 0  # frozen since, at most

    def turn(self) -> None:
        """A young collection and a freeze once ``YOUNG`` objects more are alive; a full
        collection once the frozen objects may be more than twice what the last one kept,
        plus ``SLACK``. What the young collections froze is at most what their young counts
        add up to (allocations less deallocations of every object the collector knows of,
        tracked or not, never below zero): the frozen objects are never counted between full
        collections, since a count walks them all (10-22 ms for 250,000 in a loaded node)."""
        young = gc.get_count()[0]
        if young < YOUNG:
            return
        gc.collect(0)
        gc.freeze()
        self.grown += young
        if self.grown <= self.kept + SLACK:
            return
        started = time.monotonic()
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        self.kept, self.grown = gc.get_freeze_count(), 0
        took_ms = (time.monotonic() - started) * 1000
        log.info("full collection: %d objects freed, %d kept, %.0f ms", freed, self.kept, took_ms)
