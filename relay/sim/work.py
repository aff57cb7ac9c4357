"""A work group in the simulator: a producer of jobs (priorities, not-before times, resources),
members that claim, work, settle, renew late, settle twice and crash, under the same faults as
the rest, and the history the checker holds them to.

How this works: in the seeds that draw it, a producer publishes jobs to one of the plan's
streams (whose other transactions are jobs too, with no headers) and two or three members work
it through the nodes' queue services, each request to a live node, given up after
``REQUEST_TIMEOUT_MS`` without an answer. The group's settings (coalescing, exclusive
resources, max deliveries) are drawn per seed and configured before any member claims. The
checker holds:

- no job is handed to a member while another still holds it: a new delivery is answered only
  after the previous holder settled it or its lease ran out, counted from when that holder sent
  its claim (or its last renewal that was applied);
- an acknowledged job never comes back, and no ack is applied twice;
- once the run is quiet, every live replica folded the group's control stream to its verified
  head and they agree (the same jobs held, the same counts), and no job a member saw acked is
  held there;
- the verified history, replayed through ``QueueModel`` (the rules stated plainly), hands out
  exactly what the members got: every delivery a member was given is one the model's claim
  made to that member (so no ready job waited behind a less urgent one, and no coalesced or
  busy resource ran twice), and the replicas end where the model does (no job lost: each is
  acked, dead, replaced by a newer one of its resource, still held or still waiting).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from relay.core.messages import Tx
from relay.core.timer import Now
from relay.queue.fold import SETTLED, QueueState
from relay.queue.jobs import job_headers, job_of
from relay.queue.ops import (
    ACK,
    NAK,
    REJECT,
    RENEW,
    Claim,
    OpError,
    Settings,
    Settle,
    SettleItem,
    decode,
    queue_stream,
)
from relay.queue.service import (
    ClaimAnswer,
    ClaimRequest,
    ConfigureRequest,
    InfoAnswer,
    SettleAnswer,
    SettleRequest,
)
from relay.sim.checker import InvariantChecker, InvariantViolation
from relay.sim.clients import Publish, SimClients
from relay.sim.queue_model import DEAD, DONE, REPLACED, WAITING, QueueModel

if TYPE_CHECKING:
    from relay.shell import Shell

GROUP = "workers"
PRODUCER = "jobs"
RESOURCES = (None, None, b"r1", b"r2", b"r3")
REQUEST_TIMEOUT_MS = 5000
CRASHES_MAX = 3
NEVER = 1 << 62
CLAIMING_AFTER_MS = 3000  # members claim this long after the last job was published


@dataclass(slots=True)
class Held:
    seq: int
    delivery: int
    lease_ms: int
    until_ms: int  # by the member's own count: claim (or applied renewal) sent + lease
    settle_at: int


@dataclass(slots=True)
class Asked:
    req_id: int
    node: int
    sent_ms: int
    kind: str  # claim, settle
    lease_ms: int = 0
    items: tuple[SettleItem, ...] = ()


@dataclass(slots=True)
class Member:
    name: str
    next_ms: int
    held: dict[int, Held] = field(default_factory=dict)
    asked: Asked | None = None
    req_id: int = 0


class SimWorkGroup:
    def __init__(
        self,
        rng: random.Random,
        stream: str,
        live: Callable[[], list[int]],
        times: tuple[int, int, int],
    ) -> None:
        """``times``: (first, last) ms of the jobs and the members' first actions, and when
        the faults are over (members claim until ``CLAIMING_AFTER_MS`` after both)."""
        first_ms, last_ms, calm_ms = times
        self.rng = rng
        self.stream = stream
        self.control = queue_stream(stream, GROUP)
        self.live = live
        self.members = [
            Member(f"m{i}", rng.randint(first_ms, last_ms)) for i in range(rng.randint(2, 3))
        ]
        self.members[0].next_ms = first_ms  # it configures the group first
        self.claims_until_ms = max(last_ms, calm_ms) + CLAIMING_AFTER_MS
        self.settings = Settings(
            lease_ms=2000,
            max_deliveries=rng.randint(2, 4),
            coalesce=rng.random() < 0.5,
            exclusive=rng.random() < 0.5,
        )
        self.configured = False  # the configuration was answered: members may claim
        self.job_times = sorted(rng.randint(first_ms, last_ms) for _ in range(rng.randint(5, 40)))
        self.jobs_sent = 0
        self.crashes = 0
        self.holder: dict[int, tuple[str, int, int]] = {}  # seq -> (member, delivery, until)
        self.acked: dict[int, int] = {}  # job -> the delivery a member saw acked
        self.given: set[tuple[str, int, int]] = set()  # (member, seq, delivery) answered
        self.clients: SimClients | None = None  # the producer of jobs publishes through them
        self.placed: tuple[tuple[int, ...], int] = ((), 0)  # (replicas, quorum) of the stream
        self.ops: list[Tx] = []  # the verified histories, for the model (``take_part``)
        self.jobs: list[Tx] = []

    def take_part(
        self, clients: SimClients, checker: InvariantChecker, placed: tuple[tuple[int, ...], int]
    ) -> None:
        """Publish jobs through ``clients``; keep the verified histories ``checker`` sees;
        ``placed``: the job stream's replicas and their quorum (the rules' clock)."""
        self.clients = clients
        self.placed = placed
        self.ops = checker.keep_txs(self.control)
        self.jobs = checker.keep_txs(self.stream)

    # --- driving ----------------------------------------------------------------------------

    def advance(self, now_ms: int, shells: dict[int, Shell], wall_ms: Callable[[int], int]) -> None:
        while self.jobs_sent < len(self.job_times) and self.job_times[self.jobs_sent] <= now_ms:
            self._publish_job(now_ms, wall_ms)
        for member in self.members:
            asked = member.asked
            if asked is not None:
                if now_ms - asked.sent_ms >= REQUEST_TIMEOUT_MS:
                    member.asked = None  # given up: a claim's jobs run out their leases
                    member.next_ms = now_ms + self.rng.randint(0, 500)
                continue
            if member.next_ms > now_ms:
                continue
            self._act(member, now_ms, shells, wall_ms)

    def node_gone(self, now_ms: int, node: int) -> None:
        """The members see their connections to ``node`` fail: a request out there is given
        up (its claim's jobs, if it was applied, run out their leases)."""
        for member in self.members:
            if member.asked is not None and member.asked.node == node:
                member.asked = None
                member.next_ms = now_ms + self.rng.randint(0, 100)

    def _publish_job(self, now_ms: int, wall_ms: Callable[[int], int]) -> None:
        """The next job: a priority, now and then a not-before time a moment ahead by some
        node's clock, and a resource from a few (a length of payload that draws no key)."""
        rng = self.rng
        self.jobs_sent += 1
        priority = rng.choice([None, 0, 5, 128, 200])
        nodes = self.live() or [1]
        delay = rng.choice([0, 0, 0, 300, 1500])
        not_before = wall_ms(rng.choice(nodes)) + delay if delay else None
        payload = rng.randbytes(rng.choice([1, 2, 4, 5, 7]))
        headers = job_headers(priority, not_before)
        job = Publish(self.stream, PRODUCER, self.jobs_sent, payload, headers=headers, routed=True)
        job.key = rng.choice(RESOURCES)
        assert self.clients is not None, "take_part first"
        self.clients.send(now_ms, job, rng)

    def _act(
        self, member: Member, now_ms: int, shells: dict[int, Shell], wall_ms: Callable[[int], int]
    ) -> None:
        nodes = [n for n in self.live() if n in shells]
        if not nodes:
            member.next_ms = now_ms + 100
            return
        n = self.rng.choice(nodes)
        now = Now(wall_ms(n), now_ms)
        member.req_id += 1
        client = member.name.encode()
        if now_ms > self.claims_until_ms and not member.held:
            member.next_ms = NEVER  # the run winds down: no new claims
            return
        if not self.configured:
            if member is not self.members[0]:
                member.next_ms = now_ms + 100  # the first member configures the group
                return
            request = ConfigureRequest(self.stream, GROUP, self.settings)
            shells[n].queues.request(client, member.req_id, request, now)
            member.asked = Asked(member.req_id, n, now_ms, "configure")
            return
        due = sorted((h.settle_at, seq) for seq, h in member.held.items() if h.settle_at <= now_ms)
        if due:
            self._settle(member, [seq for _, seq in due], n, now, shells)
            return
        if member.held:
            member.next_ms = min(h.settle_at for h in member.held.values())
            return
        lease = self.rng.choice([500, 1000, 2000])
        claim = ClaimRequest(
            self.stream,
            GROUP,
            member.name,
            self.rng.randint(1, 3),
            lease,
            self.rng.choice([0, 300]),
        )
        shells[n].queues.request(client, member.req_id, claim, now)
        member.asked = Asked(member.req_id, n, now_ms, "claim", lease)

    def _settle(
        self, member: Member, seqs: list[int], n: int, now: Now, shells: dict[int, Shell]
    ) -> None:
        rng = self.rng
        if self.crashes < CRASHES_MAX and rng.random() < 0.05:
            self.crashes += 1  # the member dies holding them: their leases run out
            member.held.clear()
            member.next_ms = now.elapsed_ms + rng.randint(0, 1000)
            return
        items = []
        for seq in seqs:
            held = member.held[seq]
            action = rng.choices([ACK, NAK, REJECT, RENEW], [70, 12, 6, 12])[0]
            delay = rng.choice([0, 0, 300]) if action == NAK else 0
            items.append(SettleItem(seq, held.delivery, action, delay))
            if rng.random() < 0.05:  # the same settlement twice
                items.append(SettleItem(seq, held.delivery, action, delay))
        request = SettleRequest(self.stream, GROUP, member.name, tuple(items))
        shells[n].queues.request(member.name.encode(), member.req_id, request, now)
        member.asked = Asked(member.req_id, n, now.elapsed_ms, "settle", items=tuple(items))

    # --- answers ----------------------------------------------------------------------------

    def on_answer(self, now_ms: int, client: bytes, req_id: int, answer: object) -> None:
        member = next((m for m in self.members if m.name.encode() == client), None)
        if member is None or member.asked is None or member.asked.req_id != req_id:
            return  # an answer to a request the member gave up on
        asked, member.asked = member.asked, None
        member.next_ms = now_ms + self.rng.randint(0, 200)
        if isinstance(answer, InfoAnswer):
            self.configured = True  # the configuration is applied
        elif isinstance(answer, ClaimAnswer):
            for job in answer.jobs:
                self._given(member, job.leased.job.seq, job.leased.delivery, asked, now_ms)
        elif isinstance(answer, SettleAnswer):
            for item, result in zip(asked.items, answer.results, strict=True):
                self._settled(member, item, result, asked.sent_ms)

    def _given(self, member: Member, seq: int, delivery: int, asked: Asked, now_ms: int) -> None:
        if delivery > self.acked.get(seq, delivery):  # an older one's late answer: stale, below
            raise InvariantViolation(f"job {seq} was acked and came back (delivery {delivery})")
        self.given.add((member.name, seq, delivery))
        until = asked.sent_ms + asked.lease_ms
        before = self.holder.get(seq)
        if before is not None:
            name, was, held_until = before
            if delivery == was:
                raise InvariantViolation(f"job {seq}: delivery {delivery} handed out twice")
            if delivery < was:  # an answer that came late: the job went on since (a stale
                work = self.rng.randint(0, 500)  # lease, whose settlement will be stale)
                member.held[seq] = Held(seq, delivery, asked.lease_ms, until, now_ms + work)
                return
            taken = (member.name, delivery)
            if now_ms < held_until and not self._released(name, seq, was, taken):
                raise InvariantViolation(
                    f"job {seq} handed to {member.name} (delivery {delivery}) at {now_ms} while "
                    f"{name} held delivery {was} until {held_until}"
                )
        self.holder[seq] = (member.name, delivery, until)
        work = self.rng.randint(0, int(asked.lease_ms * 1.3))  # now and then past the lease
        member.held[seq] = Held(seq, delivery, asked.lease_ms, until, now_ms + work)

    def _released(self, member: str, seq: int, delivery: int, taken: tuple[str, int]) -> bool:
        """Whether the verified history holds ``member``'s settlement of that delivery, applied
        (not stale, by the rules) before the claim that gave ``taken`` (member, delivery): one
        whose answer the member never got (it gave up waiting, or the node went down)."""
        model = QueueModel(*self.placed, Settings())
        jobs = [job_of(tx) for tx in self.jobs]
        released = False
        for tx in self.ops:
            try:
                op = decode(tx.payload)
            except OpError:
                continue
            out = model.apply(op, tx.origin, tx.seq, jobs)
            if isinstance(op, Claim) and op.member == taken[0] and (seq, taken[1]) in out.leased:
                return released
            if isinstance(op, Settle) and op.member == member:
                for item, result in zip(op.items, out.settled, strict=True):
                    ours = (item.seq, item.delivery) == (seq, delivery)
                    released |= ours and item.action != RENEW and result == SETTLED
        return released

    def _settled(self, member: Member, item: SettleItem, result: str, sent_ms: int) -> None:
        held = member.held.get(item.seq)
        if held is None or held.delivery != item.delivery:
            return  # the second copy of a settlement
        if item.action == RENEW:
            if result == "settled":
                held.until_ms = sent_ms + held.lease_ms
                self.holder[item.seq] = (member.name, held.delivery, held.until_ms)
            held.settle_at = sent_ms + self.rng.randint(100, 1500)
            if result != "settled":
                del member.held[item.seq]
            return
        del member.held[item.seq]
        name, delivery, _ = self.holder.get(item.seq, ("", 0, 0))
        if result == "settled" and (name, delivery) == (member.name, item.delivery):
            self.holder[item.seq] = (name, delivery, sent_ms)  # released when it was sent
            if item.action == ACK:
                if item.seq in self.acked:
                    raise InvariantViolation(f"job {item.seq} was acked twice")
                self.acked[item.seq] = item.delivery

    # --- the run's end ------------------------------------------------------------------------

    def idle(self, shells: dict[int, Shell], verified_of: Callable[[int, str], int]) -> bool:
        """Every member is done (it stopped claiming once the run wound down, waits for no
        answer and holds no job), and every live replica folded the control stream to its
        verified head (its reads of it may be a turn behind)."""
        if self.jobs_sent < len(self.job_times):
            return False
        if not all(m.next_ms == NEVER and m.asked is None and not m.held for m in self.members):
            return False
        for n, shell in shells.items():
            head = verified_of(n, self.control)
            state = shell.queues.describe(self.stream, GROUP)
            if head and (state is None or state.op_seq != head):
                return False
        return True

    def next_time(self) -> int | None:
        times = [m.next_ms for m in self.members if m.next_ms < NEVER]
        if self.jobs_sent < len(self.job_times):
            times.append(self.job_times[self.jobs_sent])
        times += [m.asked.sent_ms + REQUEST_TIMEOUT_MS for m in self.members if m.asked]
        return min(times) if times else None

    def check(self, shells: dict[int, Shell], verified_of: Callable[[int, str], int]) -> None:
        """Once quiet: every live replica folded the control stream to its head, they agree,
        nothing a member saw acked is held, and the model's replay of the history
        made every delivery the members got and ends where the replicas do."""
        seen = []
        for n, shell in shells.items():
            state = shell.queues.describe(self.stream, GROUP)
            head = verified_of(n, self.control)
            if head == 0:
                continue
            if state is None or state.op_seq != head:
                found = None if state is None else state.op_seq
                raise InvariantViolation(
                    f"node {n} folded {self.control} to {found}, its verified head is {head}"
                )
            held = tuple(state_held(state))
            t = state.totals
            seen.append((n, (held, t.acked, t.dead, t.replaced, len(state.waiting), state.cursor)))
            for seq in self.acked:
                if seq in state.held:
                    raise InvariantViolation(f"node {n} holds job {seq}, which a member saw acked")
        if len({summary for _, summary in seen}) > 1:
            raise InvariantViolation(f"the replicas' work groups differ: {seen}")
        if not self.ops:
            return  # nothing was written (no configuration was ever answered)
        states = [shell.queues.describe(self.stream, GROUP) for shell in shells.values()]
        state = next((s for s in states if s is not None and s.op_seq == self.ops[-1].seq), None)
        if state is None:
            return  # no live replica holds the group (nothing was written, or all went away)
        model, leases = self._replay(tuple(state.clock.replicas), state.clock.quorum)
        for member, seq, delivery in sorted(self.given - leases):
            raise InvariantViolation(
                f"{member} was given job {seq} (delivery {delivery}), which no claim of it "
                f"took by the rules: {self._why(model, seq)}"
            )
        t = state.totals
        ends = (state_held(state), len(state.waiting), t.acked, t.dead, t.replaced)
        expected = (
            model.held(),
            model.count(WAITING),
            model.count(DONE),
            model.count(DEAD),
            model.count(REPLACED),
        )
        if ends != expected:
            raise InvariantViolation(
                f"the group ends as (held, waiting, acked, dead, replaced) {ends}, "
                f"the rules say {expected}"
            )

    def _replay(
        self, replicas: tuple[int, ...], quorum: int
    ) -> tuple[QueueModel, set[tuple[str, int, int]]]:
        """The model's run over the verified history; (member, seq, delivery) of its leases."""
        model = QueueModel(tuple(sorted(replicas)), quorum, Settings())
        jobs = [job_of(tx) for tx in self.jobs]
        leases: set[tuple[str, int, int]] = set()
        for tx in self.ops:
            try:
                op = decode(tx.payload)
            except OpError:
                continue
            out = model.apply(op, tx.origin, tx.seq, jobs)
            if isinstance(op, Claim):
                leases.update((op.member, seq, delivery) for seq, delivery in out.leased)
        return model, leases

    @staticmethod
    def _why(model: QueueModel, seq: int) -> str:
        j = model.jobs.get(seq)
        if j is None:
            return "the model never took it in"
        return (
            f"priority {j.job.priority}, order {j.order_ms}, key {j.job.key!r}, "
            f"the model ends it {j.state} after {j.delivery} deliveries"
        )


def state_held(state: QueueState) -> list[tuple[int, str, int]]:
    return sorted((seq, h.member, h.delivery) for seq, h in state.held.items())
