"""What the nodes hold of each stream, as ``relay stream`` and the HTTP API show it."""

from __future__ import annotations

from datetime import UTC, datetime

from relay.core.flake import seq_unix_ms
from relay.core.status import NodeStatus, StreamStatus


def held_by_node(statuses: list[NodeStatus]) -> dict[str, dict[int, StreamStatus]]:
    """stream -> node -> that node's figures."""
    held: dict[str, dict[int, StreamStatus]] = {}
    for status in statuses:
        for s in status.streams:
            held.setdefault(s.name, {})[status.node] = s
    return held


def seq_time(seq: int) -> str:
    if not seq:
        return "-"
    try:
        when = datetime.fromtimestamp(seq_unix_ms(seq) / 1000, UTC)
    except (OverflowError, ValueError, OSError):  # a node reported a seq out of any range
        return f"(seq {seq})"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def stream_json(s: StreamStatus) -> dict[str, object]:
    return {
        "replicas": list(s.replicas),
        "verified_seq": str(s.verified_seq),
        "verified_time": seq_time(s.verified_seq),
        "head_seq": str(s.head_seq),
        "unverified_txs": s.unverified_txs,
        "first_seq": str(s.log_first_seq),
        "first_time": seq_time(s.log_first_seq),
        "txs": s.log_txs,
        "bytes": s.log_bytes,
        "catchup": s.catchup,
    }
