"""What a node of a cluster file trusts: its own key pair, and the keys each socket admits."""

from __future__ import annotations

from relay.auth import keys
from relay.auth.keys import KeyPair
from relay.auth.sockets import ADMIN_DOMAIN, CLIENT_DOMAIN, MESH_DOMAIN
from relay.auth.zap import ANY
from relay.config import ClusterConfig


def node_pair(config: ClusterConfig, node_id: int) -> KeyPair | None:
    """The node's pair from ``<keys_dir>/node-<id>.key_secret`` (None without CURVE);
    ``KeyFileError`` if it is missing or is not the pair the config names."""
    if not config.auth.curve:
        return None
    path = keys.secret_file(config.keys_dir(), f"node-{node_id}")
    pair = keys.read(path)
    listed = config.node(node_id).public_key
    if pair.public != listed:
        raise keys.KeyFileError(
            f"{path} holds the pair of public key {pair.public}, but {config.path} lists "
            f"{listed} for node {node_id}: copy the right key file here or fix public_key"
        )
    return pair


def admitted(config: ClusterConfig) -> dict[str, dict[str, str] | None]:
    """Per ZAP domain, the client keys admitted and the user id each is known as."""
    nodes = {n.public_key: str(n.id) for n in config.nodes if n.public_key}
    # a node asks the others' client ports for their status (its HTTP API's cluster views)
    clients = (
        {**{k: k for k in config.auth.client_keys}, **{k: f"node-{n}" for k, n in nodes.items()}}
        if config.auth.client_auth == "keys"
        else ANY
    )
    admins = {k: "admin" for k in config.auth.admin_keys}
    return {MESH_DOMAIN: nodes, CLIENT_DOMAIN: clients, ADMIN_DOMAIN: admins}
