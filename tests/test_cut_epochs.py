"""A cut epoch's last txs and a newer epoch of the same origin."""

import pytest
from test_stream import BASE, replica, stabilize

from relay.core.digest import genesis
from relay.core.lane import LaneState
from relay.core.messages import OriginReport, StreamAck, Tx


@pytest.mark.xfail(
    strict=True,
    reason="known bug, found by review 2026-11-25: a newer epoch's suspicion (from a peer's "
    "cut report) drops a CUT lane's unfolded queue, and the replica then answers a repair for "
    "the cut epoch as complete without those txs; follow() guards this step, suspect() not",
)
def test_a_newer_epochs_report_keeps_a_cut_epochs_unfolded_txs() -> None:
    """Replica 1 holds origin 2's epoch-7 tx in its CUT lane, not folded yet (origin 3's
    claim holds the watermark). A peer reports origin 2's epoch 8 being cut. Whatever replica
    1 then answers about epoch 7 must carry the tx, or not claim the epoch whole past it:
    else an asker cutting epoch 7 raises its contig over a tx it never gets."""
    r = replica()
    tx = Tx(BASE + 5, 0, 2, 7, "", 0, b"t")
    assert r.take(tx)
    r.lanes[3].claim(BASE + 9, BASE + 9)  # origin 3 claims a tx replica 1 lacks
    r.suspect(2, 7)
    r.lanes[2].cut_at = BASE + 5
    r.on_tick(0, {2: (False, 7), 3: (True, 7)})
    stabilize(r)
    assert r.lanes[2].state is LaneState.CUT and list(r.lanes[2].queue) == [tx]

    report = OriginReport(2, 8, BASE + 20)
    r.take_ack(StreamAck("s", 3, 7, 0, 0, 0, genesis("s"), 0, (report,)), 0)

    found, complete_upto = r.txs_of(2, 7, 0, BASE + 9, 100)
    assert tx in found or complete_upto < tx.seq
