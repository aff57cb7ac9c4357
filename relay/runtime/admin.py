"""The client side of a node's admin socket (fault injection): one call, one answer."""

from __future__ import annotations

from typing import Any

import msgpack
import zmq


def admin_call(
    address: str, command: str, argument: Any = None, timeout_ms: int = 3000
) -> dict[str, Any]:
    """Send ``[command, argument]`` to ``host:port``; the node's answer, or TimeoutError."""
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(f"tcp://{address}")
        sock.send(msgpack.packb([command, argument]))
        if not sock.poll(timeout_ms):
            raise TimeoutError(
                f"no answer from the admin port {address}; was the node started with --admin-port?"
            )
        reply: dict[str, Any] = msgpack.unpackb(sock.recv(), raw=False)
        return reply
    finally:
        sock.close(linger=0)
