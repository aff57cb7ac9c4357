"""A consumer group and a fan-out batch in the simulator, under the same faults as the rest.

How this works: in the seeds that draw it, a producer sends a batch of items to one stream
(each with the ``relay-batch`` header) and, once every item is answered, closes it with its
count; a group member reads the stream as the real ``Consumer`` does, acknowledges every batch
item it is given (now and then one again: a retried ack) and commits, one record at a time and
each waiting for its answer, first its acks into the batch stream and then its position into
the group stream. Now and
then, after a record is answered, the member restarts: it forgets what it had not committed
and resumes from the last commit that a second consumer, following the group stream, read
from the cluster. The checker then holds the delivery invariants, folding what each replica
made readable with the clients' own code (``status_of``, ``commit_of``):

- a member resumes at a position of the one timeline, never past what it was given, and
  from exactly its last answered commit (committed offsets are not lost);
- a batch status never says more than what happened: a replica's status is complete only
  with the true count and every item given to the member, and it never goes back;
- once the run is quiet, every live replica says the batch is complete and holds the last
  commit as the group's position.
"""

from __future__ import annotations

import random

from relay.client.batches import (
    acks_payload,
    batch_stream,
    close_payload,
    item_header,
    item_of,
    status_of,
)
from relay.client.groups import commit_of, commit_payload, group_stream
from relay.core.events import Acked
from relay.core.messages import Tx
from relay.core.node import NodeCore
from relay.sim.checker import InvariantChecker, InvariantViolation
from relay.sim.clients import Publish, SimClients, SimConsumer

GROUP = "g"
PRODUCER = "batcher"
MEMBER = "member"
NEVER = 1 << 62
RESTARTS_MAX = 3  # per run: each one re-delivers and re-commits, so the run still goes quiet


class SimDelivery:
    def __init__(
        self,
        rng: random.Random,
        clients: SimClients,
        checker: InvariantChecker,
        stream: str,
        first_ms: int,
        last_ms: int,
    ) -> None:
        self.rng = rng
        self.clients = clients
        self.checker = checker
        self.stream = stream
        self.batch = batch_stream(stream, "b1")
        self.group_stream = group_stream(stream, GROUP)
        self.count = rng.randint(1, 30)
        self.item_times = sorted(rng.randint(first_ms, last_ms) for _ in range(self.count))
        self.sent_items = 0
        self.items_acked: set[int] = set()  # as ``close_batch``, close once all are answered
        self.close_sent = False
        self.given: set[int] = set()  # item indexes the member was given
        nodes = clients.node_ids
        self.member = SimConsumer(len(clients.consumers), stream, rng.choice(nodes))
        self.reader = SimConsumer(self.member.index + 1, self.group_stream, rng.choice(nodes))
        clients.consumers += [self.member, self.reader]
        clients.on_acked = self._on_acked
        clients.on_delivered = self._on_delivered
        self.to_ack: set[int] = set()  # given, not yet committed
        self.commit_at = NEVER  # when the member next commits what it holds
        self.records: list[Publish] = []  # the commit's records still to send, in order
        self.in_flight: Publish | None = None
        self.msg_id = 0
        self.committed: tuple[int, bytes, int] | None = None  # (seq, digest, its own seq)
        self.read: tuple[int, bytes, int] | None = None  # the last commit the reader got
        self.resuming = False
        self.restarts = 0
        self.seen: dict[int, tuple[bool, int]] = {}  # incarnation -> (complete, acked) shown

    # --- the batch producer -------------------------------------------------------------

    def advance(self, now_ms: int) -> None:
        while self.sent_items < self.count and self.item_times[self.sent_items] <= now_ms:
            i = self.sent_items
            headers = (item_header(self.batch, i),)
            payload = self.rng.randbytes(self.rng.randint(0, 20))
            item = Publish(self.stream, PRODUCER, i + 1, payload, headers=headers, routed=True)
            self._send(now_ms, item)
            self.sent_items += 1
        if len(self.items_acked) == self.count and not self.close_sent:
            close = Publish(
                self.batch, PRODUCER, self.count + 1, close_payload(self.count), routed=True
            )
            self._send(now_ms, close)
            self.close_sent = True
        if self.commit_at <= now_ms and self.in_flight is None and not self.resuming:
            self._commit()
        if self.records and self.in_flight is None:
            self.in_flight = self.records.pop(0)  # one at a time, each waiting for its answer
            self._send(now_ms, self.in_flight)
        self._resume(now_ms)

    def next_time(self) -> int | None:
        times = [self.commit_at] if self.commit_at < NEVER else []
        if self.records and self.in_flight is None:
            return 0  # now
        if self.sent_items < self.count:
            times.append(self.item_times[self.sent_items])
        return min(times) if times else None

    def idle(self) -> bool:
        done = self.close_sent and self.in_flight is None and not self.records
        done = done and not self.resuming
        return done and self.commit_at == NEVER

    def _send(self, now_ms: int, pub: Publish) -> None:
        self.clients.send(now_ms, pub, self.rng)

    # --- the group member ---------------------------------------------------------------

    def _on_delivered(self, now_ms: int, consumer: SimConsumer, txs: tuple[Tx, ...]) -> None:
        if consumer is self.reader:
            for tx in txs:
                commit = commit_of(self.group_stream, tx.seq, tx.payload)
                self.read = (commit.seq, commit.digest, tx.seq)
            return
        if consumer is not self.member or self.resuming:
            return
        for tx in txs:
            found = item_of(tx.headers, self.stream)
            if found is not None and found[0] == self.batch:
                self.given.add(found[1])
                self.to_ack.add(found[1])
        if self.given and self.rng.random() < 0.3:
            self.to_ack.add(self.rng.choice(sorted(self.given)))  # a retried ack
        if self.commit_at == NEVER:
            self.commit_at = now_ms + self.rng.randint(0, 60)

    def _commit(self) -> None:
        """Acks first, then the position, as ``Consumer.commit``: an item given before the
        committed position is acked before the position moves past it."""
        self.commit_at = NEVER
        indexes = sorted(self.to_ack)
        self.rng.shuffle(indexes)  # acked in any order
        while indexes:
            size = self.rng.randint(1, 8)
            chunk, indexes = indexes[:size], indexes[size:]
            self.records.append(self._record(self.batch, acks_payload(GROUP, set(chunk))))
        self.to_ack.clear()
        member = self.member
        if member.after_seq and (self.committed is None or member.after_seq > self.committed[0]):
            payload = commit_payload(self.stream, member.after_seq, member.digest)
            self.records.append(self._record(self.group_stream, payload))

    def _record(self, stream: str, payload: bytes) -> Publish:
        self.msg_id += 1
        return Publish(stream, MEMBER, self.msg_id, payload, routed=True)

    def _on_acked(self, pub: Publish, result: Acked) -> None:
        if pub.producer_id == PRODUCER and pub.stream == self.stream:
            self.items_acked.add(pub.msg_id)
        if pub.producer_id != MEMBER or self.in_flight is None:
            return
        if pub.msg_id != self.in_flight.msg_id:
            return
        self.in_flight = None
        if pub.stream == self.group_stream:
            found = commit_of(pub.stream, result.seq, pub.payload)
            self.committed = (found.seq, found.digest, result.seq)
        if (
            self.committed is not None
            and not self.member.waiting
            and self.restarts < RESTARTS_MAX
            and self.rng.random() < 0.2
        ):
            self._restart()  # between two records of a commit, or after the last

    def _restart(self) -> None:
        """The member's process dies: what it had not committed is gone with it."""
        self.resuming = True
        self.restarts += 1
        self.records.clear()
        self.to_ack.clear()
        self.commit_at = NEVER
        self.member.retry_at_ms = NEVER

    def _resume(self, now_ms: int) -> None:
        """Back, from the commit the group stream holds once the reader has got it."""
        if not self.resuming or self.committed is None or self.read is None:
            return
        if self.read[2] < self.committed[2]:
            return  # the reader has not got it yet
        if self.read != self.committed:
            raise InvariantViolation(
                f"committed offsets: the group's last commit reads {self.read}, but the last "
                f"one answered was {self.committed}"
            )
        seq, digest, _ = self.read
        self.checker.consumer_resumed(self.member.index, self.stream, seq, digest)
        self.member.after_seq, self.member.digest = seq, digest
        self.member.retry_at_ms = now_ms
        self.resuming = False

    # --- invariants ---------------------------------------------------------------------

    def check(self, node: NodeCore, incarnation: int, final: bool) -> None:
        """What ``node`` made readable of the batch and group streams."""
        batch = node.streams.get(self.batch)
        if batch is not None and batch.timeline.trimmed_seq == 0:
            timeline = batch.timeline
            txs = timeline.txs_between(0, timeline.readable_seq)
            found = status_of(self.batch, GROUP, (tx.payload for tx in txs))
            if found.complete and (found.count != self.count or len(self.given) < self.count):
                raise InvariantViolation(
                    f"batches: node {node.node_id} says {self.batch!r} is complete with "
                    f"{found.count} items; it has {self.count}, the member was given "
                    f"{len(self.given)}"
                )
            complete, acked = self.seen.get(incarnation, (False, 0))
            if (complete and not found.complete) or found.acked < acked:
                raise InvariantViolation(f"batches: node {node.node_id}'s status went back")
            self.seen[incarnation] = (found.complete, found.acked)
            if final and not found.complete:
                raise InvariantViolation(
                    f"batches: {self.batch!r} not complete on node {node.node_id} at the end: "
                    f"{found.acked} of {found.count} items acked"
                )
        group = node.streams.get(self.group_stream)
        if final and group is not None and self.committed is not None:
            last = next(reversed(group.timeline.txs), None)
            if last is None and group.timeline.head_seq == self.committed[2]:
                return  # caught up by a snapshot that ends at the commit (the run is quiet:
                # every replica holds the same digest there)
            held = commit_of(self.group_stream, last.seq, last.payload) if last else None
            if held is None or (held.seq, held.digest) != self.committed[:2]:
                raise InvariantViolation(
                    f"committed offsets: node {node.node_id} holds {held} as the group's "
                    f"position; the last commit answered was {self.committed}"
                )
