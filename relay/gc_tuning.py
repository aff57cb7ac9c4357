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
untracks as it does a plain tuple: 200,000 of a full ring were nearly every tracked object of
a node) for as long as its ring does, so even rare collections scan those txs over and over:
at 20,000 tx/s each node paused 35-57 ms in young collections and 70-78 ms in a full one
within ten seconds, and they made the open loop's p99. So a node (``Collector``) turns the
automatic collector off and, between loop turns, once ``YOUNG`` tracked objects more are
alive, runs a young collection itself (which frees the cycles among them and untracks the
plain tuples, about 1.5 ms) and freezes what survived: the collector then scans each object
once, never a held tx twice. Frozen objects that form garbage cycles later are never freed by
reference counting (the node's loop made none under load: every collection above freed
nothing; its HTTP thread and rarer paths may), so once the frozen objects may be more than
twice as many as the last full collection left, plus ``SLACK``, the node counts them and, if
they are, unfreezes them and runs a full collection: cyclic garbage can never hold more than
that bound, and a node whose objects only churn never pauses for it.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("relay.node")

THRESHOLDS = (200_000, 20, 100)  # young, middle and old generation (the defaults: 700, 10, 10)
YOUNG = 20_000  # a node's young collection: 20,000 txs and dedup keys took 1.4 ms
SLACK = 200_000  # frozen objects beyond twice the last full collection's before the next


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
        self.counted = self.kept  # frozen objects when last counted
        self.grown = 0  # frozen since then, at most

    def turn(self) -> None:
        """A young collection and a freeze once ``YOUNG`` objects more are alive; then, if
        the frozen objects may have passed the bound, a full collection. Counting the frozen
        objects walks them all (20 ms for a million), so the young generation's counts
        (allocations less deallocations, never below zero, so never less than what survived)
        add up to what was frozen since, and the count is taken only when that sum may have
        passed the bound."""
        young = gc.get_count()[0]
        if young < YOUNG:
            return
        gc.collect(0)
        gc.freeze()
        self.grown += young
        bound = 2 * self.kept + SLACK
        if self.counted + self.grown <= bound:
            return
        self.counted, self.grown = gc.get_freeze_count(), 0
        if self.counted <= bound:
            return
        started = time.monotonic()
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        self.kept = self.counted = gc.get_freeze_count()
        took_ms = (time.monotonic() - started) * 1000
        log.info("full collection: %d objects freed, %d kept, %.0f ms", freed, self.kept, took_ms)
