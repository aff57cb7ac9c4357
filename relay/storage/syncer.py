"""Group commit: one background sync covers every log a loop turn (or several) wrote.

How this works: the node's loop writes into the page cache and, after its turn, hands the
syncer every log touched since the last sync, unless a sync is still running, in which case
those writes wait and the next sync covers them all. The syncer thread ``fdatasync``s each
descriptor (the GIL is released meanwhile, so the loop goes on receiving), fsyncs directories
that gained or lost files, and reports through a pipe the loop polls: per stream, the write
generation and head now durable (``Persisted``). Where a sync runs is the ``SyncRunner``'s
affair: a thread and a pipe for a node (``ThreadRunner``), simulated time in the simulator.
With ``fsync = "interval"`` a sync starts at most every ``fsync_interval_ms``; with
``"never"`` the kernel decides when data reaches the disk.

A sync of one log that gained only a few txs and bytes (``INLINE_TXS_MAX``,
``INLINE_BYTES_MAX``: one publish in flight, a light load), with no reservation and no
directory to sync, is done by the loop itself, the same job, reported through the same pipe:
handing a 0.25 ms fdatasync to the thread and back costs two wake-ups, 100-200 us each on two
busy cores, on every publish's path. Every other sync (many logs, more txs, node.json) goes to
the thread, which syncs while the loop receives, so a slow disk never holds the loop for more
than one small fdatasync. A sync the disk refused is tried again ``RETRY_MS`` later, not at
once: a node whose data directory went away would use a whole core retrying node.json.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from relay.core.events import Persisted, Reserved
from relay.storage.store import NodeStore
from relay.storage.stream_log import StreamLog, Unsynced

INLINE_TXS_MAX = 16  # a sync covering at most this many txs of one log
INLINE_BYTES_MAX = 64 << 10  # and at most this many bytes written runs in the loop
RETRY_MS = 100  # after a sync the disk refused, the next starts no sooner than this


@dataclass(slots=True, init=False)
class SyncJob:
    work: list[tuple[StreamLog, Unsynced]]
    reserve: int  # a seq reservation to make durable in node.json (0: none)
    done: list[Persisted | Reserved]
    failed: list[tuple[str, str]]  # (stream or node.json, what the disk said)

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        work: list[tuple[StreamLog, Unsynced]],
        reserve: int,
        done: list[Persisted | Reserved],
        failed: list[tuple[str, str]],
    ) -> None:
        self.work = work
        self.reserve = reserve
        self.done = done
        self.failed = failed


class SyncRunner(Protocol):
    """Where a sync runs, and how the loop hears that one finished."""

    inline: bool  # whether a small sync may run in the loop itself

    def start(self, run: Callable[[], None]) -> None:
        """Call ``run`` in the background (it calls ``finished`` when done)."""

    def finished(self) -> None:
        """A sync finished (in the background or inline): wake the loop."""

    def heard(self) -> None:
        """The loop took what finished."""

    def close(self) -> None: ...


class ThreadRunner:
    """Syncs in a thread of their own, heard through a pipe the loop polls (``wake_fd``)."""

    inline = True

    def __init__(self) -> None:
        self.wake_fd, self._signal_fd = os.pipe()
        os.set_blocking(self.wake_fd, False)
        self._cond = threading.Condition()
        self._run: Callable[[], None] | None = None
        self._stop = False
        # not "_thread": mypyc names a C field "__thread" after it, which is a C keyword
        self._syncing = threading.Thread(target=self._loop, name="relay-syncer", daemon=True)
        self._syncing.start()

    def start(self, run: Callable[[], None]) -> None:
        with self._cond:
            self._run = run
            self._cond.notify()

    def finished(self) -> None:
        os.write(self._signal_fd, b"s")

    def heard(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_fd, 4096)

    def close(self) -> None:
        if self._stop:
            return
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._syncing.join(5)
        os.close(self.wake_fd)
        os.close(self._signal_fd)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._run is None and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                run, self._run = self._run, None
            assert run is not None
            run()


class Syncer:
    def __init__(self, store: NodeStore, runner: SyncRunner | None = None) -> None:
        self.store = store
        self.runner = runner if runner is not None else ThreadRunner()
        self.mode = store.settings.fsync
        self.interval_ms = store.settings.fsync_interval_ms
        self.touched: dict[str, StreamLog] = {}
        self.touched_txs = 0  # txs written since the last sync started
        self.reserving = 0  # a seq reservation waiting for the next sync
        self._lock = threading.Lock()
        self._job: SyncJob | None = None  # running in the background
        self._finished: SyncJob | None = None  # done, not yet heard by the loop
        self._last_ms = 0
        self._retry_ms = 0  # elapsed time before which no sync starts (after a refused one)
        self.syncs = 0

    def wrote(self, stream: str, txs: int) -> None:
        self.touched[stream] = self.store.logs[stream]
        self.touched_txs += txs

    def reserve(self, seq: int) -> None:
        """Make a seq reservation durable with the next sync (``Reserved`` when it is): an
        fsync of node.json in the loop would stall it for as long as the disk is busy."""
        self.reserving = max(self.reserving, seq)

    def after_turn(self, elapsed_ms: int) -> None:
        """Start a sync of what was written, if none is running (and, for ``interval``,
        if it is time)."""
        if not self.touched and not self.reserving:
            return
        if elapsed_ms < self._retry_ms:  # a failing disk is retried at a pace, not in a loop
            return
        if self.mode == "never":
            for log in self.touched.values():
                for fd in log.take_unsynced().fds:
                    self.store.files.close(fd)
            self.touched.clear()
            self.touched_txs = 0
            if not self.reserving:
                return
        if (
            self.mode == "interval"
            and elapsed_ms - self._last_ms < self.interval_ms
            and not self.reserving
        ):
            return
        with self._lock:
            if self._job is not None or self._finished is not None:
                return
            work = [(log, log.take_unsynced()) for log in self.touched.values()]
            job = SyncJob(work, self.reserving, [], [])
            unsynced = work[0][1] if len(work) == 1 else None
            inline = (
                self.runner.inline
                and unsynced is not None
                and not self.reserving
                and self.touched_txs <= INLINE_TXS_MAX
                and unsynced.written <= INLINE_BYTES_MAX
                and len(unsynced.fds) == 1
                and not unsynced.directory
            )
            self.touched.clear()
            self.touched_txs = self.reserving = 0
            self._last_ms = elapsed_ms
            self._job = job
        if inline:
            self._run()
        else:
            self.runner.start(self._run)

    def completed(
        self, elapsed_ms: int
    ) -> tuple[list[Persisted | Reserved], list[tuple[str, str]]]:
        """What the last sync made durable, and the streams whose sync failed (call when
        the runner woke the loop); after a failure no sync starts for ``RETRY_MS``."""
        self.runner.heard()
        with self._lock:
            job, self._finished = self._finished, None
        if job is None:
            return [], []
        if job.failed:
            self._retry_ms = elapsed_ms + RETRY_MS
        if job.reserve and not any(isinstance(e, Reserved) for e in job.done):
            self.reserving = max(self.reserving, job.reserve)  # the next sync tries again
        return job.done, job.failed

    def close(self) -> None:
        self.runner.close()

    def _run(self) -> None:
        """Carry out the started job (in the loop or the runner's background)."""
        job = self._job
        assert job is not None
        self._sync(job)
        with self._lock:
            self._job, self._finished = None, job
        self.runner.finished()

    def _sync(self, job: SyncJob) -> None:
        files = self.store.files
        if job.reserve:
            try:
                self.store.write_meta()
                job.done.append(Reserved(job.reserve))
            except OSError as exc:
                job.failed.append(("node.json", f"write failed: {exc.strerror or exc}"))
        for log, unsynced in job.work:
            try:
                for fd in unsynced.fds:
                    files.fdatasync(fd)
                if unsynced.directory:
                    files.fsync_dir(log.directory)
                job.done.append(
                    Persisted(log.stream, unsynced.generation, unsynced.head_seq, unsynced.mark)
                )
            except OSError as exc:
                job.failed.append((log.stream, f"sync failed: {exc.strerror or exc}"))
            finally:
                for fd in unsynced.fds:
                    files.close(fd)
        self.syncs += 1
