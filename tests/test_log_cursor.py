"""The log cursor after the disk refused a write or a sync: what is written again, and that
the memory ring still holds where it starts."""

from relay.core.durable import LogCursor
from relay.core.events import Persist
from relay.core.flake import make_seq
from relay.core.messages import Tx, fold_tx
from relay.core.timeline import Timeline

T0 = 1_800_000_000_000


class Stream:
    """A timeline that grows by ``add`` and verifies all it holds, as a replica's would."""

    def __init__(self, capacity: int = 1000) -> None:
        self.timeline = Timeline("s", capacity)
        self.count = 0

    def add(self, n: int) -> None:
        digest = self.timeline.head_digest
        txs, digests = [], []
        for _ in range(n):
            self.count += 1
            tx = Tx(make_seq(T0 + self.count, 1), 0, 1, 7, "p", self.count, b"x")
            digest = fold_tx(digest, tx)
            txs.append(tx)
            digests.append(digest)
        self.timeline.extend(txs, digests)
        self.timeline.verify_upto(self.timeline.head_seq)

    def seq(self, k: int) -> int:
        return make_seq(T0 + k, 1)

    def persist(self, cursor: LogCursor) -> Persist:
        found = cursor.pending("s", self.timeline)
        assert found is not None
        return found


def test_a_refused_write_is_made_again_from_its_base_with_fsync_never() -> None:
    """With ``fsync = "never"`` no sync moves the durable head: a refused write used to be
    made again from it (seq 0 here), below the mark the log held, which the log refused
    every time (a node whose disk filled up never took a write again)."""
    stream, cursor = Stream(), LogCursor(votes_wait=False)
    stream.add(10)
    first = stream.persist(cursor)
    stream.add(10)
    refused = stream.persist(cursor)
    assert (first.base_seq, refused.base_seq) == (0, stream.seq(10))
    cursor.failed(False, stream.timeline)
    stream.add(5)
    again = stream.persist(cursor)
    assert again.base_seq == stream.seq(10) and again.generation > refused.generation
    assert [tx.seq for tx in again.txs] == [stream.seq(k) for k in range(11, 26)]


def test_a_refused_start_over_or_rewind_is_made_again_as_one() -> None:
    stream, cursor = Stream(), LogCursor(votes_wait=True)
    stream.add(10)
    cursor.restart(stream.seq(10))  # a snapshot: the log starts over after seq 10
    stream.add(5)
    assert stream.persist(cursor).reset
    cursor.failed(False, stream.timeline)
    again = stream.persist(cursor)
    assert again.reset and again.base_seq == stream.seq(10)
    cursor.rewind(stream.seq(12))  # verified history given up: the write cuts below the mark
    rewound = stream.persist(cursor)
    assert rewound.rewind
    cursor.failed(False, stream.timeline)
    assert stream.persist(cursor).rewind


def test_a_failed_sync_writes_again_from_the_durable_head_cutting_the_mark_above_it() -> None:
    stream, cursor = Stream(), LogCursor(votes_wait=True)
    stream.add(10)
    done = stream.persist(cursor)
    cursor.persisted(done.generation, stream.seq(4), 0)  # a sync covered seq 4
    stream.add(10)
    stream.persist(cursor)
    cursor.failed(True, stream.timeline)
    again = stream.persist(cursor)
    assert again.base_seq == stream.seq(4) and again.rewind  # a mark above 4 is not durable


def test_the_memory_ring_keeps_where_a_refused_write_starts_however_long_the_disk_refuses() -> None:
    """Without the bound the ring trimmed past it (``fsync = "never"`` votes its head), and
    the next write's base was no longer held: the core's assertion stopped the node."""
    stream, cursor = Stream(capacity=8), LogCursor(votes_wait=False)
    stream.add(4)
    stream.persist(cursor)
    for _ in range(20):  # the disk refuses every write: the ring fills far past its capacity
        stream.add(4)
        stream.persist(cursor)
        needed = min(cursor.vote_seq(stream.timeline), cursor.confirmed_seq)
        stream.timeline.trim(needed + 1)  # as StreamReplica.trim asks
        cursor.failed(False, stream.timeline)
    assert stream.timeline.digest_at(stream.seq(4)) is not None
    assert stream.persist(cursor).base_seq == stream.seq(4)
    assert stream.timeline.trimmed_seq <= stream.seq(4)  # only what is at or below it went


def test_a_failed_sync_never_writes_again_below_what_a_sync_made_durable() -> None:
    """A review found both: an older generation's sync may move the durable mark past the
    durable head (which moves only for the current generation), and a failed sync wrote
    again from that head, cutting records the node reported as durably verified; and after
    a failed sync, a later report about an older generation moved the mark over records the
    failed one may have dropped."""
    stream, cursor = Stream(), LogCursor(votes_wait=True)
    stream.add(10)
    first = stream.persist(cursor)
    stream.add(10)
    stream.persist(cursor)
    cursor.failed(False, stream.timeline)  # the second write was refused ...
    cursor.persisted(first.generation, stream.seq(10), stream.seq(10))  # ... the first synced
    assert (cursor.durable_seq, cursor.durable_mark) == (0, stream.seq(10))
    stream.persist(cursor)  # written again; its sync fails
    cursor.failed(True, stream.timeline)
    assert stream.persist(cursor).base_seq == stream.seq(10)
    cursor.persisted(first.generation, stream.seq(20), stream.seq(20))
    assert cursor.durable_mark == stream.seq(10)


def test_a_refused_or_unsynced_mark_is_handed_again() -> None:
    """A write of the mark alone (records already durable) that the disk refused, or whose
    sync failed, was never made again: nothing else asked the log for a write or a sync, the
    durable mark stayed behind and the stream stayed unreadable past it (simulator, seed 128
    with five nodes, once it ran the real storage with a failing disk)."""
    for sync in (False, True):
        stream, cursor = Stream(), LogCursor(votes_wait=True)
        stream.add(10)
        stream.timeline.verified_seq = stream.seq(5)
        first = stream.persist(cursor)
        cursor.persisted(first.generation, stream.seq(10), stream.seq(5))
        stream.timeline.verified_seq = stream.seq(10)
        mark_only = stream.persist(cursor)
        assert not mark_only.txs and mark_only.verified_seq == stream.seq(10)
        cursor.failed(sync, stream.timeline)
        again = cursor.pending("s", stream.timeline)
        assert again is not None, f"the mark was not handed again (sync={sync})"
        assert again.verified_seq == stream.seq(10) and again.generation > mark_only.generation
