"""A node's data directory: whose it is, its epoch and seq reservation, and its streams' logs.

Layout::

    <data_dir>/node.json               {"format", "cluster", "node_id", "epoch", "reserved"}
    <data_dir>/streams/<name>/         one directory per stream (see ``dir_name``)
        <first>-<last>_<first ms>-<last ms>.seg   sealed segments
        <base>.open                    the segment being appended to
        quarantine/                    files cut from the log at recovery, for the operator

``node.json`` is replaced atomically (write, fsync, rename, fsync the directory) and refuses a
data directory that belongs to another cluster name or node id.
"""

from __future__ import annotations

import json
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from blake3 import blake3

from relay.core.events import Persist, Restored
from relay.core.flake import seq_unix_ms
from relay.core.origin import reservation
from relay.core.routing import stream_name_problem
from relay.storage.files import OS_FILES, Files
from relay.storage.recovery import Window, open_log
from relay.storage.settings import StorageSettings
from relay.storage.stream_log import StorageError, StreamLog

FORMAT = 3  # 3: segment headers count the history before them, kept records their index
# (2: without; 1: one frame per record)
NAME_BYTES_MAX = 180  # longer (quoted) stream names get a hashed directory name


def dir_name(stream: str) -> str:
    """A directory name for a stream: readable when it can be, unique always."""
    quoted = "s." + quote(stream, safe="-_.~")
    if len(quoted.encode()) <= NAME_BYTES_MAX:
        return quoted
    return "h." + blake3(stream.encode()).hexdigest()[:40]


def stream_of_dir(files: Files, directory: Path) -> str | None:
    """The stream a directory under ``<data_dir>/streams`` holds (None: not a stream's)."""
    name = directory.name
    if name.startswith("s."):
        stream = unquote(name[2:])
    elif name.startswith("h.") and files.is_file(directory / "stream"):
        try:
            stream = files.read_bytes(directory / "stream").decode()
        except (OSError, UnicodeDecodeError):
            return None
    else:
        return None
    return None if stream_name_problem(stream) or dir_name(stream) != name else stream


def held_streams(files: Files, data_dir: Path) -> list[str]:
    """The streams whose logs ``data_dir`` holds."""
    streams_dir = data_dir / "streams"
    if not files.exists(streams_dir):
        return []
    found = (stream_of_dir(files, d) for d in files.listdir(streams_dir))
    return sorted(s for s in found if s is not None)


APPENDING_LEAST = 16  # append descriptors a node may hold however low its open-file limit


def open_files_max() -> int:
    """The process's limit on open files (its soft ``RLIMIT_NOFILE``)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class NodeStore:
    def __init__(
        self,
        data_dir: Path,
        cluster: str,
        node_id: int,
        settings: StorageSettings,
        files: Files = OS_FILES,
        settings_of: Callable[[str], StorageSettings] | None = None,
    ) -> None:
        self.files = files
        self.data_dir = data_dir
        self.cluster = cluster
        self.node_id = node_id
        self.settings = settings
        # each stream's settings (its [[stream]] block's); default: the node's for all
        self.settings_of = settings_of or (lambda stream: settings)
        self.streams_dir = data_dir / "streams"
        self.logs: dict[str, StreamLog] = {}
        self.meta: dict[str, Any] = {}
        self.meta_lock = threading.Lock()
        # the logs that hold an append descriptor, least recently written first: at most
        # ``appending_max``, so a node's open files do not grow with its streams
        self.appending: OrderedDict[str, None] = OrderedDict()
        self.appending_max = max(APPENDING_LEAST, open_files_max() // 4)

    # --- opening ------------------------------------------------------------------------

    def open(self, window: Window, wall_ms: int) -> tuple[list[Restored], list[str]]:
        """Check whose directory this is and recover every stream's log: what to restore
        into the core, and what was cut (file and offset) for the operator."""
        try:
            self.files.mkdir(self.streams_dir, parents=True)
        except OSError as exc:
            raise StorageError(f"data_dir {self.data_dir}: {exc.strerror or exc}") from None
        self.meta = self._read_meta()
        restored, problems = [], []
        directories = self.files.listdir(self.streams_dir)
        share = window.total_bytes // max(1, len(directories))
        window = replace(window, keep_bytes=min(window.keep_bytes, share))
        for directory in directories:
            stream = stream_of_dir(self.files, directory)
            if stream is None:
                problems.append(f"{directory}: not a stream directory; left alone")
                continue
            settings = self.settings_of(stream)
            found = open_log(directory, stream, settings, window, wall_ms, self.files)
            self.logs[stream] = found.log
            problems += found.problems
            if found.log.segments:
                restored.append(found.restored)
        # what the kernel kept of a crashed process's writes, and what recovery cut, is
        # durable from here on: every log at once (a sealed segment may have been renamed
        # before its last sync ran)
        self.files.sync_all(self.streams_dir)
        return restored, problems

    def _read_meta(self) -> dict[str, Any]:
        path = self.data_dir / "node.json"
        if not self.files.exists(path):
            meta = {"format": FORMAT, "cluster": self.cluster, "node_id": self.node_id}
            return {**meta, "epoch": 0, "reserved": 0}
        try:
            meta = json.loads(self.files.read_bytes(path))
            ok = isinstance(meta, dict) and meta.get("format") == FORMAT
            ok = ok and all(type(meta.get(k)) is int for k in ("node_id", "epoch", "reserved"))
        except (OSError, ValueError) as exc:
            raise StorageError(f"{path}: unreadable ({exc})") from None
        older = {1: "one frame per record", 2: "no dense index in its segments"}
        found = meta.get("format") if isinstance(meta, dict) else None
        if ok is False and found in older:
            raise StorageError(
                f"data_dir {self.data_dir} holds logs of format {found} ({older[found]}), and "
                f"this relay reads format {FORMAT} (segments that count the stream's history); "
                "start this node on an empty data_dir (its peers fill it again) or run the relay "
                "that wrote it"
            )
        if not ok:
            raise StorageError(f"{path}: not a relay node file of format {FORMAT}")
        if (meta.get("cluster"), meta["node_id"]) != (self.cluster, self.node_id):
            raise StorageError(
                f"data_dir {self.data_dir} belongs to node {meta['node_id']} of cluster "
                f"{meta.get('cluster')!r}, not node {self.node_id} of {self.cluster!r}; "
                "give this node its own data_dir"
            )
        return dict(meta)

    def _write_meta(self) -> None:
        """Replace node.json with what ``meta`` holds now (the syncer thread writes it too:
        each write takes the lock and the whole of ``meta`` as it is then)."""
        path = self.data_dir / "node.json"
        temporary = path.with_suffix(".tmp")
        with self.meta_lock:
            self.files.write_synced(temporary, json.dumps(self.meta).encode())
            self.files.rename(temporary, path)
            self.files.fsync_dir(self.data_dir)

    # --- the node's epoch and seqs ------------------------------------------------------

    def start(self, wall_ms: int) -> tuple[int, int, int]:
        """(epoch, floor, reservation) for a node starting now: an epoch above every one it
        had, and seqs above every one it may have issued."""
        floor = self.meta["reserved"]
        self.meta["epoch"] = max(wall_ms, self.meta["epoch"] + 1)
        self.meta["reserved"] = reservation(max(wall_ms, seq_unix_ms(floor)))
        self._write_meta()
        return self.meta["epoch"], floor, self.meta["reserved"]

    def epoch_started(self, epoch: int) -> None:
        if epoch > self.meta["epoch"]:
            self.meta["epoch"] = epoch
            self._write_meta()

    def reserve(self, seq: int) -> bool:
        """Note a new seq reservation; whether node.json must be written for it (the
        syncer writes it, off the loop: ``write_meta``)."""
        if seq <= self.meta["reserved"]:
            return False
        self.meta["reserved"] = seq
        return True

    def write_meta(self) -> None:
        self._write_meta()

    # --- the logs -----------------------------------------------------------------------

    def apply(self, p: Persist, wall_ms: int) -> list[str]:
        """Write ``p`` into its stream's log; the logs whose append descriptor was given up
        for it (``appending_max``: the syncer must still sync and close it)."""
        log = self.logs.get(p.stream)
        if log is None:
            directory = self.streams_dir / dir_name(p.stream)
            self.files.mkdir(directory)
            if directory.name.startswith("h."):  # its name, durable before any record
                self.files.write_synced(directory / "stream", p.stream.encode())
                self.files.fsync_dir(directory)
            self.files.fsync_dir(self.streams_dir)
            log = StreamLog(directory, p.stream, self.settings_of(p.stream), [], 0, self.files)
            self.logs[p.stream] = log
        log.apply(p, wall_ms)
        appending = self.appending
        appending[p.stream] = None
        appending.move_to_end(p.stream)
        released = []
        while len(appending) > self.appending_max:
            name, _ = appending.popitem(last=False)
            if self.logs[name].release():
                released.append(name)
        return released

    def close(self) -> None:
        for log in self.logs.values():
            log.close()
