"""The core's settings, taken from the cluster config (all times in ms)."""

from __future__ import annotations

from dataclasses import dataclass

from relay.core.routing import StreamRule, Subscription


@dataclass(frozen=True, slots=True)
class CoreParams:
    heartbeat_ms: int = 100
    suspect_after_ms: int = 1000  # a peer silent this long is suspected dead and cut
    fence_after_ms: int = 800  # hearing no quorum this long fences the node
    publish_timeout_ms: int = 5000
    repair_after_ms: int = 200  # a gap open this long triggers a repair request
    stuck_after_ms: int = 1000  # peers ahead and no progress this long: catch up by sync
    repair_batch_txs_max: int = 2000
    buffer_txs_max: int = 200_000
    buffer_bytes_max: int = 64 << 20  # the memory ring of each stream, by bytes
    rings_bytes_max: int = 1 << 62  # every stream's ring together (the node's memory budget)
    dedup_window_ms: int = 120_000
    dedup_keys_max: int = 200_000
    quorum: int = 0  # 0: a majority of each stream's replicas
    streams_max: int = 10_000
    payload_bytes_max: int = 1 << 20
    publish_items_max: int = 4096
    # a node that originated nothing in a stream for this long promises this far ahead of its
    # clock there, so a replica can fold another origin's tx the moment it arrives
    promise_lead_ms: int = 20
    # a replica whose mark moved waits this long for its peers' own marks to make a quorum
    # before it tells its own, and answers a peer lacking a mark its last ack carried only
    # when its last ack is this old (0: it tells every mark at once)
    mark_again_ms: int = 20
    votes_wait_for_disk: bool = False  # fsync = "always": a vote is the durable head


@dataclass(frozen=True, slots=True)
class CoreConfig:
    node_id: int
    subscriptions: tuple[Subscription, ...]
    params: CoreParams
    rules: tuple[StreamRule, ...] = ()  # the cluster's [[stream]] blocks, first match wins

    def quorum_of(self, replica_count: int) -> int:
        majority = replica_count // 2 + 1
        return min(replica_count, max(majority, self.params.quorum))
