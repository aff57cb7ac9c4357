"""A member of a work group: claims ready jobs of a stream, then acks, naks, rejects or renews
them (``docs/design.md``, "Work queues").

How this works: each call is one request to a node that replicates the stream (redirects and
failures are followed as a consumer follows them); the node writes the claim or settlement into
the group's control stream and answers once a quorum verified it and the fold applied it. A
claim answered empty says when the next delayed job becomes ready (``next_ready_ms``). A
settlement of a delivery the member no longer holds (its lease ran out, or it was settled
already) is answered ``stale``. A lease runs out only once a quorum of replicas saw it pass by
their own elapsed-time clocks, counted from when each applied the claim; a member that counts
from when it sent the claim (``Job.lease_left_s``) is on the safe side.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from relay import errors
from relay.client.directory import identity, resolve
from relay.client.fetcher import Fetcher
from relay.core.digest import Headers
from relay.queue.ops import ACK, NAK, REJECT, RENEW, SettleItem
from relay.wire.client import (
    claim_request,
    queue_config_request,
    queue_info_request,
    settle_request,
)
from relay.wire.replies import JobsReply, QueueInfoReply, SettledReply

SETTLED, STALE = "settled", "stale"


@dataclass(frozen=True, slots=True)
class Job:
    seq: int
    priority: int
    not_before: int  # unix ms; 0: was ready at once
    key: bytes | None  # the resource
    delivery: int  # 1 the first time this job is handed out
    lease_ms: int
    payload: bytes
    headers: Headers
    claimed_at: float  # time.monotonic() when the claim was sent

    def lease_left_s(self) -> float:
        """The lease left by this process's clock, counted from when the claim was sent."""
        return self.claimed_at + self.lease_ms / 1000 - time.monotonic()


@dataclass(frozen=True, slots=True)
class Peeked:
    """A ready job as ``peek`` lists it: not claimed, so nothing stops another member."""

    seq: int
    priority: int
    not_before: int
    key: bytes | None
    payload: bytes | None  # None: the stream no longer holds it (retention removed it)
    headers: Headers


class Worker:
    def __init__(
        self,
        stream: str,
        group: str,
        config: str | Path | None = None,
        nodes: list[str] | None = None,
        node: int | None = None,
        member: str | None = None,
        lease_ms: int = 30_000,
        timeout_s: float = 10.0,
        reply_timeout_s: float = 3.0,
        client_key: str | Path | None = None,
    ) -> None:
        self.stream = stream
        self.group = group
        self.member = member or f"{socket.gethostname()}-{os.getpid()}"
        self.lease_ms = lease_ms
        self.timeout_s = timeout_s
        self.next_ready_ms = 0  # from the last empty claim
        order = resolve(config, nodes, node)
        self._fetcher = Fetcher(stream, order, reply_timeout_s, pair=identity(config, client_key))

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._fetcher.close()

    def claim(self, count: int = 1, wait_ms: int = 0, lease_ms: int | None = None) -> list[Job]:
        """Up to ``count`` ready jobs, leased to this member; waits up to ``wait_ms`` for one."""
        lease = lease_ms or self.lease_ms
        sent = time.monotonic()

        def make(req_id: int) -> bytes:
            return claim_request(
                req_id, self.stream, self.group, self.member, count, lease, wait_ms
            )

        reply = self._call(make, wait_ms, JobsReply)
        assert isinstance(reply, JobsReply)
        self.next_ready_ms = reply.next_ready_ms
        return [Job(*row, claimed_at=sent) for row in reply.rows]

    def ack(self, jobs: Sequence[Job]) -> list[str]:
        return self.settle(jobs, ACK)

    def nak(self, jobs: Sequence[Job], delay_ms: int = 0) -> list[str]:
        return self.settle(jobs, NAK, delay_ms)

    def reject(self, jobs: Sequence[Job]) -> list[str]:
        return self.settle(jobs, REJECT)

    def renew(self, jobs: Sequence[Job]) -> list[str]:
        return self.settle(jobs, RENEW)

    def settle(self, jobs: Sequence[Job], action: str, delay_ms: int = 0) -> list[str]:
        """``settled`` or ``stale`` per job (stale: this member no longer held it)."""
        if not jobs:
            return []
        items = [SettleItem(j.seq, j.delivery, action, delay_ms) for j in jobs]

        def make(req_id: int) -> bytes:
            return settle_request(req_id, self.stream, self.group, self.member, items)

        reply = self._call(make, 0, SettledReply)
        assert isinstance(reply, SettledReply)
        return list(reply.results)

    def configure(
        self,
        lease_ms: int | None = None,
        max_deliveries: int | None = None,
        coalesce: bool | None = None,
        exclusive: bool | None = None,
        start: str | None = None,
    ) -> dict[str, object]:
        """Set the group's settings (those not given take their defaults: lease 30 s, 5
        deliveries, no coalescing, resources not exclusive); ``start`` (``earliest`` or
        ``latest``) counts only for a group's first operation. Returns the group's counts once
        the change is applied."""
        given = {
            "lease_ms": lease_ms,
            "max_deliveries": max_deliveries,
            "coalesce": coalesce,
            "exclusive": exclusive,
            "start": start,
        }
        settings = {k: v for k, v in given.items() if v is not None}

        def make(req_id: int) -> bytes:
            return queue_config_request(req_id, self.stream, self.group, settings)

        reply = self._call(make, 0, QueueInfoReply)
        assert isinstance(reply, QueueInfoReply)
        return reply.info

    def info(self) -> dict[str, object]:
        """The group's counts as the answering node folded them."""

        def make(req_id: int) -> bytes:
            return queue_info_request(req_id, self.stream, self.group)

        reply = self._call(make, 0, QueueInfoReply)
        assert isinstance(reply, QueueInfoReply)
        return reply.info

    def peek(self, count: int = 10) -> list[Peeked]:
        """The next ``count`` (at most 100) ready jobs in claim order as the answering node
        folded them, with their payloads; claims nothing (resources aside: a busy resource's
        job is listed where it waits)."""

        def make(req_id: int) -> bytes:
            return queue_info_request(req_id, self.stream, self.group, count)

        reply = self._call(make, 0, QueueInfoReply)
        assert isinstance(reply, QueueInfoReply)
        found = []
        rows = _peek_rows(reply.info.get("next", []))
        if len(rows) > count:
            raise errors.RelayError(errors.PROTOCOL, f"{len(rows)} jobs answered a peek at {count}")
        for seq, priority, not_before, _order_ms, key in rows:
            fetched = self._fetcher.fetch(seq - 1, 1, 0)
            tx = fetched.rows[0] if fetched is not None and fetched.rows else None
            if tx is not None and tx.seq == seq:
                found.append(Peeked(seq, priority, not_before, key, tx.payload, tx.headers))
            else:
                found.append(Peeked(seq, priority, not_before, key, None, ()))
        return found

    def run(
        self, work: Callable[[Job], object], count: int = 1, wait_ms: int = 1000
    ) -> Iterator[Job]:
        """Claim, call ``work`` on each job, ack it when it returns, nak it when it raises;
        yields each job once settled. Runs until the caller stops iterating."""
        while True:
            for job in self.claim(count, wait_ms):
                try:
                    work(job)
                except Exception:
                    self.nak([job])
                else:
                    self.ack([job])
                yield job

    def _call(
        self, make: Callable[[int], bytes], wait_ms: int, kind: type
    ) -> JobsReply | SettledReply | QueueInfoReply:
        deadline = time.monotonic() + self.timeout_s + wait_ms / 1000
        while True:
            reply = self._fetcher.call(make, wait_ms, (kind,))
            if isinstance(reply, JobsReply | SettledReply | QueueInfoReply):
                return reply
            if time.monotonic() > deadline:
                refused = self._fetcher.last_refusal
                said = f" (the last refusal: {refused})" if refused else ""
                raise errors.RelayError(
                    errors.UNAVAILABLE, f"no node answered for {self.stream!r} in time{said}"
                )


def _peek_rows(raw: object) -> list[tuple[int, int, int, int, bytes | None]]:
    """The ``next`` rows of a ``qinfo`` answer, checked (a node's answer is input too)."""
    if not isinstance(raw, list):
        raise errors.RelayError(errors.PROTOCOL, "a peek answer without a list of jobs")
    rows = []
    for row in raw:
        if (
            not isinstance(row, list)
            or len(row) != 5
            or not all(type(v) is int and v >= 0 for v in row[:4])
            or row[0] < 1
            or not (row[4] is None or isinstance(row[4], bytes))
        ):
            raise errors.RelayError(errors.PROTOCOL, f"a peeked job that is not one: {row!r:.80}")
        rows.append((row[0], row[1], row[2], row[3], row[4]))
    return rows
