"""Per-stream metrics with a bounded number of series: the first ``most`` streams a node
reports get series of their own, every later one is summed under the label ``*`` (which no
stream name may hold), so ``/metrics`` stays small with thousands of streams.

How this works: ``StreamSeries`` names the streams that have series, first come first served
(a restart may pick others). A ``StreamGauge`` sets a named stream's child directly and keeps
the others' last values, so the ``*`` child is their sum, moved by the change of one stream's
value, never recomputed over every stream.
"""

from __future__ import annotations

from prometheus_client import Gauge

OTHERS = "*"  # the label of the streams without series of their own


class StreamSeries:
    def __init__(self, most: int) -> None:
        self.most = most
        self.named: set[str] = set()

    def label(self, stream: str) -> str:
        """``stream``'s label: its name while there is room for its series, else ``*``."""
        if stream in self.named:
            return stream
        if len(self.named) < self.most:
            self.named.add(stream)
            return stream
        return OTHERS


class StreamGauge:
    """One per-stream gauge of which at most ``series.most`` streams have a series."""

    def __init__(self, gauge: Gauge, series: StreamSeries) -> None:
        self.gauge = gauge
        self.series = series
        self.children: dict[str, Gauge] = {}  # label -> its child, found once
        self.others: dict[str, float] = {}  # stream summed under * -> its last value
        self.others_sum = 0.0

    def set(self, stream: str, value: float) -> None:
        label = self.series.label(stream)
        if label == OTHERS:
            self.others_sum += value - self.others.get(stream, 0.0)
            self.others[stream] = value
            value = self.others_sum
        child = self.children.get(label)
        if child is None:
            child = self.children[label] = self.gauge.labels(label)
        child.set(value)
