"""The HTTP API's Prometheus metrics, in the node's registry (served on its metrics port)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class HttpMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "relay_http_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            "relay_http_request_seconds",
            "From an HTTP request to the end of its response, by route",
            ["route"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 30, 300),
            registry=registry,
        )
        self.following = Gauge(
            "relay_http_following",
            "Responses that follow a stream, open now",
            registry=registry,
        )
        self.sent_txs = Counter(
            "relay_http_sent_txs", "Transactions written to HTTP responses", registry=registry
        )
        self.published_txs = Counter(
            "relay_http_published_txs",
            "Transactions published through HTTP and acknowledged",
            registry=registry,
        )
