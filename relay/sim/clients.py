"""Simulated producers and consumers, talking to the cores as the real clients talk to nodes.

How this works: producers publish on random nodes, retry the same message elsewhere (on
purpose, after a client timeout, and after any refusal) and record every acknowledgement for
the checker. Consumers long-poll through the core's read path (``FetchRequested``), follow
redirects, move to another node after a refusal or a silence, re-fold the digest chain of
everything they receive and hand each delivery to the checker (no gap, no duplicate, one
order). Clients address nodes by id; the cluster delivers their events and routes replies.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from relay import errors
from relay.core.events import (
    Acked,
    Event,
    FetchRequested,
    PublishReply,
    PublishRequested,
    PublishResults,
    ReadReply,
    ReadResult,
    Redirect,
    Rejected,
)
from relay.core.messages import Item, Tx, fold_tx
from relay.sim.checker import InvariantChecker, InvariantViolation

CLIENT_TIMEOUT_MS = 1500  # a client that hears nothing this long retries elsewhere


@dataclass(slots=True)
class Publish:
    stream: str
    producer_id: str
    msg_id: int
    payload: bytes
    attempts: int = 0
    headers: tuple[tuple[str, bytes], ...] | None = None  # None: drawn from the payload
    routed: bool = False  # sent only to nodes that are up, as a producer that saw one go
    key: bytes | None = None  # None: drawn from the payload


@dataclass(slots=True)
class Request:
    node: int
    sent_ms: int
    publish: Publish | None = None  # None: a consumer's fetch
    consumer: int = 0


@dataclass(slots=True)
class SimConsumer:
    index: int
    stream: str
    node: int
    after_seq: int = 0
    digest: bytes = b""  # the digest at after_seq, once known
    delivered: list[int] = field(default_factory=list)
    waiting: bool = False  # a fetch is out
    retry_at_ms: int = 0
    from_index: int | None = None  # its first fetch starts at this dense index (negative:
    # the last N), until a reply places it


class SimClients:
    def __init__(
        self,
        rng: random.Random,
        nodes: list[int],
        streams: tuple[str, ...],
        consumers: int,
        retry_rate: float,
        checker: InvariantChecker,
    ) -> None:
        self.rng = rng
        self.node_ids = nodes
        self.retry_rate = retry_rate
        self.checker = checker
        self.requests: dict[int, Request] = {}
        self.retry_queue: list[tuple[int, int, Publish]] = []
        self.outgoing: dict[int, list[Event]] = {}
        self.consumers = [
            SimConsumer(i, rng.choice(streams), rng.choice(nodes)) for i in range(consumers)
        ]
        for consumer in self.consumers[::3]:  # a third start at the last entries, by index
            consumer.from_index = -(consumer.index + 2)
        self.msg_ids: dict[str, int] = {}
        self.req_ids = 0
        self.acked = 0
        self.rejected = 0
        self.reuse_rng: random.Random | None = None
        self.reuse_rate = 0.0
        self.sent: list[Publish] = []  # what reuse may take a key from
        self.contents: dict[tuple[str, str, int], set[bytes]] = {}  # key -> payloads sent
        self.conflicts = 0
        # what a fan-out batch and a consumer group see (``relay.sim.delivery``)
        self.on_acked: Callable[[Publish, Acked], None] | None = None
        self.on_delivered: Callable[[int, SimConsumer, tuple[Tx, ...]], None] | None = None
        self.live: Callable[[], list[int]] | None = None  # the nodes up now, for routed sends

    def reuse(self, rng: random.Random, rate: float) -> None:
        """Now and then also publish a new message under an earlier message's key (a producer
        restarted with a fixed id that numbers from 1 again), drawing from ``rng`` alone."""
        self.reuse_rng, self.reuse_rate = rng, rate

    # --- producers ----------------------------------------------------------------------

    def publish(self, now_ms: int, stream: str) -> None:
        pid = f"p{self.rng.randint(1, 3)}"
        self.msg_ids[pid] = self.msg_ids.get(pid, 0) + 1
        payload = self.rng.randbytes(self.rng.randint(0, 40))
        self.send(now_ms, Publish(stream, pid, self.msg_ids[pid], payload))
        rng = self.reuse_rng
        if rng is None or not self.reuse_rate:
            return
        self.sent.append(Publish(stream, pid, self.msg_ids[pid], payload))
        if rng.random() < self.reuse_rate:
            old = rng.choice(self.sent)
            again = Publish(old.stream, old.producer_id, old.msg_id, rng.randbytes(41))
            self.send(now_ms, again, rng)

    def send(self, now_ms: int, pub: Publish, rng: random.Random | None = None) -> None:
        up = self.live() if pub.routed and self.live is not None else []
        node = (rng or self.rng).choice(up or self.node_ids)
        pub.attempts += 1
        req_id = self._request(Request(node, now_ms, pub))
        event = PublishRequested(b"p", req_id, pub.stream, pub.producer_id, (item_of(pub),))
        self.outgoing.setdefault(node, []).append(event)
        if self.reuse_rate:
            key = (pub.stream, pub.producer_id, pub.msg_id)
            self.contents.setdefault(key, set()).add(pub.payload)
        if (
            rng is None
            and pub.attempts == 1
            and self.retry_rate
            and self.rng.random() < self.retry_rate
        ):
            # a producer that gives up waiting early and retries elsewhere: a duplicate
            again = Publish(
                pub.stream,
                pub.producer_id,
                pub.msg_id,
                pub.payload,
                pub.attempts,
                pub.headers,
                pub.routed,
                pub.key,
            )
            self._retry(now_ms + self.rng.randint(0, 20), again)

    def _request(self, request: Request) -> int:
        self.req_ids += 1
        self.requests[self.req_ids] = request
        return self.req_ids

    def _retry(self, at_ms: int, pub: Publish) -> None:
        self.req_ids += 1  # only an order key for the heap
        heapq.heappush(self.retry_queue, (at_ms, self.req_ids, pub))

    # --- time ---------------------------------------------------------------------------

    def advance(self, now_ms: int) -> None:
        """Retries that are due, and requests that waited too long."""
        while self.retry_queue and self.retry_queue[0][0] <= now_ms:
            self.send(now_ms, heapq.heappop(self.retry_queue)[2])
        for req_id, request in list(self.requests.items()):
            if now_ms - request.sent_ms >= CLIENT_TIMEOUT_MS:
                self._lost(now_ms, req_id, request, 0)
        for consumer in self.consumers:
            if not consumer.waiting and consumer.retry_at_ms <= now_ms:
                self._fetch(now_ms, consumer)

    def next_time(self) -> int | None:
        times = [r.sent_ms + CLIENT_TIMEOUT_MS for r in self.requests.values()]
        if self.retry_queue:
            times.append(self.retry_queue[0][0])
        times += [c.retry_at_ms for c in self.consumers if not c.waiting]
        return min(times) if times else None

    def node_gone(self, now_ms: int, node: int) -> None:
        """The client sees its connection to ``node`` fail."""
        for req_id, request in list(self.requests.items()):
            if request.node == node:
                self._lost(now_ms, req_id, request, 50)

    def _lost(self, now_ms: int, req_id: int, request: Request, delay_ms: int) -> None:
        del self.requests[req_id]
        if request.publish is not None:
            self._retry(now_ms + delay_ms, request.publish)
        else:
            self._move(now_ms, self.consumers[request.consumer], delay_ms)

    # --- consumers ----------------------------------------------------------------------

    def _fetch(self, now_ms: int, consumer: SimConsumer) -> None:
        consumer.waiting = True
        req_id = self._request(Request(consumer.node, now_ms, consumer=consumer.index))
        event = FetchRequested(
            b"c",
            req_id,
            consumer.stream,
            consumer.after_seq,
            self.rng.randint(1, 50),
            self.rng.choice([0, 100, 500]),
            from_index=consumer.from_index,
        )
        self.outgoing.setdefault(consumer.node, []).append(event)

    def _move(self, now_ms: int, consumer: SimConsumer, delay_ms: int, to: int = 0) -> None:
        consumer.waiting = False
        consumer.node = to or self.rng.choice(self.node_ids)
        consumer.retry_at_ms = now_ms + delay_ms

    def _on_read(self, now_ms: int, consumer: SimConsumer, body: ReadResult) -> None:
        if body.lost:  # trimmed from every buffer: start again from the earliest held
            consumer.after_seq, consumer.digest, consumer.from_index = 0, b"", None
            self.checker.consumer_skipped(consumer.index)
            self._move(now_ms, consumer, 0, consumer.node)
            return
        digest = consumer.digest or body.prev_digest
        if body.txs and body.prev_digest != digest:
            raise InvariantViolation(
                f"consumer {consumer.index}: node {consumer.node} answered after seq "
                f"{consumer.after_seq} with a chain that does not continue its own"
            )
        if body.txs:
            consumer.from_index = None  # placed: it goes on after the seqs it got
        for i, (tx, expected) in enumerate(zip(body.txs, body.digests, strict=True)):
            digest = fold_tx(digest, tx)
            if digest != expected or tx.seq <= consumer.after_seq:
                raise InvariantViolation(
                    f"consumer {consumer.index}: seq {tx.seq} does not chain or ascend"
                )
            index = body.indexes[i] if body.indexes else body.first_index + i
            self.checker.check_delivery(consumer.index, consumer.stream, tx.seq, digest, index)
            consumer.delivered.append(tx.seq)
            consumer.after_seq, consumer.digest = tx.seq, digest
        consumer.waiting = False
        consumer.retry_at_ms = now_ms if body.txs else now_ms + 20
        if body.txs and self.on_delivered is not None:
            self.on_delivered(now_ms, consumer, body.txs)

    # --- replies ------------------------------------------------------------------------

    def on_reply(
        self, now_ms: int, node_id: int, reply: PublishReply | ReadReply, fenced: bool
    ) -> None:
        request = self.requests.pop(reply.req_id, None)
        if request is None:
            return
        if request.publish is None:
            consumer = self.consumers[request.consumer]
            body = reply.body
            if isinstance(body, ReadResult):
                self._on_read(now_ms, consumer, body)
            elif isinstance(body, Redirect):
                self._move(now_ms, consumer, 0, self.rng.choice(body.nodes))
            else:
                self._move(now_ms, consumer, 50)
            return
        pub = request.publish
        body = reply.body
        if isinstance(body, PublishResults) and isinstance(body.results[0], Acked):
            result = body.results[0]
            self.acked += 1
            self.checker.check_ack(
                node_id,
                fenced,
                pub.stream,
                item_of(pub),
                pub.producer_id,
                result.seq,
                result.digest,
            )
            if self.on_acked is not None:
                self.on_acked(pub, result)
            return
        refused = body.results[0] if isinstance(body, PublishResults) else None
        if isinstance(refused, Rejected) and refused.code == errors.CONFLICT:
            if len(self.contents.get((pub.stream, pub.producer_id, pub.msg_id), ())) < 2:
                raise InvariantViolation(
                    f"a retry refused as a conflict: {pub.stream!r} ({pub.producer_id}, "
                    f"{pub.msg_id}) was only ever sent with one content"
                )
            self.conflicts += 1
            return
        self.rejected += 1
        self._retry(now_ms + 20, pub)

    def idle(self) -> bool:
        return not any(r.publish for r in self.requests.values()) and not self.retry_queue


def item_of(pub: Publish) -> Item:
    """The message a publish sends: some carry a key and headers, drawn from the payload so
    that they take nothing from the seeds' random draws."""
    payload = pub.payload
    key = pub.key if pub.key is not None else payload[:3] if len(payload) % 3 == 0 else None
    headers = pub.headers
    if headers is None:
        headers = (("h", payload[-2:]), ("h", b"")) if len(payload) % 5 == 0 else ()
    return Item(pub.msg_id, payload, key, headers)
