"""Cluster config files for ``relay cluster init``."""

from __future__ import annotations

HEADER = """\
# A relay cluster: every node runs on this machine (see README.md).
# Ports: mesh (node to node PUB/SUB), client (producers and consumers), metrics (Prometheus).

[cluster]
name = "{name}"
heartbeat_ms = 100          # how often each node heartbeats
suspect_after_ms = 1000     # a node silent this long is cut from the streams it replicates
fence_after_ms = 800        # a node that hears no quorum this long fences itself
publish_timeout_ms = 5000   # a publish not verified by a quorum by then gets a timeout error
repair_after_ms = 200       # a gap open this long is repaired from peers
stuck_after_ms = 1000       # peers ahead and no progress this long: catch up by sync
buffer_txs_max = 200000     # verified txs each stream keeps in memory (older ones: from disk)
dedup_window_ms = 120000    # producer retries within this window never duplicate
dedup_keys_max = 200000
quorum = 0                  # 0: a majority of each stream's replicas
payload_bytes_max = 1048576
streams_max = 10000         # streams a node holds at most; idle ones cost no CPU
run_dir = ".relay/{name}"   # pid and log files of `relay cluster up`, relative to this file
fsync = "always"            # always: a vote waits for fdatasync; or "interval", "never"
fsync_interval_ms = 100     # with fsync = "interval"
segment_bytes = 67108864    # a stream's log rolls to a new segment file at this size
segment_ms = 3600000        # or at this age
# each node keeps its logs in <run_dir>/data/node-<id> unless its [[node]] sets data_dir
"""

NODE = """
[[node]]
id = {id}
host = "{host}"
mesh_port = {mesh}
client_port = {client}
metrics_port = {metrics}
streams = [{streams}]
"""


def cluster_toml(
    count: int, host: str = "127.0.0.1", base_port: int = 7100, name: str | None = None
) -> str:
    """3 nodes: every stream everywhere. 5 or more: ``orders.*`` on the first three nodes,
    ``payments.*`` on the last three, ``events.*`` on all; other names have no replicas."""
    name = name or f"local{count}"
    parts = [HEADER.format(name=name)]
    for i in range(1, count + 1):
        if count < 5:
            patterns = ["*"]
        else:
            patterns = ["events.*"]
            if i <= 3:
                patterns.append("orders.*")
            if i > count - 3:
                patterns.append("payments.*")
        parts.append(
            NODE.format(
                id=i,
                host=host,
                mesh=base_port + i,
                client=base_port + 100 + i,
                metrics=base_port + 200 + i,
                streams=", ".join(f'"{p}"' for p in patterns),
            )
        )
    return "".join(parts)
