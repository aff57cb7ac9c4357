"""A node's compactions: one stream's log at a time, built off the loop and installed on it.

How this works: each ``tick`` (the loop calls it every half second) first installs a pass that
finished (``compaction.install``: renames and a directory sync, on the loop, so that no read
ever sees a file go), then, if none is running, starts the next compacted log in turn that has
a sealed segment the bound lets it take. The bound is the lowest of the log's verified mark,
the start of the dedup window (a producer's retry must still find the record it repeats), and
what the caller says of the stream (the lowest committed position of its consumer groups). The
pass runs on the ``CompactionRunner``: a process of its own for a node (at a lower priority),
at once for the simulator. Appends never wait for it: it reads sealed segments, which nothing
writes.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from functools import partial
from typing import Protocol

from relay.core.flake import SEQ_MAX, make_seq
from relay.storage import compaction
from relay.storage.compaction import Built
from relay.storage.records import CorruptRecord
from relay.storage.segment import Segment
from relay.storage.store import NodeStore

log = logging.getLogger("relay.disk")
NICE = 10  # a pass's process yields the CPU to the nodes

Build = Callable[[], Built | None]


class CompactionRunner(Protocol):
    def start(self, build: Build) -> None:
        """Run ``build`` in the background."""

    def done(self) -> tuple[bool, Built | None]:
        """(whether the last build finished, what it built); an error it raised is raised."""

    def close(self) -> None: ...


class ProcessCompactions:
    """Passes in a process of their own, at a lower priority than the node's (``nice`` 10):
    a pass is CPU in Python, which in the node's process would take the GIL from its loop."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None  # started with the first pass
        self._running: Future[Built | None] | None = None

    def start(self, build: Build) -> None:
        if self._pool is None:
            spawn = multiprocessing.get_context("spawn")  # never a fork of a node's threads
            self._pool = ProcessPoolExecutor(1, spawn, initializer=os.nice, initargs=(NICE,))
        self._running = self._pool.submit(build)

    def done(self) -> tuple[bool, Built | None]:
        if self._running is None or not self._running.done():
            return False, None
        running, self._running = self._running, None
        return True, running.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


class InlineCompactions:
    """Passes run the moment they start (the simulator's: deterministic)."""

    def __init__(self) -> None:
        self._result: tuple[bool, Built | None] = (False, None)

    def start(self, build: Build) -> None:
        self._result = (True, build())

    def done(self) -> tuple[bool, Built | None]:
        found, self._result = self._result, (False, None)
        return found

    def close(self) -> None:
        pass


class Compactor:
    def __init__(self, store: NodeStore, runner: CompactionRunner, dedup_ms: int) -> None:
        self.store = store
        self.runner = runner
        self.dedup_ms = dedup_ms
        self.running: str | None = None  # the stream whose pass runs
        self.given: list[Segment] = []  # the segments it was given
        self.started_at = 0.0  # when it started (monotonic seconds), for the log
        self.turn = 0  # where the round of compacted logs goes on
        self.passes = 0  # installed, since start
        self.dropped = 0  # records the installed passes dropped

    def tick(self, wall_ms: int, lowest_commits: dict[str, int]) -> list[str]:
        """Install a finished pass and start the next; the streams whose log changed.
        ``lowest_commits``: stream -> its consumer groups' lowest committed position."""
        changed: list[str] = []
        if self.running is not None:
            try:
                finished, built = self.runner.done()
            except (OSError, CorruptRecord) as exc:
                log.error("compaction: %s: %s", self.running, exc)
                finished, built = True, None
            if not finished:
                return changed
            stream, self.running = self.running, None
            if built is not None and self._install(stream, built):
                changed.append(stream)
        names = [n for n, lg in self.store.logs.items() if lg.settings.cleanup == "compact"]
        for i in range(len(names)):
            name = names[(self.turn + i) % len(names)]
            stream_log = self.store.logs[name]
            bound = min(
                stream_log.mark,
                make_seq(wall_ms - self.dedup_ms, 0),
                lowest_commits.get(name, SEQ_MAX),
            )
            sealed = [s for s in stream_log.segments if s.sealed]
            if not sealed or sealed[0].head_seq > bound:
                continue
            self.turn = (self.turn + i + 1) % len(names)
            settings = stream_log.settings
            self.running, self.started_at, self.given = name, time.monotonic(), sealed
            self.runner.start(
                partial(
                    compaction.build,
                    stream_log.files,
                    stream_log.directory,
                    sealed,
                    bound,
                    wall_ms - settings.delete_retention_ms,
                    settings.segment_bytes,
                )
            )
            break
        return changed

    def _install(self, stream: str, built: Built) -> bool:
        stream_log = self.store.logs.get(stream)
        if stream_log is None:
            compaction.discard(self.store.files, built)
            return False
        try:
            installed = compaction.install(
                stream_log.files, stream_log.directory, stream_log.segments, self.given, built
            )
        except OSError as exc:  # recovery finishes or undoes it at the next start
            log.error("compaction: %s: installing failed: %s", stream, exc)
            return False
        if installed:
            self.passes += 1
            self.dropped += built.dropped
            log.info(
                "compaction: %s: %d records kept, %d dropped, in %d segment(s), %.2f s",
                stream,
                built.kept,
                built.dropped,
                len(built.outputs),
                time.monotonic() - self.started_at,
            )
        return installed

    def close(self) -> None:
        self.runner.close()
