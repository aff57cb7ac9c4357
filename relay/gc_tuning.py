"""The garbage collector policy of a process that moves many transactions per second.

How this works: per-transaction garbage (tuples, futures, acks) is acyclic and freed by
reference counting, but every tracked allocation still counts towards the cyclic collector's
thresholds, and each full collection scans every live object. Measured on a producer at 60k
tx/s: about 2.7 us per transaction, nearly half of its CPU, went to collections. ``tune_gc``
moves what start-up built out of the collector's sight (``gc.freeze``) and scans for cycles
rarely: a young collection once 200,000 tracked objects more were made than freed. What a
node keeps of each tx, in its ring and its dedup index, still counts towards that, but it is
out of the collector's sight (``relay/core/untracked.py``), so the collection scans only what
was made since the last one and is still alive. Measured on a 3-node
cluster at 140k tx/s, per node over 600,000 txs: young collections took 61-175 ms with a
threshold of 50,000 and 83-111 ms with 200,000 (the longest one 23-32 ms; 50-63 ms with
500,000). The node calls it when it starts serving; ``relay bench`` calls it, and a program that
publishes or consumes at high rates may call it once after its own start-up.
"""

from __future__ import annotations

import gc

THRESHOLDS = (200_000, 20, 100)  # young, middle and old generation (the defaults: 700, 10, 10)


def tune_gc() -> None:
    gc.collect()
    gc.freeze()  # what start-up built lives as long as the process: never scan it again
    gc.set_threshold(*THRESHOLDS)
