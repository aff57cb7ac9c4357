"""A client's connections to nodes, polled together, with disconnects noticed at once.

ZeroMQ reconnects silently and drops what was in flight on a connection that broke, so each
connection carries a socket monitor (``relay.wire.monitor``: its pipe never fills, so a pool
nobody polls for a while cannot stop the process's other sockets), polled with the connections
(an event wakes a wait for replies; a monitor is read only when the poll found it readable, so
a reply costs no poll of each monitor): a broken or refused connection, or a CURVE handshake
that failed (the node does not hold the key we expect, or does not admit ours), is reported by
``disconnected`` and the client fails over instead of waiting out a timeout. A node that
refused this client's key is remembered (``refused``) until a handshake with it succeeds: once
every node has, ``refusal`` says so and the client stops with an ``auth`` error.
"""

from __future__ import annotations

import select
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from relay import errors
from relay.auth.keys import KeyPair, generate
from relay.client.connection import Connection
from relay.client.directory import NodeAddress
from relay.wire.drain import holds_more
from relay.wire.monitor import watch
from relay.wire.replies import Reply

_WATCHED = (
    zmq.EVENT_DISCONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_CONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
)


class ConnectionPool:
    def __init__(self, pair: KeyPair | None = None) -> None:
        """``pair``: who this client is to nodes that use CURVE (default: a new pair)."""
        self.pair = pair or generate()
        self.ctx: zmq.Context[Any] = zmq.Context.instance()
        self._conns: dict[NodeAddress, Connection] = {}
        self._monitors: dict[NodeAddress, zmq.Socket[Any]] = {}
        self._by_socket: dict[zmq.Socket[Any], NodeAddress] = {}
        self._by_monitor: dict[zmq.Socket[Any], NodeAddress] = {}
        self._alerted: set[NodeAddress] = set()  # monitors the last poll found readable
        self._poller = zmq.Poller()
        self.refused: set[NodeAddress] = set()  # nodes that refused this client's key

    def get(self, address: NodeAddress) -> Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = Connection(self.ctx, address, self.pair)
            monitor = watch(conn.sock, _WATCHED)
            self._conns[address] = conn
            self._monitors[address] = monitor
            self._by_socket[conn.sock] = address
            self._by_monitor[monitor] = address
            self._poller.register(conn.sock, zmq.POLLIN)
            self._poller.register(monitor, zmq.POLLIN)
        return conn

    def receive(self, wait_ms: float) -> list[tuple[NodeAddress, Reply]]:
        """Every reply that arrives within ``wait_ms`` (returns as soon as one is there, or a
        connection's monitor has news for ``disconnected``). ZeroMQ's poll counts whole
        milliseconds, so a wait of less than one is a ``select`` on the sockets' signalling
        descriptors (microseconds), after a poll that found nothing: a reply then wakes it at
        once, where a sleep would hold it until the next poll."""
        if not self._conns:
            return []
        ready = self._poller.poll(0 if wait_ms < 1 else int(wait_ms))
        if not ready and 0 < wait_ms < 1:
            signals = [sock.getsockopt(zmq.FD) for sock, _ in self._poller.sockets]
            select.select(signals, [], [], wait_ms / 1000)
            ready = self._poller.poll(0)
        out = []
        for sock, _ in ready:
            address = self._by_socket.get(sock)
            if address is None:
                self._alerted.add(self._by_monitor[sock])
                continue
            conn = self._conns[address]
            while (reply := conn.recv_ready()) is not None:
                out.append((address, reply))
                if not holds_more(conn.sock):
                    break
        return out

    def disconnected(self) -> list[NodeAddress]:
        """Connections that broke or could not be made, of those whose monitor the last
        ``receive`` found readable."""
        broken = []
        alerted, self._alerted = self._alerted, set()
        for address, monitor in self._monitors.items():
            if address not in alerted:
                continue
            lost = False
            while monitor.poll(0):
                event = recv_monitor_message(monitor)["event"]
                if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                    self.refused.add(address)
                elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self.refused.discard(address)
                    continue
                lost = lost or event != zmq.EVENT_CONNECTED  # in-flight requests are gone
            if lost:
                broken.append(address)
        return broken

    def refusal(self, addresses: list[NodeAddress]) -> errors.RelayError | None:
        """The ``auth`` error to stop with once every node of ``addresses`` refused this
        client's key, else None."""
        if not addresses or not self.refused.issuperset(addresses):
            return None
        return errors.RelayError(
            errors.AUTH,
            f"every node refused this client's key {self.pair.public} (tried "
            f"{', '.join(map(str, addresses))}): the cluster admits only the client keys it "
            "lists (cluster.client_keys); give a listed key (client_key=, --client-key) or "
            "ask its operator to list this one",
        )

    def drop(self, address: NodeAddress) -> None:
        conn = self._conns.pop(address, None)
        if conn is None:
            return
        monitor = self._monitors.pop(address)
        self._poller.unregister(conn.sock)
        self._poller.unregister(monitor)
        del self._by_socket[conn.sock]
        del self._by_monitor[monitor]
        self._alerted.discard(address)
        conn.sock.disable_monitor()
        monitor.close(linger=0)
        conn.close()

    def close(self) -> None:
        for address in list(self._conns):
            self.drop(address)
