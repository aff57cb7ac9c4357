"""A ZeroMQ socket's connection events, read from a pipe that never fills.

libzmq's I/O thread writes a monitored socket's events into an inproc pipe and, once the pipe
holds its high-water mark (1,000 messages; what ``Socket.get_monitor_socket`` gives), blocks
until they are read: and with it every socket of the context stops, the process's whole
messaging. A client whose owner does not poll it for a while, connected to a node that is
down, queues an event per reconnect attempt, so it would freeze its process after about
1,000 attempts. The reading end made here asks for no limit, so the pipe grows instead: each
queued event is two small messages (about 250 bytes of the process's memory, measured), and
the owner bounds how many by how often it reconnects and how often it reads.
"""

from __future__ import annotations

from itertools import count
from typing import Any

import zmq

_endpoints = count()  # each monitor binds its own inproc endpoint in the context


def watch(sock: zmq.Socket[Any], events: int) -> zmq.Socket[Any]:
    """A PAIR socket that receives ``sock``'s ``events``; stop with ``sock.disable_monitor()``
    before closing it (libzmq would block writing to a pipe nobody reads)."""
    endpoint = f"inproc://relay.monitor.{next(_endpoints)}"
    sock.monitor(endpoint, events)
    monitor: zmq.Socket[Any] = sock.context.socket(zmq.PAIR)
    monitor.setsockopt(zmq.RCVHWM, 0)  # with the receiver's 0, the pipe has no limit
    monitor.connect(endpoint)
    return monitor
