"""One DEALER connection to one node, with request ids and bounded waits."""

from __future__ import annotations

from typing import Any

import msgpack
import zmq

from relay.client.directory import NodeAddress

HWM_FRAMES = 100_000


class Connection:
    def __init__(self, ctx: zmq.Context[Any], address: NodeAddress) -> None:
        self.address = address
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, HWM_FRAMES)
        self.sock.setsockopt(zmq.RCVHWM, HWM_FRAMES)
        self.sock.connect(address.endpoint)

    def send(self, body: bytes) -> None:
        self.sock.send(body)

    def recv(self, timeout_ms: int) -> list[Any] | None:
        """The next reply, decoded, or None if none came within ``timeout_ms``."""
        if not self.sock.poll(timeout_ms):
            return None
        return self.recv_ready()

    def recv_ready(self) -> list[Any] | None:
        try:
            body = self.sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return None
        reply = msgpack.unpackb(body, raw=False, strict_map_key=False)
        if not isinstance(reply, list) or len(reply) < 3:
            raise ValueError(f"node {self.address} sent a malformed reply")
        return reply

    def close(self) -> None:
        self.sock.close(linger=0)
