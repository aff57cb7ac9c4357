"""How many connections the client port holds, per address and in all, and the cut of those
over the bounds (``client_connections_per_address_max``, ``client_connections_max``).

How this works: ZeroMQ accepts every TCP connection and has no per-peer limit, so the node
watches its client socket with a monitor: each accepted connection's file descriptor names its
peer (``getpeername`` on a duplicate of it). One over a bound is shut down at once
(``shutdown`` on the duplicate: libzmq sees the connection end and closes it as if the peer had
gone), before it can hold a file descriptor for long or send a request; a connection that
never completes its handshake is dropped by libzmq after ``HANDSHAKE_MS``. Every descriptor the
node needs for its peers and its files stays free, so a flood of idle connections can neither
fence the node nor cut its epoch. A descriptor the monitor names may already belong to another
socket by the time its event is read; only one whose local port is the client port is counted.
"""

from __future__ import annotations

import os
import socket
from collections import Counter
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from relay.wire.monitor import watch

EVENTS_PER_TURN = 2000
HANDSHAKE_MS = 5000  # a connection that has not completed its handshake by then is dropped
BACKLOG = 1024  # connections the kernel queues before libzmq accepts them (a burst of clients)


class ClientConnections:
    def __init__(
        self, sock: zmq.Socket[Any], port: int, per_address_max: int, total_max: int
    ) -> None:
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
        sock.setsockopt(zmq.BACKLOG, BACKLOG)
        self.sock = sock
        # a pipe with no limit (``relay.wire.monitor``): its events are drained every turn
        self.monitor = watch(sock, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self.port = port
        self.per_address_max = per_address_max
        self.total_max = total_max
        self.by_fd: dict[int, str] = {}  # the connections counted, by descriptor
        self.by_address: Counter[str] = Counter()

    def drain(self) -> list[str]:
        """Take the monitor's events; the addresses of the connections shut for a bound."""
        refused: list[str] = []
        for _ in range(EVENTS_PER_TURN):
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            event = parse_monitor_message(frames)
            fd = event["value"]
            if event["event"] == zmq.EVENT_ACCEPTED:
                address = self._accepted(fd)
                if address is not None:
                    refused.append(address)
            else:
                self._gone(fd)
        return refused

    def _accepted(self, fd: int) -> str | None:
        """Count a new connection, or shut it if over a bound (then its address)."""
        self._gone(fd)  # a descriptor seen before was closed and reused
        try:
            conn = socket.socket(fileno=os.dup(fd))
        except OSError:
            return None  # already closed
        try:
            if conn.getsockname()[1] != self.port:
                return None
            address = str(conn.getpeername()[0])
            if (
                self.by_address[address] >= self.per_address_max
                or len(self.by_fd) >= self.total_max
            ):
                conn.shutdown(socket.SHUT_RDWR)
                return address
            self.by_fd[fd] = address
            self.by_address[address] += 1
            return None
        except OSError:
            return None  # the peer went away meanwhile, or the descriptor is another socket's
        finally:
            conn.close()

    def _gone(self, fd: int) -> None:
        address = self.by_fd.pop(fd, None)
        if address is not None:
            self.by_address[address] -= 1
            if not self.by_address[address]:
                del self.by_address[address]

    def close(self) -> None:
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
