"""Keys made on first use, for a cluster file whose nodes all run on this machine and that says
so (``local_keys = true``): the file then lists no public key, and every node, client and
operator key it needs is read from ``keys_dir`` (made there the first time, secret halves
readable by their owner only). So the example file at the root of the repository starts a
working local cluster, while a file for several hosts still lists every public key: one whose
node is not on a loopback address is refused.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from pathlib import Path
from typing import Any

from relay.auth import keys, tokens


class LocalKeysError(ValueError):
    pass


def is_loopback(host: str) -> bool:
    """Every address ``host`` names is a loopback address (127.0.0.0/8, ::1)."""
    try:
        found = {str(i[4][0]) for i in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except (socket.gaierror, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in found)


def public_of(folder: Path, name: str) -> str:
    """The public key of ``folder/name``, the pair made first if there is none."""
    try:
        return keys.write(folder, name).public
    except keys.KeyFileError:  # made already (by now, or by a process started beside this one)
        return keys.read(keys.secret_file(folder, name)).public


def fill(where: str, raw: dict[str, Any], base: Path) -> None:
    """Put the local keys into a parsed file that asks for them (``raw`` is changed): each
    node's ``public_key``, and ``client_keys``, ``admin_keys`` and ``client_tokens`` (the
    HTTP API's, ``keys_dir/client.token``) when they are empty."""
    cluster = raw.get("cluster")
    if not isinstance(cluster, dict) or "local_keys" not in cluster:
        return
    wanted = cluster.pop("local_keys")
    if type(wanted) is not bool:
        raise LocalKeysError(f"{where}: 'cluster.local_keys' must be true or false")
    if not wanted:
        return
    nodes = raw.get("node")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        return  # the usual checks say what is wrong
    for i, node in enumerate(nodes):
        host = node.get("host")
        if not isinstance(host, str) or not is_loopback(host):
            raise LocalKeysError(
                f"{where}: 'cluster.local_keys' is for a cluster on this machine, but "
                f"'node[{i}].host' is {host!r:.60}, not a loopback address: list each node's "
                "public_key instead (`relay cluster init` writes them)"
            )
    keys_dir = cluster.get("keys_dir", "keys")
    if type(keys_dir) is not str or not keys_dir:
        return
    folder = (base / keys_dir).resolve()
    for node in nodes:
        if "public_key" not in node and type(node.get("id")) is int:
            node["public_key"] = public_of(folder, f"node-{node['id']}")
    for key, name in (("client_keys", "client"), ("admin_keys", "admin")):
        if not cluster.get(key):
            cluster[key] = [public_of(folder, name)]
    if not cluster.get("client_tokens"):
        cluster["client_tokens"] = [token_hash_of(folder / "client.token")]


def token_hash_of(path: Path) -> str:
    """The hash of the HTTP API's token in ``path``, the token made first if there is none."""
    with contextlib.suppress(tokens.TokenFileError):  # made already
        tokens.write(path, tokens.new_token())
    return tokens.token_hash(tokens.read(path))
