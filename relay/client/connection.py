"""One DEALER connection to one node, with request ids and bounded waits."""

from __future__ import annotations

from typing import Any

import zmq

from relay.auth.keys import KeyPair
from relay.auth.sockets import connect_to
from relay.client.directory import NodeAddress
from relay.errors import ProtocolError
from relay.wire.replies import Reply, decode_reply

HWM_FRAMES = 100_000
# a connection to a node that is down tries again after 100 ms, then twice as long each time up
# to this: its monitor (``ConnectionPool``) then queues at most about one event a second
RECONNECT_MAX_MS = 1000


class Connection:
    def __init__(self, ctx: zmq.Context[Any], address: NodeAddress, pair: KeyPair) -> None:
        """With the node's public key known, the connection is CURVE: encrypted, and only
        the holder of that key's secret half can answer."""
        self.address = address
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, HWM_FRAMES)
        self.sock.setsockopt(zmq.RCVHWM, HWM_FRAMES)
        self.sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
        if address.public_key:
            connect_to(self.sock, address.public_key, pair)
        self.sock.connect(address.endpoint)

    def send(self, body: bytes) -> None:
        self.sock.send(body, copy=False)  # a large request without a copy (one under 64 KiB is)

    def recv_ready(self) -> Reply | None:
        """The next reply if one is there; ``ProtocolError`` if the node sent garbage."""
        try:
            body = self.sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return None
        try:
            return decode_reply(body)
        except ProtocolError as exc:
            raise ProtocolError(f"{self.address}: {exc.message}") from None

    def close(self) -> None:
        self.sock.close(linger=0)
