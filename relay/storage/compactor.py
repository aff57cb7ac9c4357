"""A node's compactions: one stream's log at a time, built off the loop and installed on it.

How this works: each ``tick`` (the loop calls it every half second) first installs a pass that
finished (``compaction.install``: renames and a directory sync, on the loop, so that no read
ever sees a file go), then, if none is running, starts the next compacted log in turn that has
a sealed segment the bound lets it take. The bound is the lowest of the log's verified mark,
the start of the dedup window (a producer's retry must still find the record it repeats), and
what the caller says of the stream (what a quorum's logs hold, and the lowest committed
position of its consumer groups; a stream it says nothing of is not compacted). The
pass runs on the ``CompactionRunner``: a process of its own for a node (at a lower priority),
at once for the simulator. Appends never wait for it: it reads sealed segments, which nothing
writes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Protocol

from relay.core.flake import make_seq
from relay.storage import compaction
from relay.storage.compaction import Built
from relay.storage.records import CorruptRecord
from relay.storage.segment import Segment
from relay.storage.store import NodeStore

log = logging.getLogger("relay.disk")
NICE = 10  # a pass's process yields the CPU to the nodes
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies

Build = Callable[[], Built | None]


class CompactionRunner(Protocol):
    def start(self, build: Build) -> None:
        """Run ``build`` in the background."""

    def done(self) -> tuple[bool, Built | None]:
        """(whether the last build finished, what it built); an error it raised is raised."""

    def close(self) -> None: ...


class ProcessCompactions:
    """Passes in a process of their own, at a lower priority than the node's (``nice`` 10):
    a pass is CPU in Python, which in the node's process would take the GIL from its loop. The
    process dies with the node (``PR_SET_PDEATHSIG``) and is stopped at ``close``: a pass cut
    short leaves a ``.cleaning`` file, which recovery removes."""

    def __init__(self) -> None:
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._busy = False

    def start(self, build: Build) -> None:
        if self._process is None or not self._process.is_alive():
            self.close()
            spawn = multiprocessing.get_context("spawn")  # never a fork of a node's threads
            parent, child = spawn.Pipe()
            self._process = spawn.Process(
                target=_serve, args=(child,), name="relay-compactor", daemon=True
            )
            self._process.start()
            child.close()
            self._conn = parent
        assert self._conn is not None
        self._conn.send(build)
        self._busy = True

    def done(self) -> tuple[bool, Built | None]:
        if not self._busy or self._conn is None or not self._conn.poll():
            return False, None
        self._busy = False
        try:
            ok, found = self._conn.recv()
        except (EOFError, OSError):  # the process died mid-pass
            self.close()
            raise OSError("the compaction process stopped") from None
        if not ok:
            raise found
        return True, found

    def close(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.join(5)
            self._process = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._busy = False


def _serve(conn: Connection) -> None:
    """The compaction process: each build it is sent, run, and its result or error sent back."""
    os.nice(NICE)
    _die_with_parent()
    while True:
        try:
            build = conn.recv()
        except (EOFError, OSError):
            return
        try:
            conn.send((True, build()))
        except (OSError, CorruptRecord) as exc:
            conn.send((False, exc))


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (a node killed with SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


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

    def tick(self, wall_ms: int, bounds: dict[str, int]) -> list[str]:
        """Install a finished pass and start the next; the streams whose log changed.
        ``bounds``: stream -> the seq its compaction may reach (what a quorum's logs hold, and
        its consumer groups' lowest committed position)."""
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
                bounds.get(name, 0),
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
            compaction.discard(self.store.files, built.outputs)
            return False
        try:
            installed = compaction.install(
                stream_log.files, stream_log.directory, stream_log.segments, self.given, built
            )
        except OSError as exc:  # recovery finishes or undoes it at the next start
            log.error("compaction: %s: installing failed: %s", stream, exc)
            segments = stream_log.segments  # some outputs may have gone in
            return not segments or segments[0] is not self.given[0]
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
