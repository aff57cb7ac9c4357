"""One replica's copy of a work group's state, kept up with its two streams.

How this works: the follower reads the group's control stream in order and applies each
operation (``QueueState``) once it holds the jobs that operation looked at: the job stream's
verified txs after the fold's cursor, read in order, up to the operation's ``upto`` (or until
the group is full). It never skips ahead: an operation waits, with the ones after it, until its
jobs are read, so every replica applies the same operation to the same jobs. ``wants`` says
which read comes next; the node's queue service makes it (a fetch of the node's own core) and
hands the answer back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from relay.core.messages import Tx
from relay.queue.fold import Outcome, QueueState
from relay.queue.jobs import job_of
from relay.queue.ops import Op, OpError, decode

OPS_BUFFERED_MAX = 4096  # operations read and not yet applied


@dataclass(frozen=True, slots=True)
class ReadOps:
    after_seq: int


@dataclass(frozen=True, slots=True)
class ReadJobs:
    after_seq: int
    upto_seq: int


class Follower:
    def __init__(self, state: QueueState) -> None:
        self.state = state
        self.ops: deque[tuple[int, int, Op | None]] = deque()  # (seq, origin, op or undecodable)
        self.ops_read_upto = 0  # the control stream is read up to this seq
        self.applying: tuple[int, int, Op] | None = None  # begun, waiting for its jobs

    def wants(self) -> ReadOps | ReadJobs | None:
        """The next read: jobs for the operation being applied, else more operations."""
        if self.applying is not None:
            return ReadJobs(self.state.cursor, self.state.upto)
        if len(self.ops) < OPS_BUFFERED_MAX:
            return ReadOps(self.ops_read_upto)
        return None

    def ops_read(self, txs: tuple[Tx, ...]) -> None:
        """Verified txs of the control stream after ``ops_read_upto``, in order."""
        for tx in txs:
            if tx.seq <= self.ops_read_upto:
                continue
            try:
                op: Op | None = decode(tx.payload)
            except OpError:
                op = None
            self.ops.append((tx.seq, tx.origin, op))
            self.ops_read_upto = tx.seq

    def jobs_read(self, txs: tuple[Tx, ...], verified_seq: int, lost: bool) -> None:
        """Verified txs of the job stream after the fold's cursor, in order, and the stream's
        verified seq; ``lost``: the stream no longer holds the txs right after the cursor
        (retention removed them before the group took them in: they are passed over)."""
        if self.applying is None:
            return
        state = self.state
        if lost and txs:
            state.skip_jobs_upto(txs[0].seq - 1)
        for tx in txs:
            if tx.seq <= state.cursor:
                continue
            if tx.seq > state.upto:
                state.skip_jobs_upto(state.upto)  # no job between the cursor and upto
                return
            if not state.wants_jobs():
                return
            state.take_in(job_of(tx))
        if not txs and verified_seq >= state.upto:
            state.skip_jobs_upto(state.upto)

    def advance(self) -> list[Outcome]:
        """Apply every operation whose jobs are in."""
        outcomes: list[Outcome] = []
        while True:
            if self.applying is not None:
                if self.state.wants_jobs():
                    return outcomes
                _, _, op = self.applying
                self.applying = None
                outcomes.append(self.state.finish(op))
            if not self.ops:
                return outcomes
            seq, origin, decoded = self.ops.popleft()
            if decoded is None:
                self.state.skip(seq)
                continue
            self.state.begin(seq, origin, decoded)
            self.applying = (seq, origin, decoded)
