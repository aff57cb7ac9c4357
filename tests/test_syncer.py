"""Group commit: a small sync of one log runs in the loop, anything else in the thread; both
report through the same pipe. Real files in a temporary directory."""

import select
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from relay.config import load
from relay.core.events import Persisted, Reserve, Reserved
from relay.runtime.local_cluster import write_config
from relay.storage.node_disk import NodeDisk, restore_window
from relay.storage.settings import StorageSettings
from relay.storage.store import NodeStore
from relay.storage.syncer import INLINE_TXS_MAX, RETRY_MS, Syncer, SyncJob, ThreadRunner
from tests.test_storage import T0, WINDOW, chain, persist


def runner_of(syncer: Syncer) -> ThreadRunner:
    assert isinstance(syncer.runner, ThreadRunner)
    return syncer.runner


def completed(syncer: Syncer) -> list[Persisted | Reserved]:
    """What the next sync reports, waiting (bounded) for its byte on the pipe."""
    ready, _, _ = select.select([runner_of(syncer).wake_fd], [], [], 10)
    assert ready, "the syncer never reported"
    done, failed = syncer.completed(0)
    assert not failed
    return done


@pytest.mark.pure
def test_small_syncs_run_in_the_loop_and_others_in_the_thread(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "d", "east", 1, StorageSettings())
    store.open(WINDOW, T0)
    store.start(T0)
    syncer = Syncer(store)
    synced_by: list[str] = []
    sync = syncer._sync

    def spy(job: SyncJob) -> None:
        synced_by.append(threading.current_thread().name)
        sync(job)

    syncer._sync = spy  # type: ignore[method-assign]
    try:
        txs, digests = chain("s", INLINE_TXS_MAX + 3)  # the last write: one tx too many
        store.apply(persist("s", txs[:1], digests[:1]), T0)  # a new log: its directory too
        syncer.wrote("s", 1)
        syncer.after_turn(0)
        assert completed(syncer) == [Persisted("s", 0, txs[0].seq, 0)]
        second = persist("s", txs[1:2], digests[1:2])
        store.apply(replace(second, base_seq=txs[0].seq, base_digest=digests[0]), T0)
        syncer.wrote("s", 1)
        syncer.after_turn(1)
        assert completed(syncer) == [Persisted("s", 0, txs[1].seq, 0)]
        rest = persist("s", txs[2:], digests[2:])
        store.apply(replace(rest, base_seq=txs[1].seq, base_digest=digests[1]), T0)
        syncer.wrote("s", len(txs) - 2)
        syncer.after_turn(2)
        assert completed(syncer) == [Persisted("s", 0, txs[-1].seq, 0)]
        syncer.reserve(txs[-1].seq + 1000)
        syncer.after_turn(3)
        assert completed(syncer) == [Reserved(txs[-1].seq + 1000)]
    finally:
        syncer.close()
        store.close()
    loop = threading.current_thread().name
    # the new log's directory, then one small write in the loop, more txs and node.json not
    assert synced_by == ["relay-syncer", loop, "relay-syncer", "relay-syncer"]


def test_a_sync_the_disk_refused_is_retried_at_a_pace(tmp_path: Path) -> None:
    """A node whose data directory went away used a whole core retrying node.json in a
    loop: the next try waits RETRY_MS of elapsed time."""
    store = NodeStore(tmp_path / "d", "east", 1, StorageSettings())
    store.open(WINDOW, T0)
    store.start(T0)
    syncer = Syncer(store)
    try:
        shutil.rmtree(tmp_path / "d")  # node.json can no longer be written
        syncer.reserve(T0 + 1000)
        syncer.after_turn(0)
        ready, _, _ = select.select([runner_of(syncer).wake_fd], [], [], 10)
        assert ready
        done, failed = syncer.completed(5)  # heard in the turn at 5 ms
        assert not done and [stream for stream, _ in failed] == ["node.json"]
        syncer.after_turn(5 + RETRY_MS - 1)  # too soon: nothing starts
        assert select.select([runner_of(syncer).wake_fd], [], [], 0.2)[0] == []
        syncer.after_turn(5 + RETRY_MS)
        assert select.select([runner_of(syncer).wake_fd], [], [], 10)[0]
        assert [stream for stream, _ in syncer.completed(5 + RETRY_MS)[1]] == ["node.json"]
    finally:
        syncer.close()
        store.close()


def test_a_reservation_made_while_writes_are_refused_still_reaches_the_disk(
    tmp_path: Path,
) -> None:
    """A reservation asked while the disk's writes were being refused (between retries) was
    dropped, and the core, which waits for ``Reserved`` before it reserves again, could
    never originate past its bound (a review found it): the syncer, which paces a failing
    disk itself, takes it."""
    config = load(write_config(tmp_path, 3, None, None))
    store = NodeStore(config.data_dir(1), config.name, 1, config.storage)
    runner = ThreadRunner()
    disk = NodeDisk(store, restore_window(config.params), runner)
    disk.open(T0)
    try:
        disk.error, disk.retry_at_ms = "no space left on device", 1000  # refusing writes
        assert disk.carry_out(Reserve(T0 << 22), T0, 0) is None
        disk.after_turn(0, 1)
        assert select.select([runner.wake_fd], [], [], 10)[0], "the reservation was not written"
        assert Reserved(T0 << 22) in disk.completed(0)
    finally:
        disk.close()
