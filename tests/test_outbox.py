"""The client outbox on real sockets (a ROUTER and a DEALER on 127.0.0.1): answers that find a
connection's queue full wait in order, their requests keep their place in the connection's
share, and a connection that does not read, or went away, costs the node a bounded amount."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import zmq
from prometheus_client import CollectorRegistry, Counter
from waits import until

from relay.config.client_bounds import ClientBounds
from relay.runtime.client_limits import ClientLimits
from relay.runtime.outbox import (
    CONNECTION_BYTES_MAX,
    OTHERS_MAX,
    QUEUED_MAX,
    RETRY_MAX_MS,
    WAIT_MS,
    ClientOutbox,
)

CLIENT = b"client-1"
MIB = 1 << 20


class Rig:
    def __init__(self, ctx: zmq.Context[Any]) -> None:
        self.router = ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.SNDHWM, QUEUED_MAX)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.router.bind("tcp://127.0.0.1:*")  # a free port
        self.dealer = ctx.socket(zmq.DEALER)
        self.dealer.setsockopt(zmq.RCVHWM, 1)
        self.dealer.setsockopt(zmq.ROUTING_ID, CLIENT)
        self.dealer.connect(self.router.getsockopt(zmq.LAST_ENDPOINT).decode())
        self.limits = ClientLimits(ClientBounds(client_inflight_max=1000))
        self.registry = CollectorRegistry()
        self.dropped = Counter("dropped", "answers dropped", registry=self.registry)
        self.outbox = ClientOutbox(self.router, self.limits, self.dropped, 256 << 20)
        assert until(self.hello, lambda sent: sent, timeout_s=5), "the dealer never connected"
        assert self.dealer.recv() == b"hello"

    def hello(self) -> bool:
        """Whether the router could route a hello to the dealer (it has connected)."""
        try:
            self.router.send_multipart((CLIENT, b"hello"), zmq.NOBLOCK)
        except zmq.ZMQError:
            return False
        return True

    def admit(self, ids: range) -> None:
        for req_id in ids:
            assert self.limits.admit(CLIENT, req_id, 10, 0) is None

    def fill(self) -> None:
        """Answers the client does not read, until some wait: the socket's queue and the
        kernel's buffers are full."""
        ids = range(10_000, 10_200)
        self.admit(ids)
        for req_id in ids:
            self.outbox.send(CLIENT, b"f" * (64 << 10), req_id, 0.0)
        before = -1

        def waiting() -> int:
            self.outbox.resend(self.outbox.waiting[CLIENT].due_ms)
            return len(self.outbox.waiting[CLIENT].answers)

        def settled(left: int) -> bool:  # no more room came: the buffers are full
            nonlocal before
            same, before = left == before, left
            return same

        assert until(waiting, settled, timeout_s=5) > 0

    def read_all(self, quiet_ms: int = 200) -> list[bytes]:
        """What the dealer receives until ``quiet_ms`` pass with nothing more."""
        found = []
        while self.dealer.poll(quiet_ms):
            found.append(self.dealer.recv())
        return found

    def dropped_count(self) -> float:
        return self.registry.get_sample_value("dropped_total") or 0.0

    def close(self) -> None:
        self.dealer.close(linger=0)
        self.router.close(linger=0)


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig(zmq.Context.instance())
    try:
        yield made
    finally:
        made.close()


def test_answers_that_find_the_queue_full_wait_in_order_and_then_leave(rig: Rig) -> None:
    rig.fill()
    rig.admit(range(300))
    for req_id in range(300):
        rig.outbox.send(CLIENT, b"answer %d" % req_id, req_id, 0.0)
    waiting = len(rig.outbox.waiting[CLIENT].answers)
    assert waiting >= 300  # behind the filling answers that wait
    assert len(rig.limits.waiting) == waiting  # in the share, not in the node's total
    assert len(rig.limits.open) == waiting
    received: list[bytes] = []
    now = 0.0
    deadline = time.monotonic() + 20
    while rig.outbox.waiting and time.monotonic() < deadline:
        received += rig.read_all(quiet_ms=20)  # the queue's 16, then room for the next ones
        now = rig.outbox.waiting[CLIENT].due_ms
        rig.outbox.resend(now)
    received += rig.read_all()
    assert received[-300:] == [b"answer %d" % i for i in range(300)]
    assert len(received) == 200 + 300
    assert not rig.limits.open and not rig.limits.waiting and not rig.limits.held
    assert rig.outbox.total_bytes == 0
    assert rig.dropped_count() == 0


def test_a_connection_that_does_not_read_is_retried_less_and_less_often(rig: Rig) -> None:
    rig.fill()
    backlog = rig.outbox.waiting[CLIENT]
    delays = []
    for _ in range(10):
        now = backlog.due_ms
        rig.outbox.resend(now)
        delays.append(backlog.due_ms - now)
    assert all(b == min(2 * a, RETRY_MAX_MS) for a, b in pairwise(delays)), delays
    assert delays[-1] == RETRY_MAX_MS
    assert rig.outbox.next_due_ms() == backlog.due_ms


def test_answers_past_the_byte_bound_are_dropped_and_release_their_requests(rig: Rig) -> None:
    rig.fill()
    rig.admit(range(40))
    for req_id in range(40):
        rig.outbox.send(CLIENT, b"y" * MIB, req_id, 0.0)
    backlog = rig.outbox.waiting[CLIENT]
    assert backlog.bytes <= CONNECTION_BYTES_MAX
    assert rig.dropped_count() >= 40 - 16
    assert len(rig.limits.open) == len(backlog.answers)  # the dropped ones let go
    assert rig.outbox.total_bytes == backlog.bytes


def test_one_answer_larger_than_the_bound_still_waits(rig: Rig) -> None:
    rig.fill()
    del rig.outbox.waiting[CLIENT]  # as if those had left: the queue is still full
    rig.outbox.send(CLIENT, b"w" * (CONNECTION_BYTES_MAX + 1), None, 0.0)
    assert len(rig.outbox.waiting[CLIENT].answers) == 1
    assert rig.dropped_count() == 0


def test_answers_outside_the_share_wait_only_a_few_deep(rig: Rig) -> None:
    rig.fill()
    for _ in range(OTHERS_MAX * 3):
        rig.outbox.send(CLIENT, b"busy", None, 0.0)
    assert rig.outbox.waiting[CLIENT].others == OTHERS_MAX
    assert rig.dropped_count() == OTHERS_MAX * 2


def test_answers_that_waited_too_long_are_dropped(rig: Rig) -> None:
    rig.fill()
    waiting = len(rig.outbox.waiting[CLIENT].answers)
    rig.outbox.resend(WAIT_MS + 1)
    assert not rig.outbox.waiting
    assert rig.dropped_count() == waiting
    assert len(rig.limits.open) == 0  # handed over, or dropped: let go
    assert not rig.limits.waiting and rig.outbox.total_bytes == 0


def test_answers_for_a_connection_that_went_away_are_dropped(rig: Rig) -> None:
    """As gone once the socket says so (unroutable), or else as late: either way each
    request lets go of its place in the share."""
    rig.fill()
    waiting = len(rig.outbox.waiting[CLIENT].answers)
    rig.dealer.close(linger=0)
    started = time.monotonic()

    def still_waiting() -> bool:
        rig.outbox.resend((time.monotonic() - started) * 1000)
        return bool(rig.outbox.waiting)

    until(still_waiting, lambda waiting: not waiting, timeout_s=1)
    rig.outbox.resend(WAIT_MS + 1)
    assert not rig.outbox.waiting
    assert 0 < rig.dropped_count() <= waiting  # some may have left before the end was seen
    assert not rig.limits.open and not rig.limits.waiting
    assert rig.outbox.total_bytes == 0
