"""Byte bounds of the core and the log (issue 12, item 4): the memory ring, a fetch answer, a
mesh message and a read from disk each stop at a size, not only at a count."""

from pathlib import Path

from relay.core.digest import genesis
from relay.core.events import Persist
from relay.core.flake import make_seq
from relay.core.messages import (
    ANSWER_BYTES_MAX,
    FETCH_BYTES_MAX,
    Item,
    Tx,
    fold_tx,
    tx_bytes,
    within_bytes,
)
from relay.core.origin import Origin
from relay.core.reads import read
from relay.core.timeline import Timeline
from relay.core.timer import Now
from relay.storage.settings import StorageSettings
from relay.storage.stream_log import StreamLog

T0 = 1_800_000_000_000
KIB = 1024


def chain(count: int, payload_bytes: int) -> tuple[list[Tx], list[bytes]]:
    txs, digests, digest, prev = [], [], genesis("s"), 0
    for i in range(count):
        tx = Tx(make_seq(T0 + i, 1), prev, 1, 7, "", 0, bytes(payload_bytes))
        digest = fold_tx(digest, tx)
        txs.append(tx)
        digests.append(digest)
        prev = tx.seq
    return txs, digests


def test_within_bytes_always_lets_one_tx_through() -> None:
    txs, _ = chain(10, 100 * KIB)
    assert within_bytes(txs, 350 * KIB) == 3
    assert within_bytes(txs, 1) == 1
    assert within_bytes([], 1) == 0


def test_the_memory_ring_is_trimmed_by_bytes_as_well_as_by_count() -> None:
    """Found as an attack: 1500 legal 1 MiB payloads grew every node to 1.66 GB, since the
    ring counted 200,000 txs of any size."""
    timeline = Timeline("s", capacity=200_000, bytes_max=1 << 20)
    txs, digests = chain(40, 100 * KIB)
    timeline.extend(txs, digests)
    timeline.verify_upto(txs[-1].seq)
    timeline.readable_seq = txs[-1].seq
    assert timeline.bytes == sum(map(tx_bytes, txs)) and timeline.over_capacity()
    timeline.trim(keep_from=txs[-1].seq + 1)
    assert timeline.bytes <= 1 << 20 and timeline.bytes == sum(map(tx_bytes, timeline.txs))
    assert len(timeline.txs) == 10 and timeline.trimmed_seq == txs[29].seq
    assert timeline.digest_at(txs[29].seq) == digests[29]  # the chain still checks from there


def test_the_ring_never_trims_what_readers_may_not_see_or_is_still_awaited() -> None:
    timeline = Timeline("s", capacity=200_000, bytes_max=1 << 20)
    txs, digests = chain(40, 100 * KIB)
    timeline.extend(txs, digests)
    timeline.verify_upto(txs[25].seq)
    timeline.readable_seq = txs[19].seq  # verified further, durable on a quorum this far
    timeline.trim(keep_from=txs[5].seq)
    assert timeline.txs[0] == txs[5]
    timeline.trim(keep_from=txs[-1].seq + 1)
    assert timeline.txs[0] == txs[20]  # over its bytes, but readers may not see the rest
    cut = timeline.truncate_after(txs[29].seq)
    assert timeline.bytes == sum(map(tx_bytes, timeline.txs)) and len(cut) == 10


def test_a_fetch_answer_stops_at_its_byte_bound_and_a_large_tx_still_goes() -> None:
    timeline = Timeline("s", capacity=200_000)
    txs, digests = chain(30, 100 * KIB)
    big = Tx(make_seq(T0 + 100, 1), txs[-1].seq, 1, 7, "", 0, bytes(3 << 20))
    timeline.extend([*txs, big], [*digests, fold_tx(digests[-1], big)])
    timeline.verify_upto(big.seq)
    timeline.readable_seq = big.seq
    first = read(timeline, "s", 0, 5000, 0)
    assert 0 < sum(map(tx_bytes, first.txs)) <= FETCH_BYTES_MAX  # type: ignore[union-attr]
    assert len(first.txs) == 10  # type: ignore[union-attr]
    last = read(timeline, "s", txs[-1].seq, 5000, 0)
    assert last.txs == (big,)  # type: ignore[union-attr]


def test_a_turns_replication_is_split_below_a_frames_size() -> None:
    origin = Origin(1, 7, 0)
    items = [Item(i + 1, bytes(1 << 20)) for i in range(40)]
    origin.originate("s", Now(T0, 0), "p", items)
    sent = origin.replicates()
    assert len(sent) == 14 and sum(len(m.txs) for m in sent) == 40
    assert all(sum(map(tx_bytes, m.txs)) <= ANSWER_BYTES_MAX for m in sent)
    assert sent[1].txs[0].prev == sent[0].txs[-1].seq  # the chain runs on across messages


def test_a_read_from_the_log_stops_at_its_byte_bound(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    log = StreamLog(tmp_path / "s", "s", StorageSettings(), [], 0)
    txs, digests = chain(20, 100 * KIB)
    log.apply(Persist("s", 0, 0, genesis("s"), False, tuple(txs), tuple(digests), txs[-1].seq), T0)
    found = log.read(0, txs[-1].seq, 1000, 500 * KIB)
    assert found is not None and [tx for tx, _ in found[1]] == txs[:4]
    log.close()
