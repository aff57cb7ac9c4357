"""The client side of a node's admin socket (fault injection): one call, one answer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import zmq

from relay.auth.keys import KeyFileError, KeyPair, read, secret_file
from relay.auth.sockets import connect_to
from relay.client.directory import parse_address
from relay.config import load


def admin_call(
    address: str,
    command: str,
    argument: Any = None,
    timeout_ms: int = 3000,
    node_key: str | None = None,
    admin_pair: KeyPair | None = None,
) -> dict[str, Any]:
    """Send ``[command, argument]`` to ``host:port``; the node's answer, or TimeoutError.
    A node that uses CURVE is reached with its public key and an admitted admin pair."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if node_key is not None and admin_pair is not None:
            connect_to(sock, node_key, admin_pair)
        sock.connect(f"tcp://{address}")
        sock.send(msgpack.packb([command, argument]))
        if not sock.poll(timeout_ms):
            raise TimeoutError(
                f"no answer from the admin port {address}; was the node started with "
                "--admin-port, and is the admin key one of its cluster's admin_keys?"
            )
        reply: dict[str, Any] = msgpack.unpackb(sock.recv(), raw=False)
        return reply
    finally:
        sock.close(linger=0)


AdminCall = Callable[[str, Any], dict[str, Any]]


def admin_target(
    address: str, config_path: str | None, node_id: int | None, admin_key: str | None
) -> tuple[str, AdminCall]:
    """``relay fault``'s target: the address, and a call that reaches it with the node's key
    (from ``KEY@host:port`` or ``config_path`` and ``node_id``) and an admin pair (from
    ``admin_key`` or the config's ``keys_dir``). ``ValueError`` says what is missing."""
    target = parse_address(address)
    node_key = target.public_key
    config = load(config_path) if config_path else None
    if config is not None and not config.auth.curve:
        node_key = None
    elif config is not None and node_key is None:
        if node_id is None:
            raise ValueError("--node ID is needed with --config: which node's key to expect")
        node_key = config.node(node_id).public_key
    pair = None
    if node_key is not None:
        if admin_key is not None:
            found = Path(admin_key)
        elif config is not None:
            found = secret_file(config.keys_dir(), "admin")
        else:
            raise ValueError("--admin-key FILE (or --config) is needed to reach a CURVE node")
        try:
            pair = read(found)
        except KeyFileError as exc:
            raise ValueError(str(exc)) from None
    where = f"{target.host}:{target.port}"

    def call(command: str, argument: Any) -> dict[str, Any]:
        return admin_call(where, command, argument, node_key=node_key, admin_pair=pair)

    return where, call
