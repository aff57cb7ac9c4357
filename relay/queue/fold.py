"""A work group's state: the fold of its control stream's operations over its job stream.

How this works: every replica of the job stream folds the group's operations in their verified
order (``apply``); before each one it takes in the jobs the operation looked at (every job up to
the highest ``upto`` seen so far, in seq order, while the group holds less than ``bytes_max``:
beyond it jobs wait in the log and are taken in as others leave). An operation first moves the
group's clock (``QuorumClock``) and makes delayed jobs ready; a tick may also expire leases: a
lease runs out once a quorum of replicas said, each by its own elapsed-time clock, that it
applied the claim (or renewal) the lease counts from at least the lease ago, so no wall clock
can cut a lease short. A claim takes up to ``count`` ready jobs in claim order (resources
passed over when ``exclusive`` and busy) and leases them; a settlement acks, naks (ready again,
after its delay), rejects (dead at once) or renews jobs, each only if the member holds that
very delivery (a settlement of an older delivery, or of a lease that ran out, changes nothing
and is answered ``stale``). A job whose delivery ends unacknowledged (nak or expiry) after
``max_deliveries`` deliveries is dead, as is a rejected one; dead jobs wait in the state until
an operation says they were moved into the dead-letter stream. With ``coalesce``, a job for a
resource whose job waits replaces it (the newest payload runs once); a job that is claimed is
not replaced, and one that comes back while a newer one waits is the one replaced.

The result of every operation is a function of the operations and jobs before it, so each
replica knows what a claim took without anyone writing it down.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from relay.core.flake import seq_unix_ms
from relay.queue.clock import QuorumClock
from relay.queue.jobs import Job
from relay.queue.ops import (
    ACK,
    NAK,
    REJECT,
    RENEW,
    Claim,
    Configure,
    Moved,
    Op,
    Settings,
    Settle,
    Tick,
)
from relay.queue.waiting import Waiting, WaitingJobs

HISTORY_MAX = 10  # deliveries of a job remembered for its dead letter
HELD_BYTES = 400  # a held job's record
HISTORY_BYTES = 120  # one remembered delivery
STALE, SETTLED = "stale", "settled"


@dataclass(frozen=True, slots=True)
class Delivery:
    member: str
    delivery: int
    at_ms: int  # the group's clock when it was claimed
    outcome: str  # "" while held; ack, nak, reject, expired


@dataclass(slots=True)
class Held:
    job: Waiting
    member: str
    delivery: int
    lease_ms: int
    lease_op: int  # the claim, or the last renewal applied: the lease counts from it


@dataclass(frozen=True, slots=True)
class Leased:
    """A job a claim took: which delivery it is, and its lease."""

    job: Waiting
    delivery: int
    lease_ms: int


@dataclass(frozen=True, slots=True)
class Dead:
    """A job that died: the ``ordinal``-th of its group, with its last deliveries."""

    ordinal: int
    seq: int
    reason: str  # rejected, or the deliveries ran out
    deliveries: int
    history: tuple[Delivery, ...]


@dataclass(slots=True)
class Outcome:
    """What one operation did."""

    op_seq: int
    leased: list[Leased] = field(default_factory=list)  # a claim's jobs
    settled: list[str] = field(default_factory=list)  # a settlement's, per item
    died: list[Dead] = field(default_factory=list)


@dataclass(slots=True)
class Totals:
    acked: int = 0
    dead: int = 0
    replaced: int = 0
    expired: int = 0
    malformed: int = 0
    skipped_ops: int = 0  # operations that did not decode


class QueueState:
    def __init__(self, replicas: tuple[int, ...], quorum: int, bytes_max: int) -> None:
        self.clock = QuorumClock(replicas, quorum)
        self.bytes_max = bytes_max
        self.settings = Settings()
        self.started = False
        self.cursor = 0  # jobs up to this seq of the job stream were taken in
        self.upto = 0  # the highest seq an operation looked at
        self.op_seq = 0  # the last operation applied
        self.waiting = WaitingJobs()
        self.held: dict[int, Held] = {}
        self.held_keys: Counter[bytes] = Counter()
        self.attested: dict[int, tuple[int, int]] = {}  # replica -> (op seq, age ms) it wrote
        self.history: dict[int, list[Delivery]] = {}  # of jobs delivered and not done
        self.waiting_by_key: dict[bytes, int] = {}  # with coalesce: key -> its waiting job
        self.totals = Totals()
        self.unmoved: deque[Dead] = deque()  # dead jobs not yet in the dead-letter stream
        self._outcome = Outcome(0)

    # --- an operation: begin, take in jobs, finish -----------------------------------------

    def begin(self, op_seq: int, origin: int, op: Op) -> int:
        """Start applying ``op`` (the control stream's tx at ``op_seq`` from ``origin``): the
        clock moves and leases expire. Returns the job seq to take jobs in up to: feed them
        with ``take_in`` until it returns False, then ``finish``."""
        if not self.started:
            self.started = True
            if isinstance(op, Configure):
                self.cursor = op.settings.start_after
        self._outcome = Outcome(op_seq)
        self.op_seq = op_seq
        now = self.clock.hear(origin, op.wall_ms, op_seq)
        if isinstance(op, Tick) and op.op_seq and origin in self.clock.replicas:
            self.attested[origin] = (op.op_seq, op.age_ms)
            self._expire()
        self.waiting.advance(now)
        if isinstance(op, Claim):
            self.upto = max(self.upto, op.upto)
        return self.upto

    def wants_jobs(self) -> bool:
        """Whether the group takes in more jobs now (up to ``upto``, and it has room)."""
        return self.cursor < self.upto and self.size_bytes() < self.bytes_max

    def take_in(self, job: Job) -> bool:
        """Take in the job stream's next job (the first after ``cursor``); False once no more
        are wanted."""
        if not self.wants_jobs() or job.seq > self.upto:
            return False
        if job.seq <= self.cursor:
            raise ValueError(f"job {job.seq} is not after the cursor {self.cursor}")
        self.cursor = job.seq
        if job.malformed:
            self.totals.malformed += 1
        key = job.key
        if self.settings.coalesce and key is not None:
            self._replace_waiting(key)
        waiting = Waiting(job.seq, job.priority, job.not_before, key, job.order_ms)
        self.waiting.add(waiting)
        if key is not None and self.settings.coalesce:
            self.waiting_by_key[key] = job.seq
        return self.wants_jobs()

    def skip_jobs_upto(self, seq: int) -> None:
        """The job stream holds nothing more up to ``seq`` (retention removed it, or seqs
        without txs): the cursor moves there."""
        self.cursor = max(self.cursor, min(seq, self.upto))

    def finish(self, op: Op) -> Outcome:
        """Apply ``op`` itself, once the jobs it looked at are in."""
        if isinstance(op, Configure):
            self.settings = Settings(
                op.settings.lease_ms,
                op.settings.max_deliveries,
                op.settings.coalesce,
                op.settings.exclusive,
                self.settings.start_after if self.op_seq else op.settings.start_after,
            )
        elif isinstance(op, Claim):
            self._claim(op)
        elif isinstance(op, Settle):
            self._settle(op)
        elif isinstance(op, Moved):
            while self.unmoved and self.unmoved[0].ordinal <= op.ordinal:
                self.unmoved.popleft()
        return self._outcome

    def skip(self, op_seq: int) -> None:
        """The control stream's tx at ``op_seq`` is not an operation: every replica skips it."""
        self.op_seq = op_seq
        self.totals.skipped_ops += 1

    # --- what operations do ---------------------------------------------------------------

    def _claim(self, op: Claim) -> None:
        busy = self.held_keys.__contains__ if self.settings.exclusive else None
        for job in self.waiting.take(op.count, busy):
            if job.key is not None and self.waiting_by_key.get(job.key) == job.seq:
                del self.waiting_by_key[job.key]
            history = self.history.setdefault(job.seq, [])
            delivery = (history[-1].delivery if history else 0) + 1
            history.append(Delivery(op.member, delivery, self.clock.now_ms, ""))
            del history[:-HISTORY_MAX]
            lease_op = self._outcome.op_seq
            self.held[job.seq] = Held(job, op.member, delivery, op.lease_ms, lease_op)
            if job.key is not None:
                self.held_keys[job.key] += 1
            self._outcome.leased.append(Leased(job, delivery, op.lease_ms))

    def _settle(self, op: Settle) -> None:
        start = max(self.clock.now_ms, seq_unix_ms(self._outcome.op_seq))
        for item in op.items:
            held = self.held.get(item.seq)
            if held is None or held.member != op.member or held.delivery != item.delivery:
                self._outcome.settled.append(STALE)
                continue
            self._outcome.settled.append(SETTLED)
            if item.action == RENEW:
                held.lease_op = self._outcome.op_seq
                continue
            self._release(held, item.action)
            if item.action == ACK:
                self.totals.acked += 1
                self.history.pop(item.seq, None)
            elif item.action == REJECT:
                self._die(held.job.seq, "rejected")
            elif item.action == NAK:
                not_before = start + item.delay_ms if item.delay_ms else 0
                self._back_or_dead(held, not_before)

    def _expire(self) -> None:
        """Leases a quorum of replicas said ran out: each applied the claim (or renewal) the
        lease counts from at least the lease ago, by its own elapsed-time clock."""
        words = list(self.attested.values())
        quorum = self.clock.quorum
        out = sorted(
            (h.lease_op, seq)
            for seq, h in self.held.items()
            if sum(op >= h.lease_op and age >= h.lease_ms for op, age in words) >= quorum
        )
        for _, seq in out:
            held = self.held[seq]
            self.totals.expired += 1
            self._release(held, "expired")
            self._back_or_dead(held, 0)

    def _release(self, held: Held, outcome: str) -> None:
        seq = held.job.seq
        del self.held[seq]
        key = held.job.key
        if key is not None:
            self.held_keys[key] -= 1
            if not self.held_keys[key]:
                del self.held_keys[key]
        history = self.history[seq]
        last = history[-1]
        history[-1] = Delivery(last.member, last.delivery, last.at_ms, outcome)

    def _back_or_dead(self, held: Held, not_before: int) -> None:
        """A delivery ended without an ack: the job waits again, or it died."""
        job = held.job
        if held.delivery >= self.settings.max_deliveries:
            self._die(job.seq, f"not acknowledged in {held.delivery} deliveries")
            return
        if self.settings.coalesce and job.key is not None and job.key in self.waiting_by_key:
            self.totals.replaced += 1  # a newer job for its resource waits: that one runs
            self.history.pop(job.seq, None)
            return
        order = not_before or job.order_ms
        back = Waiting(job.seq, job.priority, not_before or job.not_before, job.key, order)
        self.waiting.add(back)
        if self.settings.coalesce and job.key is not None:
            self.waiting_by_key[job.key] = job.seq

    def _replace_waiting(self, key: bytes) -> None:
        old = self.waiting_by_key.pop(key, None)
        if old is not None:
            self.waiting.replace(old)
            self.history.pop(old, None)
            self.totals.replaced += 1

    def _die(self, seq: int, reason: str) -> None:
        history = tuple(self.history.pop(seq, ()))
        deliveries = history[-1].delivery if history else 0
        self.totals.dead += 1
        dead = Dead(self.totals.dead, seq, reason, deliveries, history)
        self._outcome.died.append(dead)
        self.unmoved.append(dead)

    # --- reads ----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """The group's jobs by state (ready, delayed, claimed, dead not yet moved) and over its
        history by outcome (acked, dead, expired, replaced)."""
        delayed = self.waiting.delayed_count()
        t = self.totals
        return {
            "ready": len(self.waiting) - delayed,
            "delayed": delayed,
            "claimed": len(self.held),
            "dead_not_moved": len(self.unmoved),
            "acked": t.acked,
            "dead": t.dead,
            "expired": t.expired,
            "replaced": t.replaced,
        }

    def describe(self) -> dict[str, int | dict[str, list[int]]]:
        """Counts of the group's jobs as this replica folded them, for ``relay queue
        describe`` and the gauges."""
        waiting = self.waiting
        per_priority = {
            str(p): [
                n - waiting.delayed_by_priority.get(p, 0),
                waiting.delayed_by_priority.get(p, 0),
            ]
            for p, n in sorted(waiting.count_by_priority.items())
        }
        t = self.totals
        settings = self.settings
        return {
            "lease_ms": settings.lease_ms,
            "max_deliveries": settings.max_deliveries,
            "coalesce": int(settings.coalesce),
            "exclusive": int(settings.exclusive),
            **self.counts(),
            "malformed": t.malformed,
            "oldest_ready_ms": waiting.oldest_ready_ms(),
            "next_ready_ms": waiting.next_ready_ms(),
            "clock_ms": self.clock.now_ms,
            "jobs_through": self.cursor,
            "op_seq": self.op_seq,
            "bytes": self.size_bytes(),
            "per_priority": per_priority,
        }

    def leases(self) -> list[tuple[int, int]]:
        """(op seq the lease counts from, lease ms) of every held job."""
        return [(h.lease_op, h.lease_ms) for h in self.held.values()]

    def size_bytes(self) -> int:
        """What the group holds in memory, by the same count on every replica."""
        history = sum(len(h) for h in self.history.values())
        history += sum(len(d.history) for d in self.unmoved)
        held = HELD_BYTES * (len(self.held) + len(self.unmoved))
        return self.waiting.size_bytes() + held + HISTORY_BYTES * history
