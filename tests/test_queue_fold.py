"""The work group's fold against a model that states the rules plainly (a list of jobs, sorted
at every claim), over random histories of jobs and operations; and the rules one by one."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.flake import make_seq
from relay.queue import waiting
from relay.queue.fold import SETTLED, STALE, Outcome, QueueState
from relay.queue.jobs import Job
from relay.queue.ops import (
    ACK,
    NAK,
    REJECT,
    RENEW,
    Claim,
    Configure,
    Op,
    Settings,
    Settle,
    SettleItem,
    Tick,
)
from relay.sim.queue_model import WAITING, QueueModel

T0 = 1_800_000_000_000  # unix ms
REPLICAS = (1, 2, 3)


@st.composite
def histories(draw: st.DrawFn) -> tuple[Settings, list[tuple[str, tuple[Any, ...]]]]:
    settings = Settings(
        lease_ms=1000,
        max_deliveries=draw(st.integers(1, 3)),
        coalesce=draw(st.booleans()),
        exclusive=draw(st.booleans()),
    )
    steps: list[tuple[str, tuple[Any, ...]]] = []
    ms = T0
    for _ in range(draw(st.integers(1, 60))):
        ms += draw(st.integers(0, 700))
        kind = draw(st.sampled_from(["job", "job", "claim", "settle", "tick"]))
        if kind == "job":
            priority = draw(st.sampled_from([0, 5, 128]))
            delay = draw(st.sampled_from([0, 0, 0, 500, 3000]))
            key = draw(st.sampled_from([None, b"a", b"b", b"c"]))
            steps.append(("job", (ms, priority, ms + delay if delay else 0, key)))
        elif kind == "claim":
            steps.append(
                (
                    "claim",
                    (
                        ms,
                        draw(st.sampled_from(["m1", "m2"])),
                        draw(st.integers(1, 4)),
                        draw(st.sampled_from([300, 1000, 5000])),
                        draw(st.integers(1, 3)),
                    ),
                )
            )
        elif kind == "settle":
            steps.append(
                (
                    "settle",
                    (
                        ms,
                        draw(st.sampled_from(["m1", "m2"])),
                        draw(st.integers(0, 10**6)),
                        draw(st.sampled_from([ACK, NAK, REJECT, RENEW])),
                        draw(st.sampled_from([0, 0, 800])),
                        draw(st.integers(1, 3)),
                        draw(st.booleans()),
                    ),
                )
            )
        else:
            word = (draw(st.integers(0, 10**6)), draw(st.sampled_from([0, 300, 1000, 6000])))
            steps.append(
                ("tick", (ms, draw(st.integers(1, 3)), draw(st.integers(-2000, 2000)), *word))
            )
    return settings, steps


def run(settings: Settings, steps: list[tuple[str, tuple[Any, ...]]]) -> None:
    state = QueueState(REPLICAS, 2, bytes_max=1 << 40)
    model = QueueModel(REPLICAS, 2, settings)
    jobs: list[Job] = []
    op_seqs: list[int] = []
    counter = 0

    def apply(op: Op, origin: int, ms: int) -> None:
        nonlocal counter
        counter += 1
        op_seq = make_seq(ms, origin, counter % 4096)
        upto = state.begin(op_seq, origin, op)
        for job in jobs:
            if job.seq > state.cursor and not state.take_in(job):
                break
        out = state.finish(op)
        expected = model.apply(op, origin, op_seq, jobs)
        op_seqs.append(op_seq)
        assert upto == model.upto
        assert [(x.job.seq, x.delivery) for x in out.leased] == expected.leased
        assert out.settled == expected.settled
        assert sorted(d.seq for d in out.died) == sorted(expected.died)

    apply(Configure(settings, T0), 1, T0)
    for kind, args in steps:
        if kind == "job":
            ms, priority, nb, key = args
            counter += 1
            seq = make_seq(ms, 1, counter % 4096)
            jobs.append(Job(seq, priority, nb, key))
        elif kind == "claim":
            ms, member, count, lease, origin = args
            upto = jobs[-1].seq if jobs else 0
            apply(Claim(member, count, lease, upto, ms), origin, ms)
        elif kind == "settle":
            ms, member, pick, action, delay, origin, fresh = args
            held = sorted(state.held.items())
            if held:
                seq, h = held[pick % len(held)]
                item = SettleItem(
                    seq, h.delivery if fresh else max(1, h.delivery - 1), action, delay
                )
                apply(Settle(member, (item,), ms), origin, ms)
        else:
            ms, origin, skew, pick, age = args
            attest = op_seqs[pick % len(op_seqs)] if op_seqs and pick % 4 else 0
            apply(Tick(max(0, ms + skew), attest, age), origin, ms)
    assert len(state.waiting) == model.count(WAITING)
    assert sorted((s, h.member, h.delivery) for s, h in state.held.items()) == model.held()


@settings(max_examples=400, deadline=None)
@given(histories())
def test_the_fold_follows_the_rules(
    history: tuple[Settings, list[tuple[str, tuple[Any, ...]]]],
) -> None:
    run(*history)


def fold_one(
    state: QueueState, op: Op, origin: int, ms: int, jobs: list[Job], n: list[int]
) -> Outcome:
    n[0] += 1
    op_seq = make_seq(ms, origin, n[0])
    state.begin(op_seq, origin, op)
    for job in jobs:
        if job.seq > state.cursor and not state.take_in(job):
            break
    return state.finish(op)


def test_one_node_whose_clock_runs_ahead_does_not_ready_a_delayed_job() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    jobs = [Job(make_seq(T0, 1, 1), 128, T0 + 60_000, None)]
    far = T0 + 3_600_000  # node 3's clock: an hour ahead (its seqs too: claims.py allows 60 s)
    fold_one(state, Tick(far), 3, T0 + 60_000, jobs, n)
    fold_one(state, Tick(T0 + 1000), 2, T0 + 1000, jobs, n)
    assert state.clock.now_ms == T0 + 1000  # the second latest of 2 and 3
    out = fold_one(state, Claim("m", 5, 10_000, jobs[-1].seq, T0 + 2000), 1, T0 + 2000, jobs, n)
    assert out.leased == []
    fold_one(state, Tick(T0 + 61_000), 2, T0 + 61_000, jobs, n)  # now a quorum is past it
    out = fold_one(state, Claim("m", 5, 10_000, jobs[-1].seq, T0 + 61_000), 1, T0 + 61_000, jobs, n)
    assert [x.job.seq for x in out.leased] == [jobs[0].seq]


def test_a_lease_runs_out_only_when_a_quorum_saw_it_pass_by_their_elapsed_clocks() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    jobs = [Job(make_seq(T0, 1, 1), 128, 0, None)]
    fold_one(state, Claim("m1", 1, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
    [(claim_op, _)] = state.leases()
    far = T0 + 3_600_000  # wall clocks an hour ahead on every node change nothing
    for node in REPLICAS:
        fold_one(state, Tick(far, claim_op, 9_999), node, T0 + 100, jobs, n)
    assert list(state.held) == [jobs[0].seq]
    fold_one(state, Tick(T0, claim_op, 10_000), 3, T0 + 200, jobs, n)
    assert list(state.held) == [jobs[0].seq]  # one node's word is not enough
    fold_one(state, Tick(T0, claim_op, 10_500), 2, T0 + 300, jobs, n)
    assert state.held == {} and state.totals.expired == 1
    out = fold_one(state, Claim("m2", 1, 10_000, jobs[-1].seq, T0), 1, T0 + 400, jobs, n)
    assert [(x.job.seq, x.delivery) for x in out.leased] == [(jobs[0].seq, 2)]


def test_a_group_takes_in_jobs_only_up_to_its_byte_bound_and_more_as_jobs_leave() -> None:
    state, n = QueueState(REPLICAS, 2, bytes_max=8 * 100), [0]  # a hundred FIFO entries
    jobs = [Job(make_seq(T0, 1, i), 128, 0, None) for i in range(1, 301)]
    fold_one(state, Claim("m1", 1, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
    assert state.cursor == jobs[99].seq and len(state.waiting) == 99 and len(state.held) == 1
    out = fold_one(state, Claim("m1", 50, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
    assert len(out.leased) == 50 and state.cursor == jobs[99].seq  # a held job costs more
    acks = tuple(SettleItem(seq, 1, ACK) for seq in state.held)
    fold_one(state, Settle("m1", acks, T0), 1, T0, jobs, n)
    fold_one(state, Tick(T0), 1, T0, jobs, n)  # the next operation takes in what fits again
    assert state.cursor == jobs[150].seq and len(state.waiting) == 100
    assert state.size_bytes() == state.bytes_max


def test_a_claim_with_exclusive_resources_takes_one_job_per_resource() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    fold_one(state, Configure(Settings(exclusive=True), T0), 1, T0, [], n)
    keys = [b"a", b"a", b"b", None, b"b"]
    jobs = [Job(make_seq(T0, 1, i + 1), 128, 0, k) for i, k in enumerate(keys)]
    out = fold_one(state, Claim("m1", 10, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
    assert [x.job.key for x in out.leased] == [b"a", b"b", None]  # in order, one per resource


def test_coalescing_keeps_the_newest_job_of_a_resource_and_never_a_claimed_one() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    fold_one(state, Configure(Settings(coalesce=True), T0), 1, T0, [], n)
    jobs = [Job(make_seq(T0, 1, i + 1), 128, 0, b"page") for i in range(3)]
    out = fold_one(state, Claim("m1", 10, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
    assert [x.job.seq for x in out.leased] == [jobs[2].seq] and state.totals.replaced == 2
    more = [*jobs, Job(make_seq(T0, 1, 9), 128, 0, b"page")]
    out = fold_one(state, Claim("m2", 10, 10_000, more[-1].seq, T0), 1, T0, more, n)
    assert [x.job.seq for x in out.leased] == [more[3].seq]  # the claimed one was not replaced


def test_a_settlement_of_another_delivery_or_member_is_stale() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    jobs = [Job(make_seq(T0, 1, 1), 128, 0, None)]
    fold_one(state, Claim("m1", 1, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
    seq = jobs[0].seq
    out = fold_one(state, Settle("m2", (SettleItem(seq, 1, ACK),), T0), 1, T0, jobs, n)
    assert out.settled == [STALE]
    out = fold_one(state, Settle("m1", (SettleItem(seq, 2, ACK),), T0), 1, T0, jobs, n)
    assert out.settled == [STALE]
    out = fold_one(
        state, Settle("m1", (SettleItem(seq, 1, ACK), SettleItem(seq, 1, ACK)), T0), 1, T0, jobs, n
    )
    assert out.settled == [SETTLED, STALE] and state.totals.acked == 1


def test_a_job_dies_after_its_last_delivery_with_its_history() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    fold_one(state, Configure(Settings(max_deliveries=2), T0), 1, T0, [], n)
    jobs = [Job(make_seq(T0, 1, 1), 128, 0, None)]
    for delivery, member in ((1, "m1"), (2, "m2")):
        fold_one(state, Claim(member, 1, 10_000, jobs[-1].seq, T0), 1, T0, jobs, n)
        out = fold_one(
            state, Settle(member, (SettleItem(jobs[0].seq, delivery, NAK),), T0), 1, T0, jobs, n
        )
    dead = out.died
    assert [(d.seq, d.ordinal, d.deliveries) for d in dead] == [(jobs[0].seq, 1, 2)]
    assert [(h.member, h.outcome) for h in dead[0].history] == [("m1", NAK), ("m2", NAK)]


@settings(max_examples=200, deadline=None)
@given(histories())
def test_the_fold_follows_the_rules_when_its_queues_drop_gone_markers_often(
    history: tuple[Settings, list[tuple[str, tuple[Any, ...]]]],
) -> None:
    with patch.object(waiting, "GONE_DROP_LEAST", 1):
        run(*history)


def test_coalescing_a_million_updates_keeps_the_queues_as_small_as_the_resources() -> None:
    state, n = QueueState(REPLICAS, 2, 1 << 30), [0]
    fold_one(state, Configure(Settings(coalesce=True), T0), 1, T0, [], n)
    jobs = [
        Job(make_seq(T0 + i // 4000, 1, i % 4000), 128, 0, b"r%d" % (i % 100))
        for i in range(200_000)
    ]
    fold_one(state, Claim("m", 1, 10_000, jobs[-1].seq, T0 + 60), 1, T0 + 60, jobs, n)
    assert len(state.waiting) == 99 and state.totals.replaced == 200_000 - 100
    assert (
        state.size_bytes()
        < 100 * 400 + 8 * waiting.GONE_DROP_LEAST * 2 + 70 * 2 * waiting.GONE_DROP_LEAST
    )
