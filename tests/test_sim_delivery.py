"""The simulator's consumer group and fan-out batch: committed offsets and batch acks keep
their invariants under the fault mix (partitions, loss, crashes, power losses, clock steps)."""

import dataclasses

import pytest
from test_sim import sweep

from relay.sim import delivery
from relay.sim.checker import InvariantViolation
from relay.sim.cluster import SimCluster
from relay.sim.plan import SimPlan


def run(seed: int, nodes: int) -> SimCluster:
    cluster = SimCluster(seed, dataclasses.replace(SimPlan.draw(seed, nodes), delivery=True))
    cluster.run()
    return cluster


@pytest.mark.parametrize("seeds", sweep(30, 25))
def test_groups_and_batches_hold_under_faults(seeds: range) -> None:
    restarts = completed = 0
    for seed in seeds:
        cluster = run(seed, 3 + 2 * (seed % 2))
        assert cluster.delivery is not None
        restarts += cluster.delivery.restarts
        completed += cluster.delivery.count == len(cluster.delivery.given)
    # in one seed of three, members died between commits and resumed from the cluster's word
    assert restarts * 3 >= len(seeds)
    assert completed == len(seeds)  # every batch was given whole and (the run checked) complete


def test_the_checker_catches_a_position_committed_before_its_acks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A member that commits its position before the acks of the items below it loses those
    acks when it dies in between: the batch can never complete."""
    commit = delivery.SimDelivery._commit

    def position_first(self: delivery.SimDelivery) -> None:
        commit(self)
        if self.records and self.records[-1].stream == self.group_stream:
            self.records.insert(0, self.records.pop())

    monkeypatch.setattr(delivery.SimDelivery, "_commit", position_first)
    with pytest.raises(InvariantViolation, match="batches"):
        for seed in range(30):
            run(seed, 3)
