"""The simulator's compacted stream: keyed updates and tombstones, each node's real compactor on
its simulated disk under crashes and power losses, and a checker shown to catch a compaction
that drops the newest value of a key and one that never drops an expired tombstone."""

from __future__ import annotations

import pytest

from relay.core.flake import SEQ_MAX
from relay.sim.checker import InvariantViolation
from relay.sim.cluster import SimCluster, run_seed
from relay.sim.plan import SimPlan
from relay.storage import compaction

SEEDS = range(9_000_000, 9_000_004)
PLANTED_SEEDS = range(9_000_000, 9_000_040)  # a planted bug fails one of them (more draw it)


@pytest.mark.parametrize("nodes", [3, 5])
def test_compacted_streams_hold_under_faults(nodes: int) -> None:
    for seed in SEEDS:
        run_seed(seed, nodes, compacted=True)


def test_the_nodes_compact_in_the_simulator() -> None:
    plan = SimPlan.draw(9_000_004, 3).with_compacted(True)
    cluster = SimCluster(9_000_004, plan)
    cluster.run()
    dropped = [shell.disk.compactor.dropped for shell in cluster.shells.values()]
    assert all(dropped), dropped


def fails_somewhere() -> str:
    for seed in PLANTED_SEEDS:
        try:
            run_seed(seed, 3, compacted=True)
        except InvariantViolation as exc:
            return str(exc)
    raise AssertionError("no seed caught the planted bug")


@pytest.mark.pure
def test_the_checker_catches_a_compaction_that_drops_the_newest_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    newest = compaction._newest

    def beyond(files: object, inputs: list) -> tuple[dict[bytes, int], int]:  # type: ignore[type-arg]
        found, mapped = newest(files, inputs)  # type: ignore[arg-type]
        return {k: SEQ_MAX for k in found}, mapped  # no record is the newest: all dropped

    monkeypatch.setattr(compaction, "_newest", beyond)
    assert "not its newest value" in fails_somewhere()


def test_the_checker_catches_a_tombstone_kept_past_its_retention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    build = compaction.build

    def keeping(*args: object) -> compaction.Built | None:
        files, directory, segments, bound, _, size = args
        return build(files, directory, segments, bound, 0, size)  # type: ignore[arg-type]

    monkeypatch.setattr(compaction, "build", keeping)
    assert "past its retention" in fails_somewhere()
