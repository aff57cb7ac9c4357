"""A work group's rules stated plainly: a dictionary of jobs, sorted at every claim.

How this works: ``QueueModel`` applies a group's operations to its jobs as the rules in
``docs/design.md`` say, without any of the fold's indexes (``relay.queue.fold``): the clock is
the quorum-th latest wall the replicas wrote, a lease runs out once a quorum of replicas'
ticks said the operation it counts from is at least the lease old, a claim sorts every ready
job by (priority, order time, seq) and takes the first ones (passing over busy resources when
``exclusive``), and with ``coalesce`` a job replaces the waiting job of its resource. The
fold's property tests and the simulator's checker hold the fold to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.core.flake import seq_unix_ms
from relay.queue.fold import SETTLED, STALE
from relay.queue.jobs import Job
from relay.queue.ops import ACK, NAK, REJECT, RENEW, Claim, Configure, Op, Settings, Settle, Tick

WAITING, HELD, DONE, DEAD, REPLACED = "waiting", "held", "done", "dead", "replaced"


@dataclass
class ModelJob:
    job: Job
    order_ms: int
    not_before: int
    state: str = WAITING
    delivery: int = 0
    member: str = ""
    lease_op: int = 0
    lease: int = 0


@dataclass(frozen=True)
class ModelOutcome:
    leased: list[tuple[int, int]]  # (seq, delivery) a claim took
    settled: list[str]
    died: list[int]


class QueueModel:
    def __init__(self, replicas: tuple[int, ...], quorum: int, settings: Settings) -> None:
        self.replicas = frozenset(replicas)
        self.quorum = quorum
        self.settings = settings
        self.jobs: dict[int, ModelJob] = {}
        self.walls: dict[int, int] = {}
        self.attested: dict[int, tuple[int, int]] = {}
        self.now = 0
        self.upto = 0
        self.cursor = 0
        self.next_job = 0  # the index of the first job not looked at yet

    def apply(self, op: Op, origin: int, op_seq: int, jobs: list[Job]) -> ModelOutcome:
        """Apply the control stream's operation at ``op_seq``; ``jobs``: the job stream's, in
        seq order (a list that only grows between calls)."""
        self._hear(origin, op.wall_ms, op_seq)
        died = self._expire(op, origin)
        if isinstance(op, Claim):
            self.upto = max(self.upto, op.upto)
        while self.next_job < len(jobs) and jobs[self.next_job].seq <= self.upto:
            job = jobs[self.next_job]
            self.next_job += 1
            if job.seq > self.cursor:
                self._take_in(job)
                self.cursor = job.seq
        leased: list[tuple[int, int]] = []
        settled: list[str] = []
        if isinstance(op, Configure):
            self.settings = op.settings
        elif isinstance(op, Claim):
            leased = self._claim(op, op_seq)
        elif isinstance(op, Settle):
            settled, more = self._settle(op, op_seq)
            died += more
        return ModelOutcome(leased, settled, died)

    def count(self, state: str) -> int:
        return sum(1 for j in self.jobs.values() if j.state == state)

    def held(self) -> list[tuple[int, str, int]]:
        """(seq, member, delivery) of every held job, in seq order."""
        return sorted((s, j.member, j.delivery) for s, j in self.jobs.items() if j.state == HELD)

    def _hear(self, origin: int, wall: int, op_seq: int) -> None:
        if origin not in self.replicas:
            return
        self.walls[origin] = max(self.walls.get(origin, 0), min(wall, seq_unix_ms(op_seq)))
        if len(self.walls) >= self.quorum:
            ranked = sorted(self.walls.values(), reverse=True)
            self.now = max(self.now, ranked[self.quorum - 1])

    def _waiting_with(self, key: bytes | None) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.state == WAITING and j.job.key == key]

    def _take_in(self, job: Job) -> None:
        if self.settings.coalesce and job.key is not None:
            for old in self._waiting_with(job.key):
                old.state = REPLACED
        self.jobs[job.seq] = ModelJob(job, job.order_ms, job.not_before)

    def _expire(self, op: Op, origin: int) -> list[int]:
        """A tick's word; then every lease a quorum's words cover ran out, oldest first."""
        if not isinstance(op, Tick) or not op.op_seq or origin not in self.replicas:
            return []
        self.attested[origin] = (op.op_seq, op.age_ms)
        words = list(self.attested.values())
        out = sorted(
            (j.lease_op, s)
            for s, j in self.jobs.items()
            if j.state == HELD
            and sum(o >= j.lease_op and a >= j.lease for o, a in words) >= self.quorum
        )
        died: list[int] = []
        for _, seq in out:
            died += self._back(self.jobs[seq], 0)
        return died

    def _back(self, j: ModelJob, not_before: int) -> list[int]:
        if j.delivery >= self.settings.max_deliveries:
            j.state = DEAD
            return [j.job.seq]
        if self.settings.coalesce and j.job.key is not None and self._waiting_with(j.job.key):
            j.state = REPLACED
            return []
        j.state = WAITING
        if not_before:
            j.not_before, j.order_ms = not_before, not_before
        return []

    def _claim(self, op: Claim, op_seq: int) -> list[tuple[int, int]]:
        ready = sorted(
            (j.job.priority, j.order_ms, s)
            for s, j in self.jobs.items()
            if j.state == WAITING and j.not_before <= self.now
        )
        busy = {j.job.key for j in self.jobs.values() if j.state == HELD}
        taken: list[tuple[int, int]] = []
        for _, _, seq in ready:
            if len(taken) == op.count:
                break
            j = self.jobs[seq]
            if self.settings.exclusive and j.job.key is not None and j.job.key in busy:
                continue
            busy.add(j.job.key)
            j.state, j.member, j.delivery = HELD, op.member, j.delivery + 1
            j.lease, j.lease_op = op.lease_ms, op_seq
            taken.append((seq, j.delivery))
        return taken

    def _settle(self, op: Settle, op_seq: int) -> tuple[list[str], list[int]]:
        start = max(self.now, seq_unix_ms(op_seq))
        results: list[str] = []
        died: list[int] = []
        for item in op.items:
            j = self.jobs.get(item.seq)
            if j is None or j.state != HELD or j.member != op.member or j.delivery != item.delivery:
                results.append(STALE)
                continue
            results.append(SETTLED)
            if item.action == RENEW:
                j.lease_op = op_seq
            elif item.action == ACK:
                j.state = DONE
            elif item.action == REJECT:
                j.state = DEAD
                died.append(item.seq)
            elif item.action == NAK:
                died += self._back(j, start + item.delay_ms if item.delay_ms else 0)
        return results, died
