"""The node's gauges, set every half second from the core's and the disk's state."""

from __future__ import annotations

from bisect import bisect_right

from prometheus_client import Counter, Gauge

from relay.core.events import Restored, Verified
from relay.core.flake import seq_unix_ms
from relay.core.node import NodeCore
from relay.core.status import StreamStatus
from relay.runtime.disk import NodeDisk
from relay.runtime.group_lag import group_lags
from relay.runtime.metrics import NodeMetrics

GROUP_LAG_EVERY = 10  # gauge turns between two counts of the consumer groups' lag


class Gauges:
    def __init__(self, metrics: NodeMetrics) -> None:
        self.metrics = metrics
        self.gauged: set[str] = set()  # streams whose backlog gauge was set above zero
        self.verified_at: dict[str, int] = {}  # stream -> the readable seq last counted
        self.verified_children: dict[str, tuple[Counter, Gauge]] = {}  # stream -> its metrics
        self.gauges = 0  # gauge turns so far
        self.syncs_counted = 0  # group commits already added to their counter

    def restored(self, restored: list[Restored]) -> None:
        """What the log held as verified at start is not newly verified: a restart is no
        spike in the count."""
        for r in restored:
            self.verified_at[r.stream] = r.verified_seq

    def verified(self, core: NodeCore, v: Verified) -> None:
        """Count the txs that became readable since the last ``Verified`` of the stream (a
        snapshot's jump counts only what the memory ring holds)."""
        state = core.streams.get(v.stream)
        before = self.verified_at.get(v.stream, 0)
        if state is None or v.seq <= before:
            return
        seqs = state.timeline.seqs
        count = bisect_right(seqs, v.seq) - bisect_right(seqs, before)
        self.verified_at[v.stream] = v.seq
        children = self.verified_children.get(v.stream)
        if children is None:  # a labelled child found once per stream, not once per turn
            children = self.verified_children[v.stream] = (
                self.metrics.verified_txs.labels(v.stream),
                self.metrics.verified_time.labels(v.stream),
            )
        children[0].inc(count)
        children[1].set(seq_unix_ms(v.seq) / 1000)

    def update(
        self, core: NodeCore, disk: NodeDisk, requests_open: int, answers_waiting: int
    ) -> None:
        """Gauges from the core's state; only streams that are not at rest can have a lag
        (or a dedup index that changes)."""
        active = {name for name in core.active if name in core.streams}
        for name in active:
            replica = core.streams[name]
            self.metrics.unverified.labels(name).set(StreamStatus.of(replica).unverified_txs)
            self.metrics.dedup_keys.labels(name).set(replica.dedup.size())
        for name in self.gauged - active:
            self.metrics.unverified.labels(name).set(0)
        self.gauged = active
        self.metrics.peers_up.set(len(core.peers.up_nodes()) - 1)
        self.metrics.parked.set(core.parked.count)
        self.metrics.requests_open.set(requests_open)
        self.metrics.answers_waiting.set(answers_waiting)
        self.metrics.storage_ok.set(0 if core.storage_error else 1)
        for name, stream_log in disk.store.logs.items():
            self.metrics.log_bytes.labels(name).set(stream_log.bytes_on_disk())
            self.metrics.log_segments.labels(name).set(len(stream_log.segments))
        syncs = disk.syncer.syncs if disk.syncer else 0
        self.metrics.syncs.inc(syncs - self.syncs_counted)
        self.syncs_counted = syncs
        self.gauges += 1
        if self.gauges % GROUP_LAG_EVERY == 0:  # a span per group: not every gauge turn
            for (group, stream), lag in group_lags(core).items():
                self.metrics.group_lag.labels(group, stream).set(lag)
        for state in ("serving", "fenced", "leaving"):
            self.metrics.state.labels(state).set(1 if core.state_name() == state else 0)
