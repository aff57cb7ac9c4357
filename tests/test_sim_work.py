"""The simulator's work groups: members that claim, settle, renew late, settle twice and crash
under faults, and a checker shown to catch a lease that runs out early, an acked job that comes
back, and replicas whose groups disagree."""

from __future__ import annotations

from typing import Any

import pytest

from relay.core.timer import Now
from relay.queue import fold
from relay.queue.service import QueueService
from relay.sim.checker import InvariantViolation
from relay.sim.cluster import run_seed

SEEDS = range(8_100_000, 8_100_006)


@pytest.mark.parametrize("nodes", [3, 5])
def test_work_groups_hold_under_faults(nodes: int) -> None:
    for seed in SEEDS:
        run_seed(seed, nodes, work=True)


def fails_somewhere() -> str:
    for seed in SEEDS:
        try:
            run_seed(seed, 3, work=True)
        except InvariantViolation as exc:
            return str(exc)
    raise AssertionError("no seed caught the planted bug")


def test_the_checker_catches_a_lease_that_runs_out_early(monkeypatch: pytest.MonkeyPatch) -> None:
    tick = QueueService._tick_group  # every node's elapsed clock 1.5 s ahead when it ticks

    def early(self: QueueService, group: Any, now: Now) -> None:
        tick(self, group, Now(now.wall_ms, now.elapsed_ms + 1500))

    monkeypatch.setattr(QueueService, "_tick_group", early)
    assert "held delivery" in fails_somewhere()


def test_the_checker_catches_an_acked_job_that_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold, "ACK", "acked-as-a-nak")
    monkeypatch.setattr(fold, "NAK", "ack")
    assert "was acked and came back" in fails_somewhere()


def test_the_checker_catches_replicas_whose_groups_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = QueueService.__init__

    def small_on_node_1(self: QueueService, node_id: int, *args: Any) -> None:
        made(self, node_id, *args)
        if node_id == 1:
            self.bytes_max = 64

    monkeypatch.setattr(QueueService, "__init__", small_on_node_1)
    assert "the replicas' work groups differ" in fails_somewhere()
