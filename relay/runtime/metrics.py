"""A node's Prometheus metrics, fed from the core's effects by the shell."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

from relay.runtime import metrics_server


class NodeMetrics:
    def __init__(self, node_id: int, cluster: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.publish_requests = Counter(
            "relay_publish_requests",
            "Publish requests answered, by outcome",
            ["outcome"],
            registry=r,
        )
        self.published_txs = Counter(
            "relay_published_txs", "Transactions acknowledged to producers", registry=r
        )
        self.quorum_latency = Histogram(
            "relay_quorum_latency_seconds",
            "From a publish request to its quorum answer",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.verified_time = Gauge(  # not the seq: a float64 rounds seqs above 2^53
            "relay_verified_timestamp_seconds",
            "Time of the newest transaction a quorum verified, per stream",
            ["stream"],
            registry=r,
        )
        self.verified_txs = Counter(
            "relay_verified_txs",
            "Transactions this node saw become verified, per stream",
            ["stream"],
            registry=r,
        )
        self.unverified = Gauge(
            "relay_unverified_txs",
            "Transactions held but not yet verified (the replication backlog), per stream",
            ["stream"],
            registry=r,
        )
        self.redirects = Counter(
            "relay_redirects", "Requests redirected to a replica of their stream", registry=r
        )
        self.errors = Counter(
            "relay_errors",
            "Errors: malformed frames, bad requests, replies that could not be delivered",
            ["kind"],
            registry=r,
        )
        self.events = Counter(
            "relay_events",
            "Notable events: peers up and down, state changes, epochs, syncs, by kind",
            ["kind"],
            registry=r,
        )
        self.peer_faults = Counter(
            "relay_peer_faults",
            "Mesh frames a peer should not have sent (malformed, or claiming another sender)",
            ["peer"],
            registry=r,
        )
        self.auth_refused = Counter(
            "relay_auth_refused",
            "Connections refused by CURVE authentication, by socket (mesh, client, admin)",
            ["domain"],
            registry=r,
        )
        self.mesh_frames = Counter(
            "relay_mesh_frames", "Mesh frames, by direction", ["direction"], registry=r
        )
        self.mesh_sent = Counter(
            "relay_mesh_messages_sent",
            "Mesh messages sent, by kind (RepairRequest and SyncRequest: anti-entropy)",
            ["kind"],
            registry=r,
        )
        # the children the loop counts with on every frame, looked up once
        self.frames_in = self.mesh_frames.labels("in")
        self.frames_out = self.mesh_frames.labels("out")
        self._sent_by_kind: dict[type, Counter] = {}
        self.loop_turns = Counter(
            "relay_loop_turns", "Turns of the node's event loop that handled input", registry=r
        )
        self.peers_up = Gauge(
            "relay_peers_up", "Peers heard within the suspect timeout", registry=r
        )
        self.state = Gauge(
            "relay_node_state", "1 for the node's current state", ["state"], registry=r
        )
        Info("relay_node", "Which node this is", registry=r).info(
            {"node_id": str(node_id), "cluster": cluster}
        )
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes
        PlatformCollector(registry=r)
        self.storage_ok = Gauge(
            "relay_storage_ok",
            "0 while the disk refuses writes (the node acknowledges nothing)",
            registry=r,
        )
        self.log_bytes = Gauge("relay_log_bytes", "Bytes of a stream's log", ["stream"], registry=r)
        self.log_segments = Gauge(
            "relay_log_segments", "Segment files of a stream's log", ["stream"], registry=r
        )
        self.group_lag = Gauge(
            "relay_group_lag_txs",
            "Transactions after a consumer group's committed position, per group and stream",
            ["group", "stream"],
            registry=r,
        )
        self.queue_jobs = Gauge(
            "relay_queue_jobs",
            "A work group's jobs as this replica folded them, by state: ready, delayed, "
            "claimed, and dead_not_moved (dead, not yet in the dead-letter stream)",
            ["stream", "group", "state"],
            registry=r,
        )
        self.queue_outcomes = Gauge(
            "relay_queue_outcomes",
            "A work group's jobs over its whole history by outcome: acked, dead, expired "
            "(leases that ran out), replaced (coalesced); recounted from the log at a restart",
            ["stream", "group", "outcome"],
            registry=r,
        )
        self.queue_oldest_ready = Gauge(
            "relay_queue_oldest_ready_seconds",
            "How long a work group's oldest ready job has been ready (0: none ready)",
            ["stream", "group"],
            registry=r,
        )
        self.parked = Gauge(
            "relay_parked_fetches", "Consumer fetches waiting for new txs (long polls)", registry=r
        )
        self.requests_open = Gauge(
            "relay_client_requests_open",
            "Client requests taken and not yet answered, log reads waiting included",
            registry=r,
        )
        self.answers_waiting = Gauge(
            "relay_client_answers_waiting_bytes",
            "Bytes of answers waiting in the node for room in their connection's queue "
            "(200 more counted per answer; at most an eighth of memory_bytes_max)",
            registry=r,
        )
        self.dedup_keys = Gauge(
            "relay_dedup_keys",
            "Producer keys the stream's dedup index holds (kept, pending and skipped copies)",
            ["stream"],
            registry=r,
        )
        self.syncs = Counter("relay_log_syncs", "Group commits (fdatasync batches)", registry=r)

    def sent(self, message: object) -> None:
        """Count one mesh message sent."""
        kind = type(message)
        counter = self._sent_by_kind.get(kind)
        if counter is None:
            counter = self._sent_by_kind[kind] = self.mesh_sent.labels(kind.__name__)
        counter.inc()
        self.frames_out.inc()

    def serve(self, host: str, port: int, token_sha256: str = "") -> None:
        metrics_server.serve(self.registry, host, port, token_sha256)
