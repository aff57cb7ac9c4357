"""``relay_queue_*``: the work groups this node folds, as gauges.

How this works: every gauge turn reads each group's counts (``QueueState.counts``, a few
sums, no walk over the jobs) and its oldest ready job (the head of each priority's queues).
Groups get series of their own while the node's per-stream series have room
(``StreamSeries``, keyed by the group's control stream); the others are summed under ``*``.
"""

from __future__ import annotations

from collections import Counter

from relay.queue.service import QueueService
from relay.runtime.metrics import NodeMetrics
from relay.runtime.stream_series import OTHERS, StreamSeries

STATES = ("ready", "delayed", "claimed", "dead_not_moved")
OUTCOMES = ("acked", "dead", "expired", "replaced")


class QueueGauges:
    def __init__(self, metrics: NodeMetrics, series: StreamSeries) -> None:
        self.metrics = metrics
        self.series = series
        self.others_seen = False  # groups without series of their own were counted

    def update(self, queues: QueueService, wall_ms: int) -> None:
        m = self.metrics
        others: Counter[str] = Counter()
        summed = False
        for group in queues.groups.values():
            state = group.follower.state
            counts = state.counts()
            if self.series.label(group.control) == OTHERS:
                summed = True
                others.update(counts)
                continue
            labels = (group.stream, group.group)
            for name in STATES:
                m.queue_jobs.labels(*labels, name).set(counts[name])
            for name in OUTCOMES:
                m.queue_outcomes.labels(*labels, name).set(counts[name])
            oldest = state.waiting.oldest_ready_ms()
            age_s = max(0, wall_ms - oldest) / 1000 if oldest else 0.0
            m.queue_oldest_ready.labels(*labels).set(age_s)
        if summed or self.others_seen:
            self.others_seen = True
            for name in STATES:
                m.queue_jobs.labels(OTHERS, OTHERS, name).set(others[name])
            for name in OUTCOMES:
                m.queue_outcomes.labels(OTHERS, OTHERS, name).set(others[name])
