"""Cluster config files for ``relay cluster init``."""

from __future__ import annotations

from relay.auth.keys import ClusterKeys

HEADER = """\
# A relay cluster: every node runs on this machine (see README.md).
# Ports: mesh (node to node PUB/SUB), client (producers and consumers), metrics (Prometheus),
# http (the HTTP API and the console page).

[cluster]
name = "{name}"
heartbeat_ms = 100          # how often each node heartbeats
suspect_after_ms = 1000     # a node silent this long is cut from the streams it replicates
fence_after_ms = 800        # a node that hears no quorum this long fences itself
publish_timeout_ms = 5000   # a publish not verified by a quorum by then gets a timeout error
repair_after_ms = 200       # a gap open this long is repaired from peers
stuck_after_ms = 1000       # peers ahead and no progress this long: catch up by sync
buffer_txs_max = 200000     # verified txs each stream keeps in memory (older ones: from disk)
buffer_bytes_max = 67108864 # and at most this many bytes of them (64 MiB)
memory_bytes_max = 0        # each node's memory budget: rings, answers, requests (0: 1/8 of RAM)
queue_group_bytes_max = 16777216  # a work group's fold in memory (16 MiB; more waits on disk)
queue_groups_max = 0        # work groups a node folds (0: half of memory_bytes_max of them)
dedup_window_ms = 120000    # producer retries within this window never duplicate
dedup_keys_max = 200000
quorum = 0                  # 0: a majority of each stream's replicas
payload_bytes_max = 1048576
request_bytes_max = 8388608 # one client request at most (a larger one drops the connection)
client_inflight_max = 256   # requests one connection may have unanswered (then: busy)
client_inflight_bytes_max = 67108864  # and their bytes
client_connections_max = 10000  # connections the client port holds (more are shut at once)
client_connections_per_address_max = 1000  # from one address
streams_max = 10000         # streams a node holds at most; idle ones cost no CPU
metrics_streams_max = 100   # streams with metric series of their own; the rest: stream="*"
metrics_token_sha256 = ""   # a scrape of /metrics must carry this token (relay keys metrics-token)
run_dir = "{run_dir}"   # pid and log files of `relay cluster up`, relative to this file
fsync = "always"            # always: a vote waits for fdatasync; or "interval", "never"
fsync_interval_ms = 100     # with fsync = "interval"
segment_bytes = 67108864    # a stream's log rolls to a new segment file at this size
segment_ms = 3600000        # or at this age
# each node keeps its logs in <run_dir>/data/node-<id> unless its [[node]] sets data_dir
"""

SECURITY = """security = "curve"          # CurveZMQ on every socket; node public keys below
keys_dir = "{keys_dir}"    # secret keys: node-<id>, client and admin .key_secret files
client_auth = "keys"        # admit only the clients listed in client_keys ("none": any client)
client_keys = ["{client}"]
client_tokens = ["{token}"]  # SHA-256 of the HTTP API's bearer tokens (keys_dir/client.token)
admin_keys = ["{admin}"]   # who may use a node's --admin-port
"""

UNSECURED = """security = "none"           # no encryption or authentication: trusted networks only
"""

NODE = """
[[node]]
id = {id}
host = "{host}"
mesh_port = {mesh}
client_port = {client}
metrics_port = {metrics}
http_port = {http}
streams = [{streams}]
{public_key}"""


def cluster_toml(
    count: int,
    host: str = "127.0.0.1",
    base_port: int = 7100,
    name: str | None = None,
    keys: ClusterKeys | None = None,
    keys_dir: str = "keys",
    run_dir: str | None = None,
) -> str:
    """3 nodes: every stream everywhere. 5 or more: ``orders.*`` on the first three nodes,
    ``payments.*`` on the last three, ``events.*`` on all; other names have no replicas.
    With ``keys`` every socket uses CURVE; without, the file says ``security = "none"``."""
    name = name or f"local{count}"
    parts = [HEADER.format(name=name, run_dir=run_dir or f".relay/{name}")]
    if keys is None:
        parts.append(UNSECURED)
    else:
        parts.append(
            SECURITY.format(
                keys_dir=keys_dir,
                client=keys.client,
                admin=keys.admin,
                token=keys.client_token_sha256,
            )
        )
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
                http=base_port + 400 + i,
                streams=", ".join(f'"{p}"' for p in patterns),
                public_key=f'public_key = "{keys.nodes[i]}"\n' if keys else "",
            )
        )
    return "".join(parts)
