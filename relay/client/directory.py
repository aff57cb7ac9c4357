"""Where a client finds nodes: a cluster config file or a list of ``host:port`` addresses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from relay.config import load


@dataclass(frozen=True, slots=True)
class NodeAddress:
    node_id: int | None
    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"tcp://{self.host}:{self.port}"

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
        found = [NodeAddress(n.id, n.host, n.client_port) for n in cluster.nodes]
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


def addresses_of(rows: Iterable[tuple[int, str, int]]) -> list[NodeAddress]:
    """Node addresses as a node names them in a redirect or an error: (id, host, port)."""
    return [NodeAddress(n, h, p) for n, h, p in rows]


def parse_address(text: str) -> NodeAddress:
    host, sep, port = text.removeprefix("tcp://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"node address {text!r} is not host:port")
    return NodeAddress(None, host, int(port))
