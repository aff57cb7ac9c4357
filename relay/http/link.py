"""The HTTP API's way into its own node: client port requests over an in-process connection.

How this works: the node binds its client port's ROUTER to ``ENDPOINT`` as well as to TCP. An
in-process connection has no CURVE handshake, so the node takes it as its own (the HTTP API
checks each of its clients' tokens and grants itself). Each HTTP request takes a ``Channel`` (a
DEALER) of its own, so the client port's per-connection bounds apply to it alone, and gives it
back when done; a channel left with a request unanswered (its HTTP client went away, or the
node did not answer in time) is closed, never reused, so no late reply reaches another request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from relay import errors
from relay.wire.replies import AcksReply, ErrorReply, ErrorRow, Reply, decode_reply

ENDPOINT = "inproc://relay-http"
IDLE_MAX = 64  # channels kept open for the next requests
WINDOW = 32  # requests one channel has in flight at once (the client port allows 256)
REPLY_BYTES_MAX = 256 << 20  # a node's reply is far below this
RETRY_S = 5.0  # how long a request waits out the node's transient refusals
RETRY_PAUSE_S = 0.1
TRANSIENT = frozenset({errors.UNAVAILABLE, errors.BUSY})  # nothing was taken: ask again


class LinkTimeout(Exception):
    """The node did not answer in time."""


class Unsendable(ValueError):
    """A request the wire cannot carry (text that is not UTF-8, an integer past 64 bits)."""


class Channel:
    def __init__(self, sock: zmq.asyncio.Socket) -> None:
        self.sock = sock
        self.next_id = 1
        self.clean = True  # no request is waiting for an answer

    async def ask(self, make: Callable[[int], bytes], timeout_s: float) -> Reply:
        """The node's reply to the request ``make(req_id)``; ``LinkTimeout`` if none comes in
        time; ``ProtocolError`` if the node's reply is not one."""
        return (await self.ask_all([make], timeout_s))[0]

    async def ask_patiently(self, make: Callable[[int], bytes], timeout_s: float) -> Reply:
        """``ask``, a transient refusal (the node fenced a moment, catching up with a stream it
        just took, busy) waited out for up to ``RETRY_S``."""
        loop = asyncio.get_running_loop()
        gives_up = loop.time() + RETRY_S
        while True:
            reply = await self.ask(make, timeout_s)
            if not transient(reply) or loop.time() >= gives_up:
                return reply
            await asyncio.sleep(RETRY_PAUSE_S)

    async def ask_all(
        self, makers: Sequence[Callable[[int], bytes]], timeout_s: float
    ) -> list[Reply]:
        """The replies to several requests, in their order, at most ``WINDOW`` in flight."""
        replies: list[Reply] = []
        for start in range(0, len(makers), WINDOW):
            replies += await self._window(makers[start : start + WINDOW], timeout_s)
        return replies

    async def _window(
        self, makers: Sequence[Callable[[int], bytes]], timeout_s: float
    ) -> list[Reply]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        ids = []
        try:
            bodies = [make(self.next_id + i) for i, make in enumerate(makers)]
        except (ValueError, OverflowError, TypeError, msgspec.EncodeError) as exc:
            raise Unsendable(f"the request cannot be sent to the node: {exc}") from None
        self.clean = False
        for body in bodies:
            ids.append(self.next_id)
            await self.sock.send(body, copy=False)
            self.next_id += 1
        got: dict[int, Reply] = {}
        while len(got) < len(ids):
            left = deadline - loop.time()
            if left <= 0 or not await self.sock.poll(left * 1000):
                raise LinkTimeout(f"the node did not answer within {timeout_s:.1f} s")
            reply = decode_reply(await self.sock.recv())
            if ids[0] <= reply.req_id <= ids[-1]:
                got[reply.req_id] = reply
        self.clean = True
        return [got[i] for i in ids]


def transient(reply: Reply) -> bool:
    """The node took nothing of the request, for a reason that passes: asking again is safe."""
    if isinstance(reply, ErrorReply):
        return reply.code in TRANSIENT
    if isinstance(reply, AcksReply):  # a publish: every message refused so
        return all(isinstance(r, ErrorRow) and r.code in TRANSIENT for r in reply.rows)
    return False


class NodeLink:
    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.ctx = ctx
        self.idle: list[zmq.asyncio.Socket] = []

    @asynccontextmanager
    async def channel(self) -> AsyncIterator[Channel]:
        """A channel for one HTTP request's questions to the node."""
        channel = Channel(self.idle.pop() if self.idle else self._open())
        try:
            yield channel
        finally:
            if channel.clean and len(self.idle) < IDLE_MAX:
                self.idle.append(channel.sock)
            else:
                channel.sock.close(linger=0)

    def _open(self) -> zmq.asyncio.Socket:
        sock: Any = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, REPLY_BYTES_MAX)
        sock.connect(ENDPOINT)
        return sock  # type: ignore[no-any-return]

    def close(self) -> None:
        for sock in self.idle:
            sock.close(linger=0)
        self.idle.clear()
