"""The deterministic simulator over many seeds: invariants 1, 2, 3, 5 and 6."""

import pytest

from relay.sim.campaign import run_campaign
from relay.sim.checker import InvariantViolation
from relay.sim.cluster import run_seed

CHUNK = 25


@pytest.mark.parametrize("first", range(0, 300, CHUNK))
def test_seeds(first: int) -> None:
    summary = run_campaign(range(first, first + CHUNK), (3, 5), echo=lambda _: None)
    assert summary.failures == []
    assert summary.acked > 0


def test_a_replay_is_identical() -> None:
    a, b = run_seed(11, 3), run_seed(11, 3)
    assert (a.acked, a.messages, a.end_ms) == (b.acked, b.messages, b.end_ms)


def test_the_checker_catches_a_broken_timeline(monkeypatch: pytest.MonkeyPatch) -> None:
    from relay.core import stream

    # a replica that ignores other origins' promises folds txs in arrival order
    monkeypatch.setattr(stream.StreamReplica, "watermark", lambda self: 2**63)
    with pytest.raises(InvariantViolation):
        for seed in range(10):
            run_seed(seed, 3)
