"""A follower applies a group's operations only once it holds the jobs each looked at, and two
followers reading the same streams in different chunks end in the same state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.core.flake import make_seq
from relay.core.messages import Tx
from relay.queue.fold import QueueState
from relay.queue.follower import Follower, ReadJobs, ReadOps
from relay.queue.jobs import job_headers
from relay.queue.ops import ACK, Claim, Settle, SettleItem, Tick, encode

T0 = 1_800_000_000_000


def job_tx(i: int, priority: int) -> Tx:
    return Tx(
        make_seq(T0 + i, 1, 0), 0, 1, 1, "", i, b"job%d" % i, None, job_headers(priority, None)
    )


def op_tx(i: int, origin: int, payload: bytes) -> Tx:
    return Tx(make_seq(T0 + 10 * i, origin, 1), 0, origin, 1, "", i, payload)


def drive(follower: Follower, ops: list[Tx], jobs: list[Tx], chunk: int) -> list[list[int]]:
    """Answer the follower's reads from the two streams, ``chunk`` txs at a time."""
    leased: list[list[int]] = []
    for _ in range(10_000):
        leased += [[x.job.seq for x in o.leased] for o in follower.advance()]
        want = follower.wants()
        if isinstance(want, ReadOps):
            found = tuple(t for t in ops if t.seq > want.after_seq)[:chunk]
            if not found:
                return leased
            follower.ops_read(found)
        elif isinstance(want, ReadJobs):
            found = tuple(t for t in jobs if t.seq > want.after_seq)[:chunk]
            follower.jobs_read(found, jobs[-1].seq if jobs else 0, lost=False)
    raise AssertionError("the follower did not finish")


def history(claims: list[int]) -> tuple[list[Tx], list[Tx]]:
    jobs = [job_tx(i, (i * 7) % 3) for i in range(1, 200)]
    ops: list[Tx] = []
    for i, count in enumerate(claims, start=1):
        upto = jobs[min(len(jobs) - 1, i * 15)].seq
        ops.append(
            op_tx(i, 1 + i % 3, encode(Claim(f"m{i % 2}", count, 30_000, upto, T0 + 10 * i)))
        )
        if i % 3 == 0:
            ops.append(op_tx(i, 2, b"not an operation"))
        if i % 4 == 0:
            ops.append(op_tx(i, 3, encode(Tick(T0 + 10 * i))))
    return ops, jobs


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 20), min_size=1, max_size=12), st.integers(1, 40), st.integers(1, 40)
)
def test_followers_reading_in_different_chunks_agree(claims: list[int], a: int, b: int) -> None:
    ops, jobs = history(claims)
    first, second = (
        Follower(QueueState((1, 2, 3), 2, 1 << 30)),
        Follower(QueueState((1, 2, 3), 2, 1 << 30)),
    )
    assert drive(first, ops, jobs, a) == drive(second, ops, jobs, b)
    assert (
        first.state.cursor == second.state.cursor
        and first.state.held.keys() == second.state.held.keys()
    )
    assert first.state.totals.skipped_ops == second.state.totals.skipped_ops == len(claims) // 3


def test_an_operation_waits_for_its_jobs_and_a_settlement_lands_on_the_claimed_job() -> None:
    jobs = [job_tx(i, 128) for i in range(1, 4)]
    follower = Follower(QueueState((1, 2, 3), 2, 1 << 30))
    claim = op_tx(1, 1, encode(Claim("m", 2, 30_000, jobs[-1].seq, T0)))
    follower.ops_read((claim,))
    assert follower.advance() == [] and follower.wants() == ReadJobs(0, jobs[-1].seq)
    follower.jobs_read(tuple(jobs[:1]), jobs[-1].seq, lost=False)
    assert follower.advance() == []  # still waiting for the other two
    follower.jobs_read(tuple(jobs[1:]), jobs[-1].seq, lost=False)
    [outcome] = follower.advance()
    assert [x.job.seq for x in outcome.leased] == [jobs[0].seq, jobs[1].seq]
    ack = op_tx(2, 2, encode(Settle("m", (SettleItem(jobs[0].seq, 1, ACK),), T0)))
    follower.ops_read((ack,))
    [outcome] = follower.advance()
    assert outcome.settled == ["settled"] and follower.state.totals.acked == 1
