"""Reads of one stream's verified timeline, asked of whichever node can answer.

How this works: requests go to the current node. A reply that redirects moves the fetcher to
a replica that was named; a retryable error, a broken connection or silence past the reply
timeout moves it to the next node in order. Such a request returns None, and the caller asks
again (the consumer on its next poll, a Spark task until its deadline).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from relay import errors
from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress, addresses_of
from relay.client.pool import ConnectionPool
from relay.errors import ProtocolError
from relay.wire.client import fetch_request, span_request
from relay.wire.replies import ErrorReply, RedirectReply, Reply, SpanReply, TxsReply

ReplyKinds = tuple[type[Reply], ...]
Fetched = TxsReply  # rows of verified txs, with the digest just before the first
Spanned = SpanReply  # one (last seq, digest there, tx count) per part of a range
RETRY_AFTER_S = 0.5  # a node that failed is asked again no sooner (each ask is a connection)


class Fetcher:
    def __init__(
        self,
        stream: str,
        order: list[NodeAddress],
        reply_timeout_s: float = 3.0,
        avoid: NodeAddress | None = None,
        pair: KeyPair | None = None,
    ) -> None:
        """``avoid``: a node never asked, even when a redirect names it (by host and port: an
        address from a list carries no node id)."""
        self.avoid = avoid
        self.order = [a for a in order if not self._avoided(a)]
        if not self.order:
            raise ValueError("a fetcher needs at least one node address")
        self.stream = stream
        self.reply_timeout_s = reply_timeout_s
        self.node: NodeAddress | None = None  # the node that answered last
        self.last_refusal = ""  # the last retryable error a node answered (say it on giving up)
        self._current = 0
        self._failed_at: dict[NodeAddress, float] = {}  # when each node last failed us
        self._pool = ConnectionPool(pair)
        self.pair = self._pool.pair
        self._req_id = 0

    def fetch(
        self, after: int, limit: int, wait_ms: int, from_index: int | None = None
    ) -> Fetched | None:
        """Up to ``limit`` verified txs after seq ``after`` (or, ``from_index`` not None, from
        the entry of that dense index; negative: -N, the last N), waiting up to ``wait_ms``
        for some."""
        self._req_id += 1
        request = fetch_request(self._req_id, self.stream, after, limit, wait_ms, from_index)
        reply = self._ask(request, wait_ms)
        if reply is None or isinstance(reply, TxsReply):
            return reply
        raise ProtocolError(f"{self.node}: a {type(reply).__name__} answered a fetch")

    def span(self, after: int, upto: int, max_txs: int, parts: int) -> Spanned | None:
        """Where to cut the verified txs in (``after``, ``upto``] into ``parts`` (0: no bound)."""
        self._req_id += 1
        request = span_request(self._req_id, self.stream, after, upto, max_txs, parts)
        reply = self._ask(request, 0)
        if reply is None or isinstance(reply, SpanReply):
            return reply
        raise ProtocolError(f"{self.node}: a {type(reply).__name__} answered a span")

    def span_within(
        self, after: int, upto: int, max_txs: int, parts: int, timeout_s: float
    ) -> Spanned:
        """``span``, asked again (of the next node) until one answers; ``TimeoutError`` if
        none does within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.span(after, upto, max_txs, parts)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                tried = ", ".join(str(a) for a in self.order)
                raise TimeoutError(
                    f"{self.stream!r}: no relay node answered within {timeout_s:g} s "
                    f"(tried {tried})"
                )

    def call(self, make: Callable[[int], bytes], wait_ms: int, kinds: ReplyKinds) -> Reply | None:
        """One request built by ``make`` (given its req id) answered by one of ``kinds``, or
        None if this node did not serve it (the next call goes where it was sent)."""
        self._req_id += 1
        found: Reply | None = self._ask(make(self._req_id), wait_ms, kinds)
        return found

    def close(self) -> None:
        self._pool.close()

    # --- the engine ---------------------------------------------------------------------

    def _ask(self, request: bytes, wait_ms: int, kinds: ReplyKinds = (TxsReply, SpanReply)) -> Any:
        """One request, answered or failed over; None if this node did not serve it."""
        address = self.order[self._current]
        wait = self._failed_at.get(address, -RETRY_AFTER_S) + RETRY_AFTER_S - time.monotonic()
        if wait > 0:  # it failed just now (every node may be down): not a connection a turn
            time.sleep(wait)
        conn = self._pool.get(address)
        conn.send(request)
        deadline = time.monotonic() + wait_ms / 1000 + self.reply_timeout_s
        while True:
            for _, reply in self._pool.receive(50):
                if reply.req_id != self._req_id:
                    continue  # a late answer to an earlier request
                return self._answer(address, reply, kinds)
            if address in self._pool.disconnected() or time.monotonic() > deadline:
                refusal = self._pool.refusal(self.order)
                if refusal is not None:
                    raise refusal
                self._next_node(address)
                return None

    def _answer(self, address: NodeAddress, reply: Reply, kinds: ReplyKinds) -> Reply | None:
        if isinstance(reply, kinds):
            self.node = address
            return reply
        if isinstance(reply, RedirectReply):
            self._go_to(addresses_of(reply.nodes))
            return None
        if not isinstance(reply, ErrorReply):
            raise ProtocolError(f"{address}: a {type(reply).__name__} answered a read")
        if reply.code in errors.RETRYABLE:
            self.last_refusal = f"{address}: {reply.code}: {reply.message}"
            self._next_node(address)
            time.sleep(0.05)
            return None
        raise errors.RelayError(reply.code, reply.message)

    def _go_to(self, addresses: list[NodeAddress]) -> None:
        addresses = [a for a in addresses if not self._avoided(a)]
        for address in addresses:
            if address not in self.order:
                self.order.append(address)
        if addresses:
            self._current = self.order.index(addresses[0])

    def _avoided(self, address: NodeAddress) -> bool:
        avoid = self.avoid
        return avoid is not None and (address.host, address.port) == (avoid.host, avoid.port)

    def _next_node(self, address: NodeAddress) -> None:
        self._failed_at[address] = time.monotonic()
        self._pool.drop(address)
        self._current = (self._current + 1) % len(self.order)
