"""The ``[[node]]`` tables of the cluster file: each node's id, addresses, ports and streams.

Parsing refuses a bad table with a ``NodeError`` naming the key at fault; ``check_unique``
refuses two nodes with one id or one port on one address, ``check_keys`` a CURVE cluster whose
nodes do not each list a key of their own.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from typing import Any

from relay.auth import settings as auth
from relay.auth.settings import AuthSettings
from relay.core.flake import NODE_ID_MAX
from relay.core.routing import NO_NAME_HOLDS

_NODE_KEYS = {"id", "host", "mesh_port", "client_port", "metrics_port", "streams"}
_NODE_OPTIONAL = {"data_dir", "public_key", "bind_host", "metrics_host", "http_port"}
PORT_KEYS = ("mesh_port", "client_port", "metrics_port", "http_port")


class NodeError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class NodeSpec:
    id: int
    host: str
    mesh_port: int
    client_port: int
    metrics_port: int
    streams: tuple[str, ...]
    data_dir: str | None = None  # default: <run_dir>/data/node-<id>
    public_key: str | None = None  # Z85 CURVE key; required unless cluster.security = "none"
    bind_host: str | None = None  # the interface to listen on; default: host
    metrics_host: str | None = None  # the interface /metrics listens on; default: bind_host
    http_port: int | None = None  # the HTTP API and console (None: no HTTP on this node)

    @property
    def listen_host(self) -> str:
        return self.bind_host or self.host

    @property
    def client_address(self) -> str:
        return f"tcp://{self.host}:{self.client_port}"

    @property
    def mesh_address(self) -> str:
        return f"tcp://{self.host}:{self.mesh_port}"

    @property
    def http_address(self) -> str | None:
        if self.http_port is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.http_port}"


def parse_node(where: str, i: int, n: Any) -> NodeSpec:
    label = f"node[{i}]"
    if not isinstance(n, dict):
        raise NodeError(f"{where}: {label} must be a table")
    for key in n:
        if key not in _NODE_KEYS | _NODE_OPTIONAL:
            raise NodeError(
                f"{where}: unknown key '{label}.{key}'; known keys: "
                + ", ".join(sorted(_NODE_KEYS | _NODE_OPTIONAL))
            )
    for key in ("data_dir", "bind_host", "metrics_host"):
        value = n.get(key)
        if value is not None and (type(value) is not str or not value):
            raise NodeError(f"{where}: '{label}.{key}' must be a non-empty string")
    public_key = n.get("public_key")
    if public_key is not None:
        try:
            auth.public_key(where, f"{label}.public_key", public_key)
        except auth.SettingsError as exc:
            raise NodeError(str(exc)) from None
    for key in _NODE_KEYS:
        if key not in n:
            raise NodeError(f"{where}: '{label}.{key}' is missing")
    node_id = n["id"]
    if type(node_id) is not int or not 1 <= node_id <= NODE_ID_MAX:
        raise NodeError(
            f"{where}: '{label}.id' must be an integer in 1..{NODE_ID_MAX}, got {node_id!r}"
        )
    if type(n["host"]) is not str or not n["host"]:
        raise NodeError(f"{where}: '{label}.host' must be a non-empty string")
    for key in PORT_KEYS:
        port = n.get(key)
        if (key in n or key in _NODE_KEYS) and not _is_port(port):
            raise NodeError(
                f"{where}: '{label}.{key}' must be a port number in 1..65535, got {port!r}"
            )
    streams = n["streams"]
    if (
        not isinstance(streams, list)
        or not streams
        or not all(isinstance(s, str) and s for s in streams)
    ):
        raise NodeError(
            f"{where}: '{label}.streams' must be a non-empty list of glob "
            f'patterns such as ["*"] or ["orders.*"], got {streams!r}'
        )
    for pattern in streams:
        if any(c in pattern for c in NO_NAME_HOLDS):
            raise NodeError(
                f"{where}: '{label}.streams' pattern {pattern!r} holds a space, a tab, a line "
                "break or a NUL, which no stream name holds"
            )
    return NodeSpec(
        node_id,
        n["host"],
        n["mesh_port"],
        n["client_port"],
        n["metrics_port"],
        tuple(streams),
        n.get("data_dir"),
        public_key,
        n.get("bind_host"),
        n.get("metrics_host"),
        n.get("http_port"),
    )


def check_unique(where: str, specs: tuple[NodeSpec, ...]) -> None:
    ids: dict[int, int] = {}
    ports: dict[tuple[str, int], str] = {}
    for i, spec in enumerate(specs):
        if spec.id in ids:
            raise NodeError(
                f"{where}: 'node[{i}].id' {spec.id} is also the id of "
                f"node[{ids[spec.id]}]; node ids must be unique"
            )
        ids[spec.id] = i
        addresses = _resolve(where, f"node[{i}].host", spec.host)
        for key in PORT_KEYS:
            port = getattr(spec, key)
            if port is None:
                continue
            for address in addresses:
                owner = ports.get((address, port)) or next(
                    (o for (a, p), o in ports.items() if p == port and WILDCARDS & {a, address}),
                    None,
                )
                if owner:
                    raise NodeError(
                        f"{where}: 'node[{i}].{key}' {port} on {spec.host} ({address}) is "
                        f"already {owner}; every port must be unique per address"
                    )
                ports[(address, port)] = f"node[{i}].{key}"


def check_keys(
    where: str, specs: tuple[NodeSpec, ...], security: AuthSettings
) -> tuple[NodeSpec, ...]:
    """With CURVE every node names its own public key; without, keys are ignored."""
    if not security.curve:
        return tuple(replace(spec, public_key=None) for spec in specs)
    owners: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.public_key is None:
            raise NodeError(
                f"{where}: 'node[{i}].public_key' is missing: with cluster.security = \"curve\" "
                "(the default) every node lists its public key. Make a node's pair with "
                f"`relay keys gen --dir <keys_dir> --name node-{spec.id}` and list the key it "
                'prints, or set security = "none" to run unencrypted'
            )
        other = owners.setdefault(spec.public_key, spec.id)
        if other != spec.id:
            raise NodeError(
                f"{where}: nodes {other} and {spec.id} have the same public_key; every node "
                "needs its own key pair"
            )
    return specs


WILDCARDS = frozenset({"0.0.0.0", "::"})


def _resolve(where: str, key: str, host: str) -> frozenset[str]:
    """The addresses ``host`` names (so that localhost and 127.0.0.1 are one address)."""
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise NodeError(
            f"{where}: '{key}' {host!r} does not resolve to an address ({why})"
        ) from None
    return frozenset(str(info[4][0]) for info in found)


def _is_port(value: object) -> bool:
    return type(value) is int and 1 <= value <= 65535
