"""A node's work groups: members' claims and settlements in, operations and answers out.

How this works: the service is a client of its own node's core. A member's claim or settlement
becomes an operation published into the group's control stream (a ``PublishRequested`` from an
address no ZeroMQ client can have); the service keeps every group this node serves up with its
two streams through fetches of its own (``Follower``), and answers the member once the fold has
applied its operation: the jobs it took, with their payloads read from the job stream, or the
result of each settlement. A claim that took nothing, with time left to wait, is parked and
proposed again when the job stream grows (at once) or another operation changed the group (at
the next tick); at the end of its wait it is answered empty, with when the next delayed job
becomes ready. When a lease runs out by this node's elapsed-time clock (counted from when it
applied the claim or renewal), or a not-before time passes by its wall clock, and what it last
wrote does not say so, the node writes a tick. Every request and answer goes through ``events``
and ``replies``: the shell hands the first to the core on its next turn and sends the second.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from relay import errors
from relay.core.events import (
    Acked,
    Event,
    FetchRequested,
    PublishRequested,
    PublishResults,
    ReadResult,
    Redirect,
    Rejected,
)
from relay.core.flake import seq_node
from relay.core.messages import Item, Tx
from relay.core.reads import FETCH_TXS_MAX
from relay.core.routing import DEAD_SUFFIX, QUEUE_SUFFIX, Routing
from relay.core.timer import Now
from relay.queue.bounds import QueueBounds
from relay.queue.fold import Dead, Leased, Outcome, QueueState
from relay.queue.follower import Follower, ReadOps
from relay.queue.ops import (
    Claim,
    Configure,
    Moved,
    Op,
    Settings,
    Settle,
    SettleItem,
    Tick,
    encode,
    parse_queue_stream,
    queue_stream,
)

log = logging.getLogger("relay.queue")
INTERNAL = b"\x00relay-queue"  # ZeroMQ's own ids are 5 bytes; a client's may not start with 0
READ_TXS = FETCH_TXS_MAX  # txs per fetch of the service's own
READ_WAIT_MS = 10_000  # its long polls of the control stream
TICK_EVERY_MS = 200  # the least time between two ticks of one group from this node
WAIT_MS_MAX = 30_000
UNFOLDED_NAMED_MAX = 1000  # control streams a node says once it does not fold
DEAD_PER_MOVE = 100  # dead jobs moved in one publish
UNCLAIMED_MAX = 1024  # outcomes of this node's operations applied before their publish answer


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    stream: str
    group: str
    member: str
    count: int
    lease_ms: int
    wait_ms: int


@dataclass(frozen=True, slots=True)
class SettleRequest:
    stream: str
    group: str
    member: str
    items: tuple[SettleItem, ...]


@dataclass(frozen=True, slots=True)
class ConfigureRequest:
    stream: str
    group: str
    settings: Settings
    start_latest: bool = False  # a new group starts after the job stream's verified seq


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    leased: Leased
    tx: Tx


@dataclass(frozen=True, slots=True)
class ClaimAnswer:
    jobs: tuple[ClaimedJob, ...]
    next_ready_ms: int  # with no job: when the next delayed job becomes ready (0: unknown)


@dataclass(frozen=True, slots=True)
class SettleAnswer:
    results: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InfoAnswer:
    info: dict[str, object]


Answer = ClaimAnswer | SettleAnswer | InfoAnswer | Redirect | Rejected
Request = ClaimRequest | SettleRequest | ConfigureRequest


@dataclass(slots=True)
class Member:
    """A member's request in flight."""

    client: bytes
    req_id: int
    request: Request
    deadline_ms: int  # elapsed time when a claim's wait ends
    leased: list[Leased] = field(default_factory=list)
    txs: dict[int, Tx] = field(default_factory=dict)


@dataclass(slots=True)
class Group:
    stream: str  # the job stream
    group: str
    control: str
    follower: Follower
    reading: bool = False  # a fetch of this service's is out for the group
    published: dict[int, Member] = field(default_factory=dict)  # op seq -> its member
    parked: list[Member] = field(default_factory=list)
    last_tick_ms: int = -TICK_EVERY_MS
    changed: bool = False  # an operation of another changed the group since the last proposal
    unclaimed: dict[int, Outcome] = field(default_factory=dict)  # this node's ops, not matched
    moving: bool = False  # dead jobs on their way to the dead-letter stream
    applied_at: dict[int, int] = field(default_factory=dict)  # op seq -> elapsed ms applied

    @property
    def dead_stream(self) -> str:
        return self.stream + DEAD_SUFFIX


class QueueService:
    def __init__(
        self,
        node_id: int,
        routing: Routing,
        quorum_of: Callable[[int], int],
        verified_of: Callable[[str], int],
        up_nodes: Callable[[], set[int]],
        bounds: QueueBounds,
    ) -> None:
        self.node_id = node_id
        self.routing = routing
        self.quorum_of = quorum_of
        self.verified_of = verified_of
        self.up_nodes = up_nodes
        self.bounds = bounds
        self.groups: dict[str, Group] = {}
        self.by_stream: dict[str, list[Group]] = {}  # job stream -> the groups working it
        self.unfolded: set[str] = set()  # control streams left unfolded (logged once each)
        self.now = Now(0, 0)  # the turn's time: the shell sets it before each turn
        self.events: list[Event] = []  # for the core's next turn
        self.replies: list[tuple[bytes, int, Answer]] = []
        self._next_id = 0
        self._pending: dict[int, Callable[[object], None]] = {}  # own req id -> what to do

    # --- members ----------------------------------------------------------------------------

    def request(self, client: bytes, req_id: int, request: Request, now: Now) -> None:
        replicas = self.routing.replicas_of(request.stream)
        if self.node_id not in replicas:
            if replicas:
                self.replies.append((client, req_id, Redirect(request.stream, replicas)))
            else:
                why = f"no node's streams patterns match {request.stream!r}"
                self.replies.append((client, req_id, Rejected(errors.NO_REPLICAS, why)))
            return
        try:
            control = queue_stream(request.stream, request.group)
        except ValueError as exc:
            self.replies.append((client, req_id, Rejected(errors.BAD_REQUEST, str(exc))))
            return
        group = self._group(request.stream, control)
        if group is None:
            why = (
                f"this node folds {len(self.groups)} work groups, as many as "
                f"'queue_groups_max' allows; ask another replica of {request.stream!r}"
            )
            self.replies.append((client, req_id, Rejected(errors.BUSY, why)))
            return
        wait = min(request.wait_ms, WAIT_MS_MAX) if isinstance(request, ClaimRequest) else 0
        self._propose(group, Member(client, req_id, request, now.elapsed_ms + wait), now)

    def follow(self, control: str) -> None:
        """A control stream this node replicates moved: keep its group's state (every replica
        folds every group, so any of them can answer a member)."""
        if control in self.groups:
            return
        parsed = parse_queue_stream(control)
        if parsed is None or self.node_id not in self.routing.replicas_of(parsed[0]):
            return
        if self._group(parsed[0], control) is not None or control in self.unfolded:
            return
        if len(self.unfolded) < UNFOLDED_NAMED_MAX:
            self.unfolded.add(control)
            log.warning(
                "work group %r is not folded here: this node folds %d groups, as many as "
                "queue_groups_max allows",
                control,
                len(self.groups),
            )

    def describe(self, stream: str, group: str) -> QueueState | None:
        """The group's state as this node folded it so far (None: this node has not read it)."""
        found = self.groups.get(queue_stream(stream, group))
        return found.follower.state if found else None

    def _group(self, stream: str, control: str) -> Group | None:
        """The group this control stream holds, found or started (None: this node folds as
        many groups as ``queue_groups_max`` allows)."""
        group = self.groups.get(control)
        if group is None:
            if len(self.groups) >= self.bounds.groups_max:
                return None
            replicas = self.routing.replicas_of(stream)
            quorum = self.quorum_of(len(replicas))
            state = QueueState(replicas, quorum, self.bounds.group_bytes_max)
            name = control[len(stream) + len(QUEUE_SUFFIX) :]
            group = self.groups[control] = Group(stream, name, control, Follower(state))
            self.by_stream.setdefault(stream, []).append(group)
            self._read(group)
        return group

    def _propose(self, group: Group, member: Member, now: Now) -> None:
        request = member.request
        op: Op
        if isinstance(request, ClaimRequest):
            upto = self.verified_of(group.stream)
            op = Claim(request.member, request.count, request.lease_ms, upto, now.wall_ms)
        elif isinstance(request, SettleRequest):
            op = Settle(request.member, request.items, now.wall_ms)
        else:
            settings = request.settings
            if request.start_latest:
                settings = replace(settings, start_after=self.verified_of(group.stream))
            op = Configure(settings, now.wall_ms)
        group.changed = False

        def published(body: object) -> None:
            if isinstance(body, PublishResults) and isinstance(body.results[0], Acked):
                seq = body.results[0].seq
                early = group.unclaimed.pop(seq, None)  # the fold got there before the answer
                if early is not None:
                    self._outcome(group, member, early)
                else:
                    group.published[seq] = member
                self._read(group)
            elif isinstance(body, PublishResults) and isinstance(body.results[0], Rejected):
                self.replies.append((member.client, member.req_id, body.results[0]))
            elif isinstance(body, Redirect | Rejected):
                self.replies.append((member.client, member.req_id, body))

        self._publish(group.control, op, published)

    def _publish(self, control: str, op: Op, then: Callable[[object], None]) -> None:
        req_id = self._own(then)
        item = Item(req_id, encode(op))
        self.events.append(PublishRequested(INTERNAL, req_id, control, "", (item,)))

    def _own(self, then: Callable[[object], None]) -> int:
        self._next_id += 1
        self._pending[self._next_id] = then
        return self._next_id

    # --- the core's answers to the service --------------------------------------------------

    def answered(self, req_id: int, body: object) -> None:
        """The core answered one of the service's own requests."""
        then = self._pending.pop(req_id, None)
        if then is not None:
            then(body)

    def _read(self, group: Group) -> None:
        """Fetch what the group's follower wants next, unless a fetch is out."""
        if group.reading:
            return
        want = group.follower.wants()
        if want is None:
            return
        group.reading = True

        def read(body: object) -> None:
            group.reading = False
            if not isinstance(body, ReadResult):
                return  # not readable now (the node is catching up, or not serving): later
            if isinstance(want, ReadOps):
                group.follower.ops_read(body.txs)
            else:
                group.follower.jobs_read(body.txs, body.verified_seq, body.lost)
            self._advance(group)
            self._read(group)

        req_id = self._own(read)
        if isinstance(want, ReadOps):
            fetch = FetchRequested(
                INTERNAL, req_id, group.control, want.after_seq, READ_TXS, READ_WAIT_MS
            )
        else:
            fetch = FetchRequested(INTERNAL, req_id, group.stream, want.after_seq, READ_TXS, 0)
        self.events.append(fetch)

    def _advance(self, group: Group) -> None:
        for outcome in group.follower.advance():
            group.applied_at[outcome.op_seq] = self.now.elapsed_ms
            member = group.published.pop(outcome.op_seq, None)
            if member is not None:
                self._outcome(group, member, outcome)
                continue
            group.changed = True
            if seq_node(outcome.op_seq) == self.node_id:  # perhaps ours, its answer not in yet
                group.unclaimed[outcome.op_seq] = outcome
                while len(group.unclaimed) > UNCLAIMED_MAX:
                    del group.unclaimed[next(iter(group.unclaimed))]

    def _outcome(self, group: Group, member: Member, outcome: Outcome) -> None:
        if isinstance(member.request, SettleRequest):
            answer = SettleAnswer(tuple(outcome.settled))
            self.replies.append((member.client, member.req_id, answer))
            return
        if isinstance(member.request, ConfigureRequest):
            info = InfoAnswer(dict(group.follower.state.describe()))
            self.replies.append((member.client, member.req_id, info))
            return
        if not outcome.leased:
            group.parked.append(member)
            return
        member.leased = outcome.leased
        self._fetch_jobs(group, member)

    def _fetch_jobs(self, group: Group, member: Member) -> None:
        """Read the claimed jobs' txs, as few fetches as their places in the stream allow (one
        for a run of jobs with no other tx between them), then answer the member."""
        wanted = sorted(x.job.seq for x in member.leased if x.job.seq not in member.txs)
        if not wanted:
            jobs = tuple(ClaimedJob(x, member.txs[x.job.seq]) for x in member.leased)
            self.replies.append((member.client, member.req_id, ClaimAnswer(jobs, 0)))
            return
        first = wanted[0]

        def got(body: object) -> None:
            if isinstance(body, Redirect | Rejected):  # this node cannot read now: the member
                why = f"could not read the claimed jobs of {group.stream!r} here; claim again"
                self.replies.append(
                    (member.client, member.req_id, Rejected(errors.UNAVAILABLE, why))
                )  # asks again; the leases it was not told of run out
                return
            if not isinstance(body, ReadResult):
                return  # not an answer to a read
            want = set(wanted)
            member.txs.update((tx.seq, tx) for tx in body.txs if tx.seq in want)
            if first not in member.txs:  # gone (retention removed it): answered without
                member.txs[first] = Tx(first, 0, 0, 0, "", 0, b"")
            self._fetch_jobs(group, member)

        req_id = self._own(got)
        limit = min(READ_TXS, len(wanted))
        self.events.append(FetchRequested(INTERNAL, req_id, group.stream, first - 1, limit, 0))

    def grew(self, stream: str, now: Now) -> None:
        """``stream`` verified more txs: claims parked on a group working it are proposed
        again at once (the new txs may be ready jobs)."""
        for group in self.by_stream.get(stream, ()):
            parked, group.parked = group.parked, []
            for member in parked:
                if now.elapsed_ms >= member.deadline_ms:  # its wait is over: answered empty
                    answer = ClaimAnswer((), group.follower.state.waiting.next_ready_ms())
                    self.replies.append((member.client, member.req_id, answer))
                else:
                    self._propose(group, member, now)

    # --- time -------------------------------------------------------------------------------

    def tick(self, now: Now) -> None:
        """Parked claims whose wait ended are answered, those with news proposed again; ticks
        are written where a deadline passed by this node's clock."""
        for group in self.groups.values():
            self._read(group)
            state = group.follower.state
            news = group.changed or self.verified_of(group.stream) > state.upto
            keep: list[Member] = []
            for member in group.parked:
                if now.elapsed_ms >= member.deadline_ms:
                    answer = ClaimAnswer((), state.waiting.next_ready_ms())
                    self.replies.append((member.client, member.req_id, answer))
                elif news:
                    self._propose(group, member, now)
                else:
                    keep.append(member)
            group.parked = keep
            self._tick_group(group, now)
            self._move_dead(group, now)

    def _move_dead(self, group: Group, now: Now) -> None:
        """As the group's mover (the first live replica of the job stream that replicates its
        dead-letter stream too), publish the dead jobs not yet moved, then say so in the control
        stream. Message ids are the dead jobs' ordinals under one producer id per group, so a
        second mover's copy (or this one's after a crash) within the dedup window is the same
        message."""
        unmoved = group.follower.state.unmoved
        if group.moving or not unmoved or not self._is_mover(group):
            return
        batch = list(itertools.islice(unmoved, DEAD_PER_MOVE))
        group.moving = True
        found: dict[int, Tx] = {}

        def moved(_body: object) -> None:
            group.moving = False

        def published(body: object) -> None:
            if not isinstance(body, PublishResults) or not all(map(_stored, body.results)):
                group.moving = False
                return
            self._publish(group.control, Moved(batch[-1].ordinal, now.wall_ms), moved)

        def got(seq: int, body: object) -> None:
            if isinstance(body, ReadResult) and body.txs and body.txs[0].seq == seq:
                found[seq] = body.txs[0]
            elif isinstance(body, ReadResult | Redirect | Rejected):
                found[seq] = Tx(seq, 0, 0, 0, "", 0, b"")  # retention removed it
            if len(found) == len(batch):
                items = tuple(dead_letter(group.group, d, found[d.seq]) for d in batch)
                req_id = self._own(published)
                producer = f"relay-dead.{group.group}"
                self.events.append(
                    PublishRequested(INTERNAL, req_id, group.dead_stream, producer, items)
                )

        for dead in batch:
            req_id = self._own(functools.partial(got, dead.seq))
            self.events.append(FetchRequested(INTERNAL, req_id, group.stream, dead.seq - 1, 1, 0))

    def _is_mover(self, group: Group) -> bool:
        up = self.up_nodes() | {self.node_id}
        both = set(self.routing.replicas_of(group.dead_stream))
        movers = [n for n in self.routing.replicas_of(group.stream) if n in both and n in up]
        return bool(movers) and min(movers) == self.node_id

    def _tick_group(self, group: Group, now: Now) -> None:
        """Write a tick when, by this node's clocks, a lease ran out (elapsed time since this
        node applied the operation it counts from) or a delayed job's time came (wall time),
        and what this node last wrote does not say so yet."""
        if now.elapsed_ms - group.last_tick_ms < TICK_EVERY_MS:
            return
        state = group.follower.state
        applied = group.applied_at
        leases = state.leases()
        if len(applied) > 2 * len(leases) + 64:
            live = {op for op, _ in leases}
            group.applied_at = applied = {op: t for op, t in applied.items() if op in live}
        passed = [
            (op, lease)
            for op, lease in leases
            if now.elapsed_ms - applied.get(op, now.elapsed_ms) >= lease
        ]
        op_seq = age = 0
        if passed:
            op_seq = max(op for op, _ in passed)
            age = now.elapsed_ms - applied[op_seq]
            said_op, said_age = state.attested.get(self.node_id, (0, 0))
            longest = max(lease for op, lease in passed if op <= op_seq)
            if said_op >= op_seq and said_age >= longest:
                op_seq = age = 0  # said already: the others' word is awaited
        ready_at = state.waiting.next_ready_ms()
        due = ready_at and now.wall_ms >= ready_at > state.clock.written_by(self.node_id)
        if not op_seq and not due:
            return
        group.last_tick_ms = now.elapsed_ms
        self._publish(group.control, Tick(now.wall_ms, op_seq, age), lambda _body: None)

    def take_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    def take_replies(self) -> list[tuple[bytes, int, Answer]]:
        replies, self.replies = self.replies, []
        return replies


def dead_letter(group: str, dead: Dead, job: Tx) -> Item:
    """The dead-letter stream's message for a dead job: its payload, key and headers, and
    where, why and after how many deliveries it died (``relay-dead-*`` headers)."""
    history = [[d.member, d.delivery, d.at_ms, d.outcome] for d in dead.history]
    headers = (
        *job.headers,
        ("relay-dead-group", group.encode()),
        ("relay-dead-seq", str(dead.seq).encode()),
        ("relay-dead-reason", dead.reason.encode()),
        ("relay-dead-deliveries", str(dead.deliveries).encode()),
        ("relay-dead-history", json.dumps(history).encode()),
    )
    return Item(dead.ordinal, job.payload, job.key, headers)


def _stored(result: Acked | Rejected) -> bool:
    """Whether the dead-letter stream holds the message: stored now, or by an earlier mover
    (``conflict``: the same id with other content, such as a payload retention removed since)."""
    return isinstance(result, Acked) or result.code == errors.CONFLICT
