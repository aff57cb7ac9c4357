"""The cluster config file (TOML): one ``[cluster]`` table and one ``[[node]]`` table per node
(``relay.config.nodes``), ``[[stream]]`` blocks and ``[[client]]`` tables.

Loading refuses a bad file with a ``ConfigError`` whose message names the key at fault.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from relay.auth import grants, keys, local_keys
from relay.auth import settings as auth
from relay.auth.grants import Grant
from relay.auth.settings import AuthSettings
from relay.config import client_bounds, http_bounds, memory_budget
from relay.config import streams as stream_blocks
from relay.config.client_bounds import ClientBounds
from relay.config.http_bounds import HttpBounds
from relay.config.memory_budget import MemoryBudget
from relay.config.nodes import NodeError, NodeSpec, check_keys, check_unique, parse_node
from relay.config.streams import StreamBlocks
from relay.core.params import CoreConfig, CoreParams
from relay.core.routing import Routing, Subscription
from relay.queue import bounds as queue_bounds
from relay.queue.bounds import QueueBounds
from relay.storage import settings as storage
from relay.storage.settings import StorageSettings

REPLICAS_MIN = 3
METRICS_STREAMS_MAX = 100  # streams with metric series of their own; the rest are summed
MAX_INT = (1 << 63) - 1
# (least, most) of each core setting; every other one is an integer from 1 up
PARAM_BOUNDS = {
    "quorum": (0, 1023),  # 0: a majority of each stream's replicas
    "payload_bytes_max": (1, 16 << 20),  # a request must stay far below a frame's 64 MiB
    "publish_items_max": (1, 1 << 16),
    "dedup_window_ms": (1000, 7 * 24 * 3600 * 1000),  # a retry's window: one second to a week
    "heartbeat_ms": (1, 60_000),
    "promise_lead_ms": (0, 500),  # 0: no lead; far below a seq reservation's reach
    "buffer_bytes_max": (1 << 20, 1 << 40),  # at least one largest payload
}


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    name: str
    path: Path | None
    params: CoreParams
    nodes: tuple[NodeSpec, ...]
    allow_small_replication: bool
    run_dir: Path
    storage: StorageSettings = field(default_factory=StorageSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    clients: ClientBounds = field(default_factory=ClientBounds)
    memory: MemoryBudget = field(default_factory=lambda: MemoryBudget(1 << 30))
    queues: QueueBounds = field(default_factory=QueueBounds)
    http: HttpBounds = field(default_factory=HttpBounds)
    metrics_streams_max: int = METRICS_STREAMS_MAX
    metrics_token_sha256: str = ""  # a scrape of /metrics must carry the token (hex SHA-256)
    grants: dict[str, Grant] = field(default_factory=dict)  # client key -> what it may do
    token_grants: dict[str, Grant] = field(default_factory=dict)  # token hash -> what it may do
    streams: StreamBlocks = field(default_factory=StreamBlocks)

    def node(self, node_id: int) -> NodeSpec:
        for spec in self.nodes:
            if spec.id == node_id:
                return spec
        known = ", ".join(str(n.id) for n in self.nodes)
        raise ConfigError(f"no node with id {node_id} in {self.path}; ids are {known}")

    def data_dir(self, node_id: int) -> Path:
        """Where node ``node_id`` keeps its logs."""
        spec = self.node(node_id)
        if spec.data_dir is None:
            return self.run_dir / "data" / f"node-{node_id}"
        base = self.path.parent if self.path else Path.cwd()
        return (base / spec.data_dir).resolve()

    def keys_dir(self) -> Path:
        """Where this machine's secret keys are (node-<id>, client, admin)."""
        base = self.path.parent if self.path else Path.cwd()
        return (base / self.auth.keys_dir).resolve()

    def subscriptions(self) -> tuple[Subscription, ...]:
        return tuple(Subscription(n.id, n.streams) for n in self.nodes)

    def core_config(self, node_id: int) -> CoreConfig:
        self.node(node_id)
        return CoreConfig(node_id, self.subscriptions(), self.params, self.streams.rules)

    def routing(self) -> Routing:
        return Routing(self.subscriptions(), self.streams.rules)


_PARAM_KEYS = {f.name for f in fields(CoreParams)} - {"votes_wait_for_disk", "rings_bytes_max"}
_CLUSTER_KEYS = (
    {
        "name",
        "allow_small_replication",
        "run_dir",
        "metrics_streams_max",
        "memory_bytes_max",
        "metrics_token_sha256",
    }
    | _PARAM_KEYS
    | storage.KEYS
    | auth.KEYS
    | client_bounds.KEYS
    | http_bounds.KEYS
    | queue_bounds.KEYS
)


def load(path: str | Path) -> ClusterConfig:
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file (see cluster.example.toml)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    try:
        local_keys.fill(str(p), raw, p.parent)
    except (local_keys.LocalKeysError, keys.KeyFileError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    return parse(raw, p)


def parse(raw: dict[str, Any], path: Path | None = None) -> ClusterConfig:
    where = str(path) if path else "config"
    unknown = set(raw) - {"cluster", "node", "client", "stream"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown top-level key {sorted(unknown)[0]!r}; "
            "expected [cluster], [[node]], [[stream]] and [[client]] tables"
        )
    cluster = raw.get("cluster", {})
    if not isinstance(cluster, dict):
        raise ConfigError(f"{where}: 'cluster' must be a table")
    for key in cluster:
        if key not in _CLUSTER_KEYS:
            raise ConfigError(
                f"{where}: unknown key 'cluster.{key}'; known keys: "
                + ", ".join(sorted(_CLUSTER_KEYS))
            )
    defaults = CoreParams()
    params: dict[str, Any] = {}
    try:
        stored = storage.parse(where, cluster)
        listed = grants.parse(where, raw.get("client"))
        if listed.by_key:  # a key with a table of its own is admitted
            cluster = {**cluster, "client_keys": [*cluster.get("client_keys", []), *listed.by_key]}
        security = auth.parse(where, cluster)
    except (storage.SettingsError, auth.SettingsError) as exc:
        raise ConfigError(str(exc)) from None
    if (listed.by_key or listed.by_token) and security.client_auth != "keys":
        raise ConfigError(
            f'{where}: [[client]] tables need cluster.client_auth = "keys": without it a node '
            "cannot tell its clients apart"
        )
    for key in sorted(_PARAM_KEYS):
        value = cluster.get(key, getattr(defaults, key))
        least, most = PARAM_BOUNDS.get(key, (1, MAX_INT))
        if type(value) is not int or not least <= value <= most:
            raise ConfigError(
                f"{where}: 'cluster.{key}' must be an integer from {least} to {most}, got {value!r}"
            )
        params[key] = value
    if params["fence_after_ms"] >= params["suspect_after_ms"]:
        raise ConfigError(
            f"{where}: 'cluster.fence_after_ms' must be less than "
            "'cluster.suspect_after_ms', so that a cut-off node fences itself "
            "before it starts cutting the others"
        )
    if params["suspect_after_ms"] < 2 * params["heartbeat_ms"]:
        raise ConfigError(
            f"{where}: 'cluster.suspect_after_ms' must be at least twice "
            "'cluster.heartbeat_ms', or healthy peers would be cut"
        )
    try:
        bounds = client_bounds.parse(where, cluster, params["payload_bytes_max"])
        memory = memory_budget.parse(where, cluster, bounds.request_bytes_max)
        queues = queue_bounds.parse(where, cluster, memory.total)
        http = http_bounds.parse(where, cluster)
    except ValueError as exc:  # each parser's SettingsError too: the message names the key
        raise ConfigError(str(exc)) from None
    name = cluster.get("name", "relay")
    allow_small = cluster.get("allow_small_replication", False)
    run_dir = cluster.get("run_dir", ".relay")
    for key, value, kind in (
        ("name", name, str),
        ("allow_small_replication", allow_small, bool),
        ("run_dir", run_dir, str),
    ):
        if type(value) is not kind:
            raise ConfigError(f"{where}: 'cluster.{key}' must be a {kind.__name__}, got {value!r}")
    series = cluster.get("metrics_streams_max", METRICS_STREAMS_MAX)
    if type(series) is not int or not 0 <= series <= 100_000:
        raise ConfigError(
            f"{where}: 'cluster.metrics_streams_max' must be an integer from 0 to 100000, "
            f"got {series!r:.60}"
        )
    token = cluster.get("metrics_token_sha256", "")
    if not isinstance(token, str) or (
        token and (len(token) != 64 or token.strip("0123456789abcdef"))
    ):
        raise ConfigError(
            f"{where}: 'cluster.metrics_token_sha256' must be the 64 lower-case hex digits of "
            "a token's SHA-256 (relay keys metrics-token makes one)"
        )
    nodes = raw.get("node")
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError(f"{where}: at least one [[node]] table is required")
    try:
        specs = tuple(parse_node(where, i, n) for i, n in enumerate(nodes))
        check_unique(where, specs)
        specs = check_keys(where, specs, security)
    except NodeError as exc:
        raise ConfigError(str(exc)) from None
    base = path.parent if path else Path.cwd()
    try:
        declared = stream_blocks.parse(
            where,
            raw.get("stream"),
            {spec.id for spec in specs},
            stored,
            params["payload_bytes_max"],
            base,
        )
    except stream_blocks.BlockError as exc:
        raise ConfigError(str(exc)) from None
    config = ClusterConfig(
        name=name,
        path=path,
        params=CoreParams(
            **params, votes_wait_for_disk=stored.votes_wait, rings_bytes_max=memory.rings
        ),
        nodes=specs,
        allow_small_replication=allow_small,
        run_dir=(base / run_dir).resolve(),
        storage=stored,
        auth=security,
        clients=bounds,
        memory=memory,
        queues=queues,
        http=http,
        metrics_streams_max=series,
        metrics_token_sha256=token,
        grants=listed.by_key,
        token_grants=listed.by_token,
        streams=declared,
    )
    if params["quorum"] > len(specs):
        raise ConfigError(
            f"{where}: 'cluster.quorum' is {params['quorum']} but the cluster has "
            f"only {len(specs)} nodes"
        )
    if not allow_small:
        _check_replication(where, config)
    _check_dir(where, "cluster.run_dir", config.run_dir)
    dirs: dict[Path, int] = {}
    for spec in specs:
        _check_dir(where, f"data_dir of node {spec.id}", config.data_dir(spec.id))
        other = dirs.setdefault(config.data_dir(spec.id), spec.id)
        if other != spec.id:
            raise ConfigError(
                f"{where}: nodes {other} and {spec.id} share the data_dir "
                f"{config.data_dir(spec.id)}; every node needs its own"
            )
    return config


def _check_dir(where: str, key: str, path: Path) -> None:
    """A directory that exists, or can be made: no file stands where one of its parents is."""
    for part in (path, *path.parents):
        if part.exists():
            if not part.is_dir():
                raise ConfigError(f"{where}: {key} {path} cannot be made: {part} is a file")
            return


def _check_replication(where: str, config: ClusterConfig) -> None:
    for block in config.streams.blocks:
        count = len(block.rule.nodes)
        if count and count < REPLICAS_MIN:
            raise ConfigError(
                f"{where}: '{block.label}.nodes' names {count} node(s); at least "
                f"{REPLICAS_MIN} are needed to survive a failure. Name more, or set "
                "cluster.allow_small_replication = true"
            )
    routing = Routing(config.subscriptions())
    for i, spec in enumerate(config.nodes):
        for pattern in spec.streams:
            example = "".join("x" if c in "*?[]" else c for c in pattern)
            count = len(routing.replicas_of(example))
            if count < min(REPLICAS_MIN, len(config.nodes)) or count < REPLICAS_MIN:
                raise ConfigError(
                    f"{where}: 'node[{i}].streams' pattern {pattern!r} is replicated by only "
                    f"{count} node(s); at least {REPLICAS_MIN} are needed to survive a failure. "
                    "Add it to more nodes, or set cluster.allow_small_replication = true"
                )
