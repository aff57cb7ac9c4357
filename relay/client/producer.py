"""``relay.Producer``: publish transactions to any node, pipelined, with safe retries.

How this works: ``send`` queues a message and returns a ``PublishFuture``; the producer packs
queued messages of one stream into requests of up to ``batch_max`` and keeps up to ``window``
requests in flight. Every message carries this producer's id and its own message id, so a
retry (after a redirect, a node that stopped answering, or a quorum timeout) can never
duplicate it: the cluster answers a retry with the original seq. ``publish`` is the
one-at-a-time form: send, then wait for the answer.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from dataclasses import dataclass
from itertools import islice, repeat, starmap
from operator import attrgetter
from pathlib import Path

from relay import errors
from relay.client.batches import batch_stream, close_payload, item_header
from relay.client.directory import NodeAddress, addresses_of, identity, request_limits, resolve
from relay.client.futures import Ack, PublishFuture
from relay.client.journal import Entry, Journal
from relay.client.pool import ConnectionPool
from relay.client.routes import HeadersIn, Routes, headers_of, key_of
from relay.core.dedup import incarnation_start
from relay.wire.client import publish_request
from relay.wire.replies import AckRow, AcksReply, ErrorReply, RedirectReply, Reply

WINDOW = 32  # requests in flight
BATCH_MAX = 512  # messages per request
REQUEST_PAYLOAD_BYTES = 4 << 20  # message bytes per request at most (half of request_bytes_max)
REQUEST_OVERHEAD_BYTES = 1024  # a request's bytes beside its messages' and its names
BINARY = (bytes, bytearray, memoryview)  # what a payload may be (a tuple: cheap to test)


_ROW = attrgetter("msg_id", "_payload", "_key", "_headers")  # a message as a request carries it
_STREAM, _PAYLOAD = attrgetter("stream"), attrgetter("_payload")
_KEY, _HEADERS = attrgetter("_key"), attrgetter("_headers")


@dataclass(slots=True, eq=False)
class _Request:
    stream: str
    items: list[PublishFuture]
    address: NodeAddress
    sent_at: float


class Producer:
    def __init__(
        self,
        config: str | Path | None = None,
        nodes: list[str] | None = None,
        node: int | None = None,
        producer_id: str | None = None,
        timeout_s: float = 30.0,
        request_timeout_s: float = 3.0,
        batch_max: int = BATCH_MAX,
        window: int = WINDOW,
        journal: str | Path | None = None,
        journal_bytes_max: int = 64 << 20,
        journal_full: str = "block",
        client_key: str | Path | None = None,
    ) -> None:
        """``journal``: a directory where every message is kept until acknowledged, so a
        producer started again on it resends what was not (``recovered``), with the same
        producer id and message ids. When it holds ``journal_bytes_max`` of unacknowledged
        messages, ``send`` waits for acks (``journal_full="block"``) or raises
        ``JournalFullError`` (``"raise"``); it never drops a message. ``client_key``: a
        .key_secret file for a cluster that admits only listed clients (default: the
        config's ``client.key_secret`` if this machine has it, else a new key pair)."""
        if journal_full not in ("block", "raise"):
            raise ValueError(f"journal_full is 'block' or 'raise', not {journal_full!r}")
        self._journal = Journal(journal, producer_id) if journal is not None else None
        self.journal_bytes_max = journal_bytes_max
        self.journal_full = journal_full
        self.producer_id = (
            self._journal.producer_id if self._journal else producer_id or uuid.uuid4().hex
        )
        self.timeout_s = timeout_s
        self.request_timeout_s = request_timeout_s
        self.batch_max = batch_max
        self.window = window
        self._routes = Routes(resolve(config, nodes, node))
        self.limits = request_limits(config)
        self._request_payload = min(REQUEST_PAYLOAD_BYTES, self.limits.request_bytes // 2)
        self._pool = ConnectionPool(identity(config, client_key))
        self._queue: deque[PublishFuture] = deque()
        self._inflight: dict[int, _Request] = {}
        if self._journal is not None:
            self._next_msg_id = self._journal.next_msg_id
        else:  # a named producer without a journal: a new incarnation, fencing older ones
            self._next_msg_id = incarnation_start(int(time.time() * 1000)) if producer_id else 1
        self._next_req_id = 1
        self._batches: dict[str, int] = {}  # open batch -> items sent in it so far
        self.recovered: list[PublishFuture] = []  # what a journal held unacknowledged at start
        for entry in self._journal.pending.values() if self._journal else ():
            deadline = time.monotonic() + timeout_s
            future = PublishFuture(
                entry.stream, entry.msg_id, entry.payload, entry.key, entry.headers, deadline
            )
            self._queue.append(future)
            self.recovered.append(future)

    # --- the API ------------------------------------------------------------------------

    def send(
        self,
        stream: str,
        payload: bytes,
        msg_id: int | None = None,
        key: bytes | str | None = None,
        headers: HeadersIn | None = None,
        batch: str | None = None,
    ) -> PublishFuture:
        """Queue one message; the returned future resolves during ``flush`` (or later sends).

        ``key`` (bytes, or a string sent as UTF-8) and ``headers`` (a mapping or a sequence of
        ``(name, value)`` pairs; values bytes or strings) travel with the payload, are covered
        by the digest and reach every consumer. ``batch``: an item of a batch from
        ``open_batch``, numbered in send order."""
        if not isinstance(payload, BINARY):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if batch is not None:
            if batch not in self._batches:
                raise ValueError(f"no open batch {batch!r} (open_batch, and not closed yet)")
            headers = (*headers_of(headers), item_header(batch, self._batches[batch]))
        if msg_id is None:
            msg_id = self._next_msg_id
        future = PublishFuture(
            stream,
            msg_id,
            payload if type(payload) is bytes else bytes(payload),
            None if key is None else key_of(key),
            headers_of(headers) if headers else (),
            time.monotonic() + self.timeout_s,
        )
        problem = self._size_problem(future)
        if problem:  # fails at once: no node could take it
            future._failed(errors.RelayError(errors.BAD_REQUEST, problem))
            return future
        if self._journal is not None:
            self._journaled(future)
        self._queue.append(future)  # taken: only now may the numbering move on
        if msg_id >= self._next_msg_id:
            self._next_msg_id = msg_id + 1
        if batch is not None:
            self._batches[batch] += 1
        queued = len(self._queue)
        if queued % self.batch_max == 0:  # a full batch is ready: send it if the window allows
            self._pump(0)
            while len(self._queue) >= self.window * self.batch_max:  # backpressure
                self._pump(10)
        return future

    def _size_problem(self, future: PublishFuture) -> str:
        """Why the message cannot be sent (too large for the cluster's limits), or ""."""
        size = message_bytes(future)
        limits = self.limits
        if limits.message_bytes is not None and size > limits.message_bytes:
            return (
                f"message too large: {size} bytes (payload, key and headers; limit "
                f"{limits.message_bytes}, the cluster's payload_bytes_max)"
            )
        names = len(future.stream.encode()) + len(self.producer_id)
        if size + names + REQUEST_OVERHEAD_BYTES > limits.request_bytes:
            return (
                f"request too large: a message of {size} bytes does not fit in one request "
                f"(limit {limits.request_bytes}, the cluster's request_bytes_max)"
            )
        return ""

    def publish(
        self,
        stream: str,
        payload: bytes,
        msg_id: int | None = None,
        key: bytes | str | None = None,
        headers: HeadersIn | None = None,
    ) -> Ack:
        """Publish one message and wait until a quorum verified it."""
        future = self.send(stream, payload, msg_id, key, headers)
        self.flush()
        return future.result()

    def open_batch(self, stream: str) -> str:
        """A new fan-out batch of items for ``stream`` (send them with ``batch=``): its id,
        which is also the stream that records its close and the consumers' acks."""
        batch = batch_stream(stream, uuid.uuid4().hex)
        self._batches[batch] = 0
        return batch

    def close_batch(self, batch: str) -> int:
        """Seal a batch with the count of items sent in it, once every one is acknowledged
        (``flush``): no item can be added after. The count."""
        count = self._batches[batch]
        self.flush()
        self.publish(batch, close_payload(count))
        del self._batches[batch]
        return count

    def flush(self) -> None:
        """Wait until every message sent so far is acknowledged or has failed."""
        while self._queue or self._inflight:
            self._pump(50)

    def poll(self, wait_ms: float = 0) -> None:
        """Send what is queued and take in answers, waiting at most ``wait_ms`` (fractions
        count) for one."""
        self._pump(wait_ms)

    def close(self) -> None:
        self._pool.close()
        if self._journal is not None:
            self._journal.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the engine ---------------------------------------------------------------------

    def _journaled(self, item: PublishFuture) -> None:
        """Keep ``item`` in the journal, once there is room for it."""
        journal = self._journal
        assert journal is not None
        entry = Entry(item.msg_id, item.stream, item._payload, item._key, item._headers)
        deadline = time.monotonic() + self.timeout_s
        while journal.pending and journal.pending_bytes + entry.estimate() > self.journal_bytes_max:
            if self.journal_full == "raise" or time.monotonic() > deadline:
                raise errors.JournalFullError(
                    errors.JOURNAL_FULL,
                    f"the journal holds {journal.pending_bytes} bytes of unacknowledged "
                    f"messages (journal_bytes_max {self.journal_bytes_max})",
                )
            self._pump(10)
        journal.add(entry)

    def _pump(self, wait_ms: float) -> None:
        now = time.monotonic()
        self._dispatch(now)
        for address, reply in self._pool.receive(wait_ms):
            self._on_reply(address, reply)
        now = time.monotonic()
        for address in self._pool.disconnected():
            self._fail_over(address, now, "connection lost")
        refusal = self._pool.refusal(self._routes.order)
        if refusal is not None:  # no node admits this client: nothing can go anywhere
            for request in self._inflight.values():
                self._queue.extend(request.items)
            self._inflight.clear()
            while self._queue:
                self._fail(self._queue.popleft(), refusal)
        for request in list(self._inflight.values()):
            if now - request.sent_at > self.request_timeout_s:
                self._fail_over(request.address, now, "no answer in time")
        self._dispatch(now)
        if self._queue and not self._inflight:  # every node put aside: wait, do not spin
            time.sleep(min(wait_ms / 1000, self._routes.ready_in(now)))

    def _dispatch(self, now: float) -> None:
        queue = self._queue
        while queue and len(self._inflight) < self.window:
            first = queue.popleft()
            if first.done():
                continue
            if now > first._deadline:
                self._fail(
                    first,
                    errors.NoQuorumError(
                        errors.TIMEOUT, first.last_error or "no quorum acknowledged in time"
                    ),
                )
                continue
            address = self._routes.pick(first.stream, now)
            if address is None:  # every node failed just now: wait for one (``_pump``)
                queue.appendleft(first)
                return
            items = self._request_items(first)
            req_id = self._next_req_id
            self._next_req_id += 1
            rows = list(map(_ROW, items))
            body = publish_request(req_id, first.stream, self.producer_id, rows)
            if self._journal is not None:
                self._journal.sync()  # nothing reaches the cluster before it is on our disk
            self._pool.get(address).send(body)
            self._inflight[req_id] = _Request(first.stream, items, address, now)

    def _request_items(self, first: PublishFuture) -> list[PublishFuture]:
        """``first`` and the queued messages one request takes with it: of its stream, at
        most ``batch_max``, their bytes (payloads, keys and headers) within
        ``_request_payload`` (taken off the queue). The usual case (no keys or headers) is
        checked in C-speed passes."""
        queue = self._queue
        items = [first, *islice(queue, self.batch_max - 1)]
        stream, count = first.stream, len(items)
        if any(map(_KEY, items)) or any(map(_HEADERS, items)):
            size = sum(map(message_bytes, items))
        else:
            size = sum(map(len, map(_PAYLOAD, items)))
        if list(map(_STREAM, items)).count(stream) != count or size > self._request_payload:
            count, size = 1, message_bytes(first)
            for item in islice(items, 1, None):
                size += message_bytes(item)
                if item.stream != stream or size > self._request_payload:
                    break
                count += 1
            del items[count:]
        deque(starmap(queue.popleft, repeat((), count - 1)), maxlen=0)
        return items

    def _on_reply(self, address: NodeAddress, reply: Reply) -> None:
        request = self._inflight.pop(reply.req_id, None)
        if request is None:
            return  # a late answer to a request already retried elsewhere
        now = time.monotonic()
        if isinstance(reply, AcksReply) and len(reply.rows) == len(request.items):
            at, node = time.perf_counter(), address.node_id
            for item, row in zip(request.items, reply.rows, strict=True):
                if isinstance(row, AckRow):
                    item._row, item._node, item.done_at = row, node, at
                    item._payload, item._key, item._headers = b"", None, ()  # answered
                elif row.code in errors.RETRYABLE:
                    item.last_error = f"{row.code}: {row.message}"
                    self._queue.appendleft(item)
                else:
                    self._fail(item, errors.RelayError(row.code, row.message))
            if self._journal is not None:  # acknowledged: the journal lets them go
                rows = zip(request.items, reply.rows, strict=True)
                self._journal.acked([i.msg_id for i, row in rows if isinstance(row, AckRow)])
        elif isinstance(reply, RedirectReply):
            self._routes.prefer(request.stream, addresses_of(reply.nodes))
            self._requeue(request, f"redirected from {address}")
        elif isinstance(reply, ErrorReply) and reply.code in errors.RETRYABLE:
            self._routes.avoid(address, now, 0.5)
            self._routes.prefer(request.stream, addresses_of(reply.try_nodes))
            self._requeue(request, f"{reply.code} at {address}: {reply.message}")
        elif isinstance(reply, ErrorReply):
            for item in request.items:
                self._fail(item, errors.RelayError(reply.code, reply.message))
        else:  # the node broke the protocol: take the messages elsewhere
            self._routes.avoid(address, now, 2.0)
            self._requeue(request, f"{address} answered a publish with {type(reply).__name__}")
        if not isinstance(reply, AcksReply) and not self._inflight:
            time.sleep(0.01)  # every node is refusing: back off a little before retrying

    def _fail_over(self, address: NodeAddress, now: float, why: str) -> None:
        self._routes.avoid(address, now, 2.0)
        self._pool.drop(address)
        for req_id, request in list(self._inflight.items()):
            if request.address == address:
                del self._inflight[req_id]
                self._requeue(request, f"{why} from {address}")

    def _requeue(self, request: _Request, why: str) -> None:
        for item in reversed(request.items):
            item.last_error = why
            self._queue.appendleft(item)

    def _fail(self, item: PublishFuture, error: errors.RelayError) -> None:
        """The message failed (refused, or not acknowledged in time): its caller has the
        error, and the journal lets it go."""
        item._failed(error)
        if self._journal is not None:
            self._journal.acked([item.msg_id])


__all__ = ["Ack", "Producer", "PublishFuture"]


def message_bytes(future: PublishFuture) -> int:
    """What a message puts in a request beside its msg id: payload, key and headers."""
    size = len(future._payload) + len(future._key or b"")
    return size + sum(len(name) + len(value) for name, value in future._headers)
