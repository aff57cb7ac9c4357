"""A node's status, asked over its client port (``relay cluster status``, ``relay stream``)."""

from __future__ import annotations

from typing import Any

import zmq

from relay.auth.keys import KeyPair, generate
from relay.auth.sockets import connect_to
from relay.client.directory import NodeAddress
from relay.core.status import NodeStatus
from relay.errors import ProtocolError
from relay.wire.client import status_request
from relay.wire.replies import StatusReply, decode_reply


def node_status(
    address: NodeAddress, timeout_ms: int = 1000, pair: KeyPair | None = None
) -> NodeStatus | None:
    """The node's status, or None if it does not answer in time; ``ProtocolError`` if the
    answer is not a status. ``pair``: who asks a node that uses CURVE (default: a new pair,
    which a cluster with ``client_auth = "none"`` admits)."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        if address.public_key is not None:
            connect_to(sock, address.public_key, pair or generate())
        sock.connect(address.endpoint)
        sock.send(status_request(1))
        if not sock.poll(timeout_ms):
            return None
        reply = decode_reply(sock.recv())
        if not isinstance(reply, StatusReply):
            raise ProtocolError(f"{address} answered a status request with {reply}")
        return reply.status
    finally:
        sock.close(linger=0)
