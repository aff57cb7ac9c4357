"""The answers to clients on their way out: handed to the client socket, or waiting for room.

How this works: the socket queues at most ``QUEUED_MAX`` answers per connection
(``ZMQ_SNDHWM``), and libzmq gives room back only in steps of half of that, once its I/O
thread has moved what the queue held. So one turn answering dozens of a producer's requests at
once (all verified by the same ack) can find the queue full while the client reads
everything: a producer with 48 requests in flight would lose answers and wait out its request
timeout for each. An answer that finds the queue full waits here, and so does every later
answer for that connection (answers stay in order). ``resend`` hands over what fits, first
after a millisecond, then after twice as long each time nothing moved (at most
``RETRY_MAX_MS``), so a connection that stopped reading costs the loop little.

A waiting answer's request keeps its place in the connection's share (``ClientLimits``) until
the answer is handed over, but no longer counts towards the node's total, which bounds the work
in the core. What a connection that does not read can make the node hold is bounded:
``CONNECTION_BYTES_MAX`` of answers (with ``ENTRY_BYTES`` for each answer's bookkeeping; one
answer may always wait), ``OTHERS_MAX`` answers to requests outside the share (refusals, spans,
status), and ``bytes_max`` over all connections (the memory budget's share); an answer past a
bound, every answer of a connection whose oldest waited ``WAIT_MS``, and an answer for a
connection that went away are dropped and counted (``reply_undeliverable``).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

import zmq
from prometheus_client import Counter

from relay.runtime.client_limits import ClientLimits

log = logging.getLogger("relay.node")

QUEUED_MAX = 16  # answers the socket queues per connection (the memory budget cuts fetches)
ENTRY_BYTES = 200  # what a waiting answer costs besides its bytes
CONNECTION_BYTES_MAX = 16 << 20
OTHERS_MAX = 64
WAIT_MS = 3_000  # a producer gives a request up after 3 s
RETRY_FIRST_MS, RETRY_MAX_MS = 1, 64

NOBLOCK: Final = int(zmq.NOBLOCK)
ROUTE_FLAGS: Final = int(zmq.NOBLOCK | zmq.SNDMORE)  # the connection's id, then the answer

Answer = tuple[bytes, int | None, float]  # body, the admitted request's id, since (ms)


@dataclass(slots=True)
class _Backlog:
    due_ms: float  # when to try again
    answers: deque[Answer] = field(default_factory=deque)
    bytes: int = 0
    others: int = 0  # answers to requests outside the share
    delay_ms: float = RETRY_FIRST_MS


class ClientOutbox:
    def __init__(
        self, sock: zmq.Socket[Any], limits: ClientLimits, dropped: Counter, bytes_max: int
    ) -> None:
        self.sock = sock
        self.bytes_max = bytes_max  # what the answers waiting here may hold together
        self.limits = limits
        self.dropped = dropped  # reply_undeliverable
        self.waiting: dict[bytes, _Backlog] = {}  # connection -> its answers waiting
        self.total_bytes = 0

    def send(self, client: bytes, body: bytes, admitted: int | None, now_ms: float) -> None:
        """Hand an answer to the socket, or let it wait behind the connection's waiting
        answers; ``admitted``: the id of the share's request it answers."""
        backlog = self.waiting.get(client)
        if backlog is None:
            handed = self._hand_over(client, body)
            if handed:
                if admitted is not None:
                    self.limits.done(client, admitted)
                return
            if handed is not None:
                self._drop(client, [(body, admitted, now_ms)], "it went away")
                return
            backlog = self.waiting[client] = _Backlog(now_ms + RETRY_FIRST_MS)
        cost = len(body) + ENTRY_BYTES
        if backlog.answers and (
            backlog.bytes + cost > CONNECTION_BYTES_MAX
            or self.total_bytes + cost > self.bytes_max
            or (admitted is None and backlog.others >= OTHERS_MAX)
        ):
            self._drop(client, [(body, admitted, now_ms)], "too many answers wait for it")
            return
        backlog.answers.append((body, admitted, now_ms))
        backlog.bytes += cost
        backlog.others += admitted is None
        self.total_bytes += cost
        if admitted is not None:
            self.limits.answer_waits(client, admitted)

    def next_due_ms(self) -> float | None:
        """When ``resend`` has something to try, if any answer waits."""
        return min(b.due_ms for b in self.waiting.values()) if self.waiting else None

    def resend(self, now_ms: float) -> None:
        """Hand over, in order, the waiting answers that fit now; drop every answer of a
        connection whose oldest still waits after ``WAIT_MS``."""
        for client, backlog in list(self.waiting.items()):
            if backlog.due_ms > now_ms:
                continue
            answers, moved, gone = backlog.answers, False, False
            while answers:
                body, admitted, _ = answers[0]
                handed = self._hand_over(client, body)
                if not handed:
                    gone = handed is False
                    break
                answers.popleft()
                self._forget(backlog, body, admitted)
                if admitted is not None:
                    self.limits.done(client, admitted)
                moved = True
            if answers and (gone or now_ms - answers[0][2] > WAIT_MS):
                why = "it went away" if gone else f"its answers waited {WAIT_MS} ms"
                self._drop(client, list(answers), why)
                for body, admitted, _ in answers:
                    self._forget(backlog, body, admitted)
                answers.clear()
            if not answers:
                del self.waiting[client]
                continue
            backlog.delay_ms = RETRY_FIRST_MS if moved else min(backlog.delay_ms * 2, RETRY_MAX_MS)
            backlog.due_ms = now_ms + backlog.delay_ms

    def _hand_over(self, client: bytes, body: bytes) -> bool | None:
        """Send an answer: True if handed over, False if the connection went away, None if
        its queue is full."""
        try:  # part by part: ``send_multipart`` is Python code, 2.6 us more per answer
            self.sock.send(client, ROUTE_FLAGS)
            # a large answer (a fetch's txs) without a copy, as the mesh's bundles
            self.sock.send(body, NOBLOCK, copy=False)
        except zmq.Again:
            return None
        except zmq.ZMQError:  # the client went away (ROUTER_MANDATORY: unroutable)
            return False
        return True

    def _forget(self, backlog: _Backlog, body: bytes, admitted: int | None) -> None:
        cost = len(body) + ENTRY_BYTES
        backlog.bytes -= cost
        backlog.others -= admitted is None
        self.total_bytes -= cost

    def _drop(self, client: bytes, answers: list[Answer], why: str) -> None:
        self.dropped.inc(len(answers))
        log.debug("dropped %d answers to a client: %s", len(answers), why)
        for _, admitted, _ in answers:
            if admitted is not None:
                self.limits.done(client, admitted)
