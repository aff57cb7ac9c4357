"""A node's status, asked over its client port (``relay cluster status``, ``relay stream``)."""

from __future__ import annotations

from typing import Any

import zmq

from relay import errors
from relay.auth.keys import KeyPair, generate
from relay.auth.sockets import connect_to
from relay.client.directory import NodeAddress
from relay.core.status import NodeStatus
from relay.errors import ProtocolError, RelayError
from relay.wire.client import status_request, stream_info_request
from relay.wire.replies import ErrorReply, Reply, StatusReply, StreamInfoReply, decode_reply

STATUS_BYTES_MAX = 64 << 20  # a node's status with streams_max streams is well below this


def node_status(
    address: NodeAddress, timeout_ms: int = 1000, pair: KeyPair | None = None, brief: bool = False
) -> NodeStatus | None:
    """The node's status, or None if it does not answer in time; ``ProtocolError`` if the
    answer is not a status. ``pair``: who asks a node that uses CURVE (default: a new pair,
    which a cluster with ``client_auth = "none"`` admits). ``brief``: no streams in the answer."""
    reply = _ask(address, status_request(1, brief), timeout_ms, pair)
    if reply is not None and not isinstance(reply, StatusReply):
        raise ProtocolError(f"{address} answered a status request with {reply}")
    return reply.status if reply is not None else None


def stream_settings(
    addresses: list[NodeAddress], stream: str, pair: KeyPair, timeout_ms: int = 1000
) -> dict[str, Any]:
    """The settings in force for ``stream`` (``relay stream info``), from the first node that
    answers; ``RelayError`` if none does, ``ProtocolError`` for an answer that is not one."""
    for address in addresses:
        reply = _ask(address, stream_info_request(1, stream), timeout_ms, pair)
        if isinstance(reply, ErrorReply):
            raise RelayError(reply.code, reply.message)
        if reply is not None and not isinstance(reply, StreamInfoReply):
            raise ProtocolError(f"{address} answered a stream info request with {reply}")
        if reply is not None:
            return reply.info
    raise RelayError(errors.UNAVAILABLE, "no node answered a stream info request")


def _ask(
    address: NodeAddress, request: bytes, timeout_ms: int, pair: KeyPair | None
) -> Reply | None:
    """A node's reply to one request, or None if it does not answer in time."""
    ctx: zmq.Context[Any] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, STATUS_BYTES_MAX)  # a larger answer drops the connection
    try:
        if address.public_key is not None:
            connect_to(sock, address.public_key, pair or generate())
        sock.connect(address.endpoint)
        sock.send(request)
        if not sock.poll(timeout_ms):
            return None
        return decode_reply(sock.recv())
    finally:
        sock.close(linger=0)


def statuses(
    addresses: list[NodeAddress], pair: KeyPair, timeout_ms: int = 1000
) -> dict[NodeAddress, NodeStatus | None]:
    """Every node's status, asked of all at once; None where a node did not answer or
    answered with something that is not a status."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(address: NodeAddress) -> NodeStatus | None:
        try:
            return node_status(address, timeout_ms, pair)
        except ProtocolError:
            return None

    with ThreadPoolExecutor(max_workers=max(1, len(addresses))) as pool:
        return dict(zip(addresses, pool.map(ask, addresses), strict=True))
