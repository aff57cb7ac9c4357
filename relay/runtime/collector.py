"""A node's garbage collector: young collections it runs itself, the survivors frozen.

A node keeps what it holds of each tx (a ``Tx``, a named tuple, which the collector never
untracks as it does a plain tuple: 200,000 of a full ring were nearly every tracked object of a
node) for as long as its ring does, so even rare collections scan those txs over and over: at
20,000 tx/s each node paused 35-57 ms in young collections and 70-78 ms in a full one within
ten seconds, and they made the open loop's p99. So the node (``Collector``) turns the automatic
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

from relay.gc_tuning import tune_gc

log = logging.getLogger("relay.node")

YOUNG = 20_000  # a young collection of 20,000 txs and dedup keys: 1.4 ms idle, 2-7 ms loaded
# objects past twice the last full collection's before the next: more than a ring of 200,000
# txs and their dedup keys add as they fill (the young counts count the keys' plain tuples too)
SLACK = 1_000_000


class Collector:
    """A node's collector: ``turn`` after every loop turn."""

    def __init__(self, young: int = YOUNG, slack: int = SLACK) -> None:
        tune_gc()
        gc.disable()
        self.young_max = young
        self.slack = slack
        self.kept = gc.get_freeze_count()  # what the last full collection left
        self.grown = 0  # frozen since, at most

    def turn(self) -> None:
        """A young collection and a freeze once ``young`` objects more are alive; a full
        collection once the frozen objects may be more than twice what the last one kept,
        plus ``slack``. What the young collections froze is at most what their young counts
        add up to (allocations less deallocations of every object the collector knows of,
        tracked or not, never below zero): the frozen objects are never counted between full
        collections, since a count walks them all (10-22 ms for 250,000 in a loaded node)."""
        young = gc.get_count()[0]
        if young < self.young_max:
            return
        gc.collect(0)
        gc.freeze()
        self.grown += young
        if self.grown <= self.kept + self.slack:
            return
        started = time.monotonic()
        gc.unfreeze()
        freed = gc.collect()
        gc.freeze()
        self.kept, self.grown = gc.get_freeze_count(), 0
        took_ms = (time.monotonic() - started) * 1000
        log.info("full collection: %d objects freed, %d kept, %.0f ms", freed, self.kept, took_ms)
