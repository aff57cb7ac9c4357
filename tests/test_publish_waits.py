"""A request re-keyed to the original of a skipped copy must still never be answered for a
seq the quorum has not verified, whatever a refold does to the copy meanwhile (a review found
both an ack of an unverified seq and a false ``not_committed``)."""

from types import SimpleNamespace
from typing import cast

import pytest

from relay.core.dedup import DedupIndex
from relay.core.digest import genesis
from relay.core.events import Acked, PublishRequested, PublishResults
from relay.core.messages import Item, Tx
from relay.core.publish import Publishes
from relay.core.stream import StreamReplica

pytestmark = pytest.mark.pure  # it hands the compiled Publishes a stand-in for a StreamReplica

FIRST, OTHER, RETRY = 100, 150, 200  # the first copy (node 1), another tx, the retry's seq


def tx(seq: int, msg_id: int, origin: int) -> Tx:
    return Tx(seq, 0, origin, 1, "p", msg_id, b"one")


@pytest.mark.parametrize("refold", ["keeps the retry", "has not reached it"])
def test_a_request_keyed_by_an_original_waits_for_what_a_refold_decides(refold: str) -> None:
    dedup = DedupIndex(10**12, 10**6)
    _, first_digest, _ = dedup.fold([tx(FIRST, 1, 1)], 0, genesis("s"))
    _, digests, _ = dedup.fold_each([tx(OTHER, 2, 3), tx(RETRY, 1, 2)], FIRST, first_digest[0])
    assert dedup.original_of(RETRY) == FIRST  # the retry's copy was skipped
    timeline = SimpleNamespace(
        readable_seq=50, trimmed_seq=0, seqs=[FIRST, OTHER], digests=[first_digest[0], *digests]
    )
    state = cast(StreamReplica, SimpleNamespace(stream="s", dedup=dedup, timeline=timeline))
    publishes = Publishes(10_000)
    pending = publishes.start(0, PublishRequested(b"c", 2, "s", "p", (Item(1, b"one"),)))
    pending.seqs[:] = [RETRY]
    publishes.wait("s", pending)
    assert publishes.resolve(state) == []  # keyed by the first copy now, not yet verified
    if refold == "keeps the retry":  # the first copy's coordinator was cut before a quorum
        dedup.truncate(50)
        _, digests, _ = dedup.fold_each([tx(OTHER, 2, 3), tx(RETRY, 1, 2)], 50, genesis("s"))
        timeline.seqs, timeline.digests = [OTHER, RETRY], digests
        timeline.readable_seq = OTHER  # the retry's own seq is not verified
        assert publishes.resolve(state) == []
        timeline.readable_seq = RETRY
        (reply,) = publishes.resolve(state)
        assert reply.body == PublishResults((Acked(RETRY, digests[1]),))
    else:  # the first copy is verified; the refold after it has not folded the retry again
        dedup.truncate(FIRST)
        timeline.seqs, timeline.digests = [FIRST], [first_digest[0]]
        timeline.readable_seq = FIRST
        assert publishes.resolve(state) == []  # not "not_committed": it is at FIRST
        dedup.fold_each([tx(OTHER, 2, 3), tx(RETRY, 1, 2)], FIRST, first_digest[0])
        (reply,) = publishes.resolve(state)
        assert reply.body == PublishResults((Acked(FIRST, first_digest[0]),))
