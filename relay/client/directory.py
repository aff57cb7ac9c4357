"""Where a client finds nodes: a cluster config file or a list of ``host:port`` addresses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from relay.auth.keys import KeyPair, client_pair
from relay.auth.settings import KEY_CHARS, is_public_key
from relay.config import load
from relay.config.client_bounds import ClientBounds


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int | None
    host: str
    port: int
    public_key: str | None = None  # the node's CURVE key: talk to no one else there

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

    @property
    def text(self) -> str:
        """``KEY@host:port`` (or ``host:port`` without a key), as ``parse_address`` reads."""
        key = f"{self.public_key}@" if self.public_key else ""
        return f"{key}{self.host}:{self.port}"

    def __str__(self) -> str:
        label = f"node {self.node_id} " if self.node_id is not None else ""
        return f"{label}({self.host}:{self.port})"


def resolve(
    config: str | Path | None = None,
    nodes: list[str] | None = None,
    node: int | None = None,
) -> list[NodeAddress]:
    """The nodes to try, in order; ``node`` (an id from the config) goes first."""
    if config is not None:
        cluster = load(config)
        found = [NodeAddress(n.id, n.host, n.client_port, n.public_key) for n in cluster.nodes]
    elif nodes:
        found = [parse_address(a) for a in nodes]
    else:
        raise ValueError("give a cluster config file or a list of node addresses (host:port)")
    if node is not None:
        first = [a for a in found if a.node_id == node]
        if not first:
            ids = ", ".join(str(a.node_id) for a in found)
            raise ValueError(f"no node with id {node}; the config has {ids}")
        found = first + [a for a in found if a.node_id != node]
    return found


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """What one publish request and one message may hold: the cluster file's
    ``request_bytes_max`` and ``payload_bytes_max``; without a file, a node's defaults for the
    request (a larger one would drop the connection) and no message check (the node answers)."""

    request_bytes: int = ClientBounds().request_bytes_max
    message_bytes: int | None = None


def request_limits(config: str | Path | None) -> RequestLimits:
    if config is None:
        return RequestLimits()
    cluster = load(config)
    return RequestLimits(cluster.clients.request_bytes_max, cluster.params.payload_bytes_max)


def identity(config: str | Path | None, client_key: str | Path | None = None) -> KeyPair:
    """Who a client is to nodes that use CURVE: the key in ``client_key`` (a .key_secret
    file), else the cluster's ``client.key_secret`` if this machine has it, else a new pair
    (which a cluster with ``client_auth = "none"`` admits)."""
    keys_dir = load(config).keys_dir() if config is not None else None
    return client_pair(keys_dir, client_key)


def addresses_of(rows: Iterable[tuple[int, str, int, str]]) -> list[NodeAddress]:
    """Node addresses as a node names them in a redirect or an error: (id, host, port, key).
    The node that names them was authenticated, so its word on its peers' keys is taken."""
    return [NodeAddress(n, h, p, k or None) for n, h, p, k in rows]


def parse_address(text: str) -> NodeAddress:
    """``host:port``, or ``KEY@host:port`` for a node that uses CURVE (KEY: its 40-character
    public key, which may itself contain ``@`` and ``:``)."""
    rest = text.removeprefix("tcp://")
    key = None
    if len(rest) > KEY_CHARS and rest[KEY_CHARS] == "@":
        key, rest = rest[:KEY_CHARS], rest[KEY_CHARS + 1 :]
        if not is_public_key(key):
            raise ValueError(f"node address {text!r}: {key!r} is not a public key")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"node address {text!r} is not host:port or KEY@host:port")
    return NodeAddress(None, host, int(port), key)
