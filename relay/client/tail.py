"""Where a stream's last N verified transactions start (``relay consume --last N``).

How this works: seqs are flake ids, not dense offsets, so "N before the head" is not
arithmetic as in Kafka. A span request counts the verified txs in (x, head], and with
``max_txs = N + 1`` it stops counting early, so one probe costs at most N + 1 txs of reading.
The count falls as x rises; a binary search over seqs (about 45 probes for a stream that spans
hours) finds the largest x with N txs after it, and reading starts just past x.
"""

from __future__ import annotations

import time

from relay.client.fetcher import Fetcher, Spanned


def start_of_last(fetcher: Fetcher, count: int, timeout_s: float = 10.0) -> int:
    """The seq to start reading at (inclusive) to get the last ``count`` verified txs; 0
    (from the earliest) when the stream holds fewer."""
    if count <= 0:
        raise ValueError(f"the last {count} txs: give a count of at least 1")
    deadline = time.monotonic() + timeout_s
    first = fetcher.span_within(0, 0, count + 1, 1, timeout_s)
    if _counted(first) < count:
        return 0
    head = first.verified_seq
    lo, hi = max(0, first.earliest_seq - 1), head  # count(lo) >= count > count(hi) = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        left = max(0.1, deadline - time.monotonic())
        if _counted(fetcher.span_within(mid, head, count + 1, 1, left)) >= count:
            lo = mid
        else:
            hi = mid
    return lo + 1


def _counted(reply: Spanned) -> int:
    return sum(count for _, _, count in reply.bounds)
