"""Compaction of a log by key, on real files: the newest record of each key kept, tombstones
kept for ``delete_retention_ms`` then dropped, the bound never passed, reads of the compacted
range that each record proves on its own, and a pass interrupted at any point leaving a log
that recovery makes whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_storage import T0, WINDOW, fresh, write_in_batches

from relay.core.digest import genesis
from relay.core.flake import make_seq, seq_unix_ms
from relay.core.messages import Tx, fold_tx
from relay.storage import compaction, inspect
from relay.storage.compaction import CLEANING
from relay.storage.compactor import Compactor, InlineCompactions
from relay.storage.files import OS_FILES, OsFiles
from relay.storage.recovery import open_log
from relay.storage.settings import StorageSettings
from relay.storage.store import NodeStore
from relay.storage.stream_log import StreamLog

SETTINGS = StorageSettings(segment_bytes=4096, cleanup="compact", delete_retention_ms=1000)


def updates(
    count: int, keys: int, tombstones: frozenset[int] = frozenset()
) -> tuple[list[Tx], list[bytes]]:
    """``count`` updates one ms apart, the first 200 cycling over ``keys`` keys and the rest
    each of a key of its own; the updates numbered in ``tombstones`` have an empty payload."""
    txs, digests, digest = [], [], genesis("s")
    for i in range(count):
        payload = b"" if i in tombstones else b"value %d" % i
        key = b"k%d" % (i % keys) if i < 200 or count <= 200 else b"other %d" % i
        tx = Tx(make_seq(T0 + i, 1), 0, 1, 7, "p", i + 1, payload, key, ())
        digest = fold_tx(digest, tx)
        txs.append(tx)
        digests.append(digest)
    return txs, digests


def everything(log: StreamLog) -> tuple[list[Tx], list[bytes]]:
    """Every record a reader gets from the log's start, and the digest before each."""
    txs, prevs, after = [], [], 0
    while True:
        found = log.read(after, 1 << 63, 1000, 1 << 30)
        if found is None or not found.records:
            return txs, prevs
        chain = found.prev
        for i, (tx, digest) in enumerate(found.records):
            prev = found.prevs[i] if found.prevs else chain
            assert fold_tx(prev, tx) == digest  # each proves itself from its prev
            txs.append(tx)
            prevs.append(prev)
            chain = digest
        after = found.records[-1][0].seq


def compacted(
    tmp_path: Path, count: int = 400, keys: int = 10, **kw: object
) -> tuple[StreamLog, list[Tx], list[bytes]]:
    log = fresh(tmp_path, SETTINGS)
    txs, digests = updates(count, keys, **kw)  # type: ignore[arg-type]
    write_in_batches(log, txs, digests, 20)
    return log, txs, digests


def run_pass(log: StreamLog, bound: int, wall_ms: int) -> compaction.Built | None:
    given = list(log.segments)
    built = compaction.build(
        log.files, log.directory, given, bound, wall_ms - 1000, SETTINGS.segment_bytes
    )
    if built is not None:
        assert compaction.install(log.files, log.directory, log.segments, given, built)
    return built


def test_a_pass_keeps_the_newest_record_of_each_key_up_to_the_bound(tmp_path: Path) -> None:
    log, txs, digests = compacted(tmp_path)
    sealed = [s for s in log.segments if s.sealed]
    bound = sealed[-2].head_seq  # the last sealed segment stays as it is
    built = run_pass(log, bound, T0)
    assert built is not None and built.dropped > 0
    got, _ = everything(log)
    newest = {t.key: t for t in txs if t.seq <= bound}
    assert [t for t in got if t.seq <= bound] == sorted(newest.values(), key=lambda t: t.seq)
    assert [t for t in got if t.seq > bound] == [t for t in txs if t.seq > bound]  # untouched
    assert log.head_seq == txs[-1].seq and log.head_digest == digests[-1]
    assert inspect.verify(log.directory, "s") == (len(got), None)
    log.close()
    again = open_log(log.directory, "s", SETTINGS, WINDOW, T0)
    assert not again.problems
    assert everything(again.log)[0] == got
    assert again.restored.base_seq >= bound  # the core's window starts after the compacted part
    again.log.close()


def test_passes_past_the_key_map_bound_each_cover_more_until_all_is_compacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compaction, "KEYS_MAX", 40)  # 210 keys: several passes
    log, txs, _ = compacted(tmp_path, count=400, keys=10)
    bound = [s for s in log.segments if s.sealed][-1].head_seq
    passes = 0
    while run_pass(log, bound, T0) is not None:
        passes += 1
        assert passes < 50, "a pass repeats without covering more of the log"
    assert passes > 2
    assert all(s.compacted for s in log.segments if s.head_seq <= bound)
    newest = {t.key: t for t in txs if t.seq <= bound}
    got = [t for t in everything(log)[0] if t.seq <= bound]
    assert got == sorted(newest.values(), key=lambda t: t.seq)
    log.close()


def test_tombstones_stay_until_their_retention_then_go(tmp_path: Path) -> None:
    # 200 updates of 10 keys, the last of k5 (update 195) a tombstone; then 100 of other keys,
    # so that the first 200 are in sealed segments
    log, txs, _ = compacted(tmp_path, count=300, keys=10, tombstones=frozenset({195}))
    dead = txs[195]
    bound = [s for s in log.segments if s.sealed][-1].head_seq
    assert bound > dead.seq
    run_pass(log, bound, T0 + 300)  # the tombstone is younger than its retention (1 s)
    held = [t for t in everything(log)[0] if t.key == dead.key]
    assert held == [dead]  # readers from the start see the delete
    run_pass(log, bound, seq_unix_ms(dead.seq) + 1001 + 1000)  # past its retention
    assert dead not in everything(log)[0]
    assert not [t for t in everything(log)[0] if t.key == dead.key and t.seq <= bound]
    log.close()


def test_an_interrupted_pass_leaves_a_log_recovery_makes_whole(tmp_path: Path) -> None:
    log, _txs, _ = compacted(tmp_path)
    bound = [s for s in log.segments if s.sealed][-1].head_seq
    before = everything(log)[0]
    built = compaction.build(log.files, log.directory, log.segments, bound, 0, 4096)
    assert built is not None
    log.close()
    # 1. crashed before any rename: the .cleaning files go, the log is as it was
    assert list(log.directory.glob(f"*{CLEANING}"))
    again = open_log(log.directory, "s", SETTINGS, WINDOW, T0)
    assert not again.problems and everything(again.log)[0] == before
    assert not list(log.directory.glob(f"*{CLEANING}"))
    again.log.close()
    # 2. crashed after the renames, before the inputs went: the covered inputs go
    log = open_log(log.directory, "s", SETTINGS, WINDOW, T0).log
    built = compaction.build(log.files, log.directory, log.segments, bound, 0, 4096)
    assert built is not None
    for output in built.outputs:
        (output.path.parent / (output.path.name + CLEANING)).rename(output.path)
    log.close()
    again = open_log(log.directory, "s", SETTINGS, WINDOW, T0)
    assert not again.problems
    view = everything(again.log)[0]
    assert view == [t for t in before if t.seq > bound or t in view] and len(view) < len(before)
    assert not [p for p in log.directory.glob("*.seg") if int(p.name[:20]) <= bound]
    assert inspect.verify(log.directory, "s")[1] is None
    again.log.close()


@pytest.mark.pure
def test_an_install_failing_part_way_leaves_a_log_that_reads_whole(tmp_path: Path) -> None:
    class RenamesOnce(OsFiles):
        renames = 0

        def rename(self, source: Path, target: Path) -> None:
            if source.name.endswith(CLEANING):
                self.renames += 1
                if self.renames == 2:
                    raise OSError(28, "No space left on device")
            super().rename(source, target)

    log, txs, _ = compacted(tmp_path, count=2000, keys=10)
    bound = [s for s in log.segments if s.sealed][-1].head_seq
    given = list(log.segments)
    built = compaction.build(log.files, log.directory, given, bound, T0 - 1000, 4096)
    assert built is not None and len(built.outputs) > 2
    with pytest.raises(OSError):
        compaction.install(RenamesOnce(), log.directory, log.segments, given, built)
    assert log.segments[0] is built.outputs[0]  # the one renamed stands for its inputs
    newest = {t.key: t for t in txs}
    got = everything(log)[0]
    assert {t.key: t for t in got} == newest and got[-1] == txs[-1]
    assert not list(log.directory.glob(f"*{CLEANING}"))
    log.close()
    again = open_log(log.directory, "s", SETTINGS, WINDOW, T0)
    assert not again.problems and everything(again.log)[0] == got
    again.log.close()


def test_a_second_pass_compacts_the_first_ones_output_with_newer_segments(tmp_path: Path) -> None:
    log, txs, digests = compacted(tmp_path, count=200, keys=5)
    first_bound = next(s for s in log.segments if s.sealed).head_seq
    run_pass(log, first_bound, T0)
    more, more_digests = [], []
    digest = digests[-1]
    for i in range(200, 400):
        tx = Tx(make_seq(T0 + i, 1), 0, 1, 7, "p", i + 1, b"value %d" % i, b"k%d" % (i % 5), ())
        digest = fold_tx(digest, tx)
        more.append(tx)
        more_digests.append(digest)
    write_in_batches_after(log, txs[-1].seq, digests[-1], more, more_digests)
    bound = [s for s in log.segments if s.sealed][-1].head_seq
    run_pass(log, bound, T0)
    got = [t for t in everything(log)[0] if t.seq <= bound]
    assert len(got) == 5 and all(t.seq > txs[-1].seq for t in got)  # only the newest 5 left
    assert len([s for s in log.segments if s.compacted]) == 1  # merged into one small segment
    log.close()


def write_in_batches_after(
    log: StreamLog, base_seq: int, base_digest: bytes, txs: list[Tx], digests: list[bytes]
) -> None:
    from relay.core.events import Persist

    for i in range(0, len(txs), 20):
        prev_seq, prev_digest = (txs[i - 1].seq, digests[i - 1]) if i else (base_seq, base_digest)
        batch, batch_digests = tuple(txs[i : i + 20]), tuple(digests[i : i + 20])
        log.apply(
            Persist("s", 0, prev_seq, prev_digest, False, batch, batch_digests, txs[i].seq), T0
        )


def test_a_rewind_into_a_compacted_segment_rewrites_its_end(tmp_path: Path) -> None:
    from relay.core.events import Persist

    log, txs, digests = compacted(tmp_path)
    first = next(s for s in log.segments if s.sealed)
    run_pass(log, first.head_seq, T0)
    segment = log.segments[0]
    assert segment.compacted
    kept = [t for t, _ in everything_in(log, segment)]
    cut = kept[len(kept) // 2]
    at = txs.index(cut)
    log.apply(Persist("s", 1, cut.seq, digests[at], False, (), (), 0, rewind=True), T0)
    assert log.head_seq == cut.seq and log.head_digest == digests[at]
    assert [t for t in everything(log)[0]] == kept[: len(kept) // 2 + 1]
    log.close()
    again = open_log(log.directory, "s", SETTINGS, WINDOW, T0)
    assert not again.problems and again.log.head_seq == cut.seq
    again.log.close()


def everything_in(log: StreamLog, segment: object) -> list[tuple[Tx, bytes]]:
    found = log.read(0, segment.head_seq, 10_000, 1 << 30)  # type: ignore[attr-defined]
    assert found is not None
    return found.records


def test_the_compactor_runs_a_pass_per_tick_and_honours_the_group_bound(tmp_path: Path) -> None:
    store = NodeStore(tmp_path, "c", 1, SETTINGS, OS_FILES)
    store.open(WINDOW, T0)
    log, txs, _ = compacted(tmp_path / "streams")
    store.logs["s"] = log
    compactor = Compactor(store, InlineCompactions(), dedup_ms=0)
    far = T0 + 10**7
    assert compactor.tick(far, {"s": 0}) == []  # a group that read nothing: no pass
    assert compactor.running is None and compactor.passes == 0
    held = [t for t in txs if t.seq <= txs[100].seq]
    compactor.tick(far, {"s": txs[100].seq})
    assert compactor.tick(far, {"s": txs[100].seq}) == ["s"]
    got = everything(log)[0]
    assert [t for t in got if t.seq > txs[100].seq] == [t for t in txs if t.seq > txs[100].seq]
    assert len([t for t in got if t.seq <= txs[100].seq]) < len(held)
    store.close()


def test_every_record_keeps_its_dense_index_through_compaction_and_restart(
    tmp_path: Path,
) -> None:
    log, txs, _ = compacted(tmp_path, count=400, keys=10)
    bound = [s for s in log.segments if s.sealed][-2].head_seq
    run_pass(log, bound, T0)
    position = {t.seq: i for i, t in enumerate(txs)}

    def indexed(stream_log: StreamLog) -> list[tuple[int, int]]:
        found, after = [], 0
        while True:
            got = stream_log.read(after, 1 << 63, 1000, 1 << 30)
            if got is None or not got.records:
                return found
            indexes = got.indexes or range(got.first_index, got.first_index + len(got.records))
            found += [(tx.seq, i) for (tx, _), i in zip(got.records, indexes, strict=True)]
            after = got.records[-1][0].seq

    held = indexed(log)
    assert held and all(position[seq] == i for seq, i in held)
    assert len(held) < len(txs)  # compacted: gaps in the index, as in Kafka's offsets
    for index in (0, 5, 150, 399, 400, 1000):  # where a read from each index starts
        after = log.seq_before_index(index)
        first = next((i for seq, i in held if seq > after), None) if after is not None else None
        assert first is None or first >= index  # the entry there, or the next kept after it
        assert first is None or not [i for _, i in held if index <= i < first]
    assert log.head_count == 400
    log.close()
    again = open_log(log.directory, "s", SETTINGS, WINDOW, T0)
    assert not again.problems and indexed(again.log) == held
    restored = again.restored
    assert restored.base_count == position[restored.txs[0].seq]  # the ring's first index
    again.log.close()


def test_a_read_by_index_starts_at_that_entry_wherever_the_sparse_index_lands(
    tmp_path: Path,
) -> None:
    log = fresh(tmp_path, StorageSettings(segment_bytes=1 << 30))
    txs, digests, digest = [], [], genesis("s")
    for i in range(10):  # 70 KB each: every frame is in the sparse index
        tx = Tx(make_seq(T0 + i, 1), 0, 1, 7, "p", i + 1, b"x" * 70_000)
        digest = fold_tx(digest, tx)
        txs.append(tx)
        digests.append(digest)
    write_in_batches(log, txs, digests, 1)
    assert len(log.segments) == 1 and len(log.segments[0].index) > 5
    for index in range(10):
        after = log.seq_before_index(index)
        assert after == (txs[index - 1].seq if index else 0), index
        found = log.read(after, 1 << 63, 1, 1 << 30)
        assert found is not None and found.records[0][0] == txs[index]
        assert found.first_index == index
    log.close()
