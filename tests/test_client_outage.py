"""Clients of a cluster that is down wait between attempts instead of spinning: each attempt
is a new connection, and libzmq holds at most 1,023 sockets per context (a chaos run's 15
consumers made about 12,000 connections in 40 s of power losses, its 15 producers as many,
and they died of ``Too many open files``)."""

import socket
import time
from typing import Any

import pytest

from relay.client.connection import Connection
from relay.client.consumer import Consumer
from relay.client.producer import Producer


def closed_ports(n: int) -> list[str]:
    """``host:port`` of ports nothing listens on (bound, then closed)."""
    found = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            found.append(f"127.0.0.1:{s.getsockname()[1]}")
    return found


def counting_connections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made = [0]
    original = Connection.__init__

    def counted(self: Connection, *args: Any) -> None:
        made[0] += 1
        original(self, *args)

    monkeypatch.setattr(Connection, "__init__", counted)
    return made


def test_a_producer_of_a_cluster_that_is_down_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    made = counting_connections(monkeypatch)
    with Producer(nodes=closed_ports(3), timeout_s=3.0, request_timeout_s=1.0) as producer:
        future = producer.send("s", b"x")
        producer.flush()
    assert future.failed()
    assert made[0] <= 12, f"{made[0]} connections in 3 s: it tried again without waiting"


def test_a_consumer_of_a_cluster_that_is_down_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    made = counting_connections(monkeypatch)
    with Consumer("s", nodes=closed_ports(3), reply_timeout_s=1.0, verify=False) as consumer:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert consumer.poll(timeout_s=0.2) == []
    assert made[0] <= 20, f"{made[0]} connections in 2 s: it tried again without waiting"
