"""The simulated file system the simulator runs the real storage on: what a power loss keeps
(synced bytes and durable names), what it may lose (the rest, torn at any byte), and the real
log code recovering from it."""

from __future__ import annotations

import errno
import random
from pathlib import Path

import pytest
from test_storage import WINDOW, chain, write_in_batches

from relay.core.events import Persist
from relay.core.messages import Tx
from relay.sim.files import SimFiles
from relay.storage.recovery import open_log
from relay.storage.settings import StorageSettings
from relay.storage.store import dir_name
from relay.storage.stream_log import StreamLog

ROOT = Path("/sim")
T0 = 1_790_000_000_000


def test_synced_bytes_and_names_survive_a_power_loss_and_the_rest_may_not() -> None:
    kept_tails = set()
    for seed in range(50):
        files = SimFiles(random.Random(seed), ROOT)
        fd = files.create(ROOT / "a")
        files.writev(fd, (b"synced",))
        files.fdatasync(fd)
        files.fsync_dir(ROOT)
        files.writev(fd, (b" and not",))
        files.rename(ROOT / "a", ROOT / "b")  # not durable until the directory is synced
        files.crash(power_loss=True)
        name = ROOT / "b" if files.exists(ROOT / "b") else ROOT / "a"
        data = files.read_bytes(name)
        assert data.startswith(b"synced") and b"synced and not".startswith(data)
        kept_tails.add((name.name, len(data)))
    assert {n for n, _ in kept_tails} == {"a", "b"}, "the rename is kept or lost by chance"
    assert len({size for _, size in kept_tails}) > 3, "the unsynced tail is torn at any byte"


def test_a_process_crash_keeps_everything_written() -> None:
    files = SimFiles(random.Random(1), ROOT)
    fd = files.create(ROOT / "a")
    files.writev(fd, (b"page cache",))
    files.crash(power_loss=False)
    assert files.read_bytes(ROOT / "a") == b"page cache"


def test_pages_a_failed_sync_was_to_write_are_lost_at_power_loss_until_written_again() -> None:
    """As on Linux: a failed fdatasync marks its pages clean without the device taking them;
    reads still see them, a later good sync does not write them, a power loss loses them."""
    for seed in range(20):
        files = SimFiles(random.Random(seed), ROOT)
        fd = files.create(ROOT / "a")
        files.fsync_dir(ROOT)
        files.writev(fd, (b"kept.",))
        files.fdatasync(fd)
        files.writev(fd, (b"dropped.",))
        files.sync_errors = 1.0
        with pytest.raises(OSError) as info:
            files.fdatasync(fd)
        assert info.value.errno == errno.EIO
        files.sync_errors = 0.0
        files.writev(fd, (b"after.",))
        files.fdatasync(fd)  # succeeds, but leaves the dropped pages off the device
        assert files.read_bytes(ROOT / "a") == b"kept.dropped.after."
        files.crash(power_loss=True)
        assert files.read_bytes(ROOT / "a") == b"kept." + bytes(8) + b"after."
    files = SimFiles(random.Random(1), ROOT)
    fd = files.create(ROOT / "a")
    files.fsync_dir(ROOT)
    files.writev(fd, (b"kept.dropped.",))
    files.sync_errors = 1.0
    with pytest.raises(OSError):
        files.fdatasync(fd)
    files.sync_errors = 0.0
    files.ftruncate(fd, 0)  # what the log does after a failed sync: cut, and write again
    files.writev(fd, (b"kept.dropped.",))
    files.fdatasync(fd)
    files.crash(power_loss=True)
    assert files.read_bytes(ROOT / "a") == b"kept.dropped."


def sync(log: StreamLog) -> None:
    """What the syncer does for one log: sync what was written, and the directory."""
    unsynced = log.take_unsynced()
    for fd in unsynced.fds:
        log.files.fdatasync(fd)
        log.files.close(fd)
    if unsynced.directory:
        log.files.fsync_dir(log.directory)


def test_the_real_log_recovers_every_synced_record_after_any_power_loss() -> None:
    """A log written in batches over small segments (rolls, renames), synced now and then,
    then a power loss: recovery keeps every record a sync covered, and what it keeps is a
    prefix of what was written, however the last write was torn."""
    txs, digests = chain("s", 120)
    torn = 0
    for seed in range(200):
        rng = random.Random(seed)
        files = SimFiles(rng, ROOT)
        directory = ROOT / dir_name("s")
        files.mkdir(directory)
        files.fsync_dir(ROOT)
        log = StreamLog(directory, "s", StorageSettings(segment_bytes=2048), [], 0, files)
        synced = 0
        written = rng.randint(1, 12) * 10
        for end in range(10, written + 1, 10):
            write_in_batches_from(log, txs, digests, end - 10, end)
            if rng.random() < 0.5:
                sync(log)
                synced = end
        files.crash(power_loss=True)
        found = open_log(directory, "s", StorageSettings(segment_bytes=2048), WINDOW, T0, files)
        held = [tx.seq for tx in found.restored.txs]
        assert held == [tx.seq for tx in txs[: len(held)]], f"seed {seed}: not a prefix"
        assert len(held) >= synced, f"seed {seed}: {synced} synced, {len(held)} recovered"
        torn += bool(found.problems)
    assert torn, "no power loss tore a frame"


def write_in_batches_from(
    log: StreamLog, txs: list[Tx], digests: list[bytes], start: int, end: int
) -> None:
    """Append ``txs[start:end]`` as one turn's write, verifying its first tx."""
    if start == 0:
        write_in_batches(log, txs[:end], digests[:end], 10)
        return
    base_seq, base_digest = txs[start - 1].seq, digests[start - 1]
    batch, batch_digests = tuple(txs[start:end]), tuple(digests[start:end])
    log.apply(
        Persist("s", 0, base_seq, base_digest, False, batch, batch_digests, txs[start].seq), T0
    )
