"""Clock steps on a real cluster: timers run on the monotonic clock, so a node whose wall
clock steps back or forward by seconds keeps serving, is cut by nobody, and still fences on
time when it is cut off. Every wait polls with a deadline; every node is stopped at the end."""

from __future__ import annotations

import threading
import time

import pytest
from load import Load
from test_faults_real import FAST, assert_all_acked_held, converged
from waits import until

from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(fast_admin_cluster3: LocalCluster) -> LocalCluster:
    return fast_admin_cluster3


class Observer:
    """Polls every node's status; remembers every state, epoch and down peer it saw."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.seen: dict[int, set[tuple[str, int, tuple[int, ...]]]] = {1: set(), 2: set(), 3: set()}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for n in self.seen:
                status = self.cluster.status(n)
                if status is not None:
                    self.seen[n].add((status.state, status.epoch, status.peers_down))
            self.stop.wait(0.05)

    def finish(self) -> dict[int, set[tuple[str, int, tuple[int, ...]]]]:
        self.stop.set()
        self.thread.join(10)
        return self.seen


def test_clock_steps_cut_nobody_under_load(cluster: LocalCluster) -> None:
    load = Load(cluster, ["orders"])
    load.wait_for(100)
    observer = Observer(cluster)
    try:
        for offset_ms in (-5000, 0, 5000):  # back 5 s, forward 5 s, forward 5 s more
            cluster.fault(1, clock_offset_ms=offset_ms)
            load.wait_for(len(load.acks) + 300)
            # not a wait (nothing is to happen): time enough for a cut, which must not come
            time.sleep(FAST["suspect_after_ms"] / 1000 * 2)
    finally:
        seen = observer.finish()
        acks = load.finish()  # every publish was acknowledged: no error, no timeout
    for node, sightings in seen.items():
        assert sightings, f"node {node} never answered"
        assert {state for state, _, _ in sightings} == {"serving"}, (node, sightings)
        assert len({epoch for _, epoch, _ in sightings}) == 1, f"node {node}'s epoch changed"
        assert {down for _, _, down in sightings} == {()}, f"node {node} saw a peer down"
    for node in (1, 2, 3):
        assert "peer_down" not in cluster.log(node) and "rejoining" not in cluster.log(node)
    converged(cluster, [1, 2, 3])
    assert_all_acked_held(cluster, acks, [1, 2, 3])


def test_a_clock_step_back_does_not_delay_fencing(cluster: LocalCluster) -> None:
    cluster.fault(1, clock_offset_ms=-5000)
    time.sleep(0.3)  # not a wait: heartbeats go and come on the stepped clock for a while
    cluster.fault(1, block_from=[2, 3])
    cluster.fault(2, block_from=[1])
    cluster.fault(3, block_from=[1])
    started = time.monotonic()
    state = until(
        lambda: getattr(cluster.status(1), "state", None), lambda now: now == "fenced", 10
    )
    assert state == "fenced", "node 1 never fenced itself"
    fenced_after_s = time.monotonic() - started
    assert fenced_after_s < (FAST["fence_after_ms"] + 600) / 1000, fenced_after_s
    cluster.heal()
    cluster.fault(1, clock_offset_ms=0)
    cluster.wait_serving([1, 2, 3])
