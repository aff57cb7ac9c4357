"""The node's gauges, set every half second from the core's and the disk's state.

Each update visits only what can have changed: the streams that are not at rest, the logs the
disk wrote or trimmed, and the consumer groups this node found; so its cost follows activity,
not the number of streams. Per-stream series are bounded (``stream_series``).
"""

from __future__ import annotations

from bisect import bisect_right

from prometheus_client import Counter, Gauge

from relay.client.groups import group_stream, parse_group_stream
from relay.core.events import Restored, Verified
from relay.core.flake import seq_unix_ms
from relay.core.node import NodeCore
from relay.core.status import StreamStatus
from relay.runtime.group_lag import group_lags
from relay.runtime.metrics import NodeMetrics
from relay.runtime.stream_series import OTHERS, StreamGauge, StreamSeries
from relay.storage.node_disk import NodeDisk

GROUP_LAG_EVERY = 10  # gauge turns between two counts of the consumer groups' lag


class Gauges:
    def __init__(self, metrics: NodeMetrics, streams_max: int) -> None:
        self.metrics = metrics
        self.series = StreamSeries(streams_max)
        self.unverified = StreamGauge(metrics.unverified, self.series)
        self.dedup_keys = StreamGauge(metrics.dedup_keys, self.series)
        self.log_bytes = StreamGauge(metrics.log_bytes, self.series)
        self.log_segments = StreamGauge(metrics.log_segments, self.series)
        self.group_streams: set[str] = set()  # the consumer groups' streams seen verified
        self.group_others = False  # the lag of groups without series of their own was set
        self.gauged: set[str] = set()  # streams whose backlog gauge was set above zero
        self.verified_at: dict[str, int] = {}  # stream -> the readable seq last counted
        self.verified_children: dict[str, tuple[Counter, Gauge]] = {}  # label -> its metrics
        self.gauges = 0  # gauge turns so far
        self.syncs_counted = 0  # group commits already added to their counter

    def restored(self, restored: list[Restored]) -> None:
        """What the log held as verified at start is not newly verified: a restart is no
        spike in the count."""
        for r in restored:
            self.verified_at[r.stream] = r.verified_seq
            self._seen(r.stream)

    def _seen(self, stream: str) -> None:
        if parse_group_stream(stream) is not None:
            self.group_streams.add(stream)

    def verified(self, core: NodeCore, v: Verified) -> None:
        """Count the txs that became readable since the last ``Verified`` of the stream (a
        snapshot's jump counts only what the memory ring holds)."""
        state = core.streams.get(v.stream)
        before = self.verified_at.get(v.stream)
        if before is None:
            self._seen(v.stream)
            before = 0
        if state is None or v.seq <= before:
            return
        seqs = state.timeline.seqs
        count = bisect_right(seqs, v.seq) - bisect_right(seqs, before)
        self.verified_at[v.stream] = v.seq
        label = self.series.label(v.stream)
        children = self.verified_children.get(label)
        if children is None:  # a labelled child found once per label, not once per turn
            children = self.verified_children[label] = (
                self.metrics.verified_txs.labels(label),
                self.metrics.verified_time.labels(label),
            )
        children[0].inc(count)
        children[1].set(seq_unix_ms(v.seq) / 1000)

    def update(
        self,
        core: NodeCore,
        disk: NodeDisk,
        requests_open: int,
        answers_waiting: int,
        logs_changed: set[str],
    ) -> None:
        """Gauges from the core's state; only streams that are not at rest can have a lag
        (or a dedup index that changes), and only ``logs_changed`` a log of another size."""
        active = {name for name in core.active if name in core.streams}
        for name in active:
            replica = core.streams[name]
            self.unverified.set(name, StreamStatus.of(replica).unverified_txs)
            self.dedup_keys.set(name, replica.dedup.size())
        for name in self.gauged - active:
            self.unverified.set(name, 0)
        self.gauged = active
        logs = disk.store.logs
        for name in logs_changed & logs.keys():
            self.log_bytes.set(name, logs[name].bytes_on_disk())
            self.log_segments.set(name, len(logs[name].segments))
        self.metrics.peers_up.set(len(core.peers.up_nodes()) - 1)
        self.metrics.parked.set(core.parked.count)
        self.metrics.requests_open.set(requests_open)
        self.metrics.answers_waiting.set(answers_waiting)
        self.metrics.storage_ok.set(0 if core.storage_error else 1)
        syncs = disk.syncer.syncs if disk.syncer else 0
        self.metrics.syncs.inc(syncs - self.syncs_counted)
        self.syncs_counted = syncs
        self.gauges += 1
        if self.gauges % GROUP_LAG_EVERY == 0:  # a span per group: not every gauge turn
            others = 0
            for (group, stream), lag in group_lags(core, self.group_streams).items():
                if self.series.label(group_stream(stream, group)) == OTHERS:
                    others += lag
                else:
                    self.metrics.group_lag.labels(group, stream).set(lag)
            if others or self.group_others:
                self.group_others = True
                self.metrics.group_lag.labels(OTHERS, OTHERS).set(others)
        for state in ("serving", "fenced", "leaving"):
            self.metrics.state.labels(state).set(1 if core.state_name() == state else 0)
