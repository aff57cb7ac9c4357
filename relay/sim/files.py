"""A simulated file system for the real storage code (after FoundationDB's and TigerBeetle's):
what was written is kept apart from what was synced, and a power loss decides what survives.

How this works: a file is an inode with the bytes reads see (``data``) and the bytes its last
sync made durable (``synced``). Names are kept apart from data, as a journaling file system
does: creating, renaming and removing a name, and making a directory, are metadata operations
in one ordered log. A directory sync makes durable every operation up to the last one that
touched that directory (a journal commits in order); a ``sync_all`` makes everything durable.

A process crash loses nothing but the descriptors (the kernel keeps its page cache). A power
loss keeps the durable metadata plus a random prefix of the rest, and of each file the synced
bytes plus a random prefix of what was appended since, torn at any byte (a cut since the last
sync persists, or not). Faults can be switched on: writes that fail with ENOSPC (or come up
short), and syncs that fail with EIO. A failed sync is modelled on Linux: the pages it was to
write are marked clean though the device never took them (``Inode.dropped``), so reads still
see them but no later sync writes them, and a power loss loses them, even when a later sync
of the same file succeeded; only a truncate below them (and writing them again) ends that.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class Inode:
    data: bytearray = field(default_factory=bytearray)
    synced: bytes = b""  # what the device holds, as far as the last good sync reached
    dropped: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of pages a
    # failed sync marked clean: in the page cache, never on the device

    def truncated(self, size: int) -> None:
        del self.data[size:]
        self.dropped = [(start, min(end, size)) for start, end in self.dropped if start < size]

    def device_copy(self) -> bytes:
        """What a sync makes durable: the data, except the dropped pages, which hold what the
        device held there before (zeros past its old end)."""
        image = bytearray(self.data)
        for start, end in self.dropped:
            old = self.synced[start:end]
            image[start:end] = old + bytes(end - start - len(old))
        return bytes(image)


@dataclass(frozen=True, slots=True)
class MetaOp:
    kind: str  # "link" (a name now names an inode), "unlink", "rename", "mkdir"
    path: Path
    inode: int = 0
    target: Path | None = None  # of a rename

    def touches(self, directory: Path) -> bool:
        return self.path.parent == directory or (
            self.target is not None and self.target.parent == directory
        )


@dataclass(slots=True)
class Namespace:
    files: dict[Path, int] = field(default_factory=dict)  # path -> inode
    dirs: set[Path] = field(default_factory=set)

    def copy(self) -> Namespace:
        return Namespace(dict(self.files), set(self.dirs))

    def apply(self, op: MetaOp) -> None:
        if op.kind == "link":
            self.files[op.path] = op.inode
        elif op.kind == "unlink":
            self.files.pop(op.path, None)
        elif op.kind == "mkdir":
            self.dirs.add(op.path)
        elif op.kind == "rename":
            assert op.target is not None
            inode = self.files.pop(op.path, None)
            if inode is not None:
                self.files[op.target] = inode


def _error(code: int, path: Path | str = "") -> OSError:
    return OSError(code, os.strerror(code), str(path))


class SimFiles:
    def __init__(self, rng: random.Random, root: Path = Path("/sim")) -> None:
        self.rng = rng
        self.inodes: dict[int, Inode] = {}
        self.live = Namespace(dirs={root})  # what the running process sees
        self.durable = Namespace(dirs={root})  # what a power loss keeps for sure
        self.pending: list[MetaOp] = []  # metadata operations not yet durable, in order
        self.fds: dict[int, int] = {}  # descriptor -> inode
        self._next_inode = 1
        self._next_fd = 3
        self.write_errors = 0.0  # the chance that a write fails (ENOSPC, or comes up short)
        self.sync_errors = 0.0  # the chance that a sync fails (EIO)
        self.syncs = 0  # descriptor and directory syncs carried out

    # --- names ---------------------------------------------------------------------------

    def _meta(self, op: MetaOp) -> None:
        self.live.apply(op)
        self.pending.append(op)

    def _inode_of(self, path: Path) -> int:
        inode = self.live.files.get(path)
        if inode is None:
            raise _error(errno.ENOENT, path)
        return inode

    def _parent_exists(self, path: Path) -> None:
        if path.parent not in self.live.dirs:
            raise _error(errno.ENOENT, path.parent)

    def create(self, path: Path) -> int:
        self._parent_exists(path)
        inode = self._next_inode
        self._next_inode += 1
        self.inodes[inode] = Inode()
        self._meta(MetaOp("link", path, inode))
        return self._open(inode)

    def open_append(self, path: Path) -> int:
        return self._open(self._inode_of(path))

    def _open(self, inode: int) -> int:
        fd = self._next_fd
        self._next_fd += 1
        self.fds[fd] = inode
        return fd

    def rename(self, source: Path, target: Path) -> None:
        self._inode_of(source)
        self._parent_exists(target)
        self._meta(MetaOp("rename", source, target=target))

    def unlink(self, path: Path, missing_ok: bool = False) -> None:
        if path not in self.live.files:
            if missing_ok:
                return
            raise _error(errno.ENOENT, path)
        self._meta(MetaOp("unlink", path))

    def mkdir(self, path: Path, parents: bool = False) -> None:
        if path in self.live.dirs:
            return
        if parents and path.parent not in self.live.dirs:
            self.mkdir(path.parent, parents=True)
        self._parent_exists(path)
        self._meta(MetaOp("mkdir", path))

    def listdir(self, path: Path) -> list[Path]:
        if path not in self.live.dirs:
            raise _error(errno.ENOENT, path)
        found = [p for p in self.live.files if p.parent == path]
        found += [d for d in self.live.dirs if d.parent == path and d != path]
        return sorted(found)

    def exists(self, path: Path) -> bool:
        return path in self.live.files or path in self.live.dirs

    def is_file(self, path: Path) -> bool:
        return path in self.live.files

    # --- data ----------------------------------------------------------------------------

    def writev(self, fd: int, parts: list[bytes] | tuple[bytes, ...]) -> int:
        data = b"".join(parts)
        inode = self.inodes[self.fds[fd]]
        if data and self.write_errors and self.rng.random() < self.write_errors:
            if self.rng.random() < 0.5:
                raise _error(errno.ENOSPC)
            data = data[: self.rng.randrange(len(data))]  # a short write: the disk filled
        inode.data += data
        return len(data)

    def ftruncate(self, fd: int, size: int) -> None:
        self.inodes[self.fds[fd]].truncated(size)

    def truncate(self, path: Path, size: int) -> None:
        self.inodes[self._inode_of(path)].truncated(size)

    def dup(self, fd: int) -> int:
        return self._open(self.fds[fd])

    def close(self, fd: int) -> None:
        if self.fds.pop(fd, None) is None:
            raise _error(errno.EBADF)

    def fdatasync(self, fd: int) -> None:
        inode = self.inodes[self.fds[fd]]
        if self.sync_errors and self.rng.random() < self.sync_errors:
            start = _common_prefix(inode.data, inode.synced)
            if start < len(inode.data):
                inode.dropped.append((start, len(inode.data)))
            raise _error(errno.EIO)
        inode.synced = inode.device_copy()
        self.syncs += 1

    def fsync_dir(self, path: Path) -> None:
        if path not in self.live.dirs:
            raise _error(errno.ENOENT, path)
        if self.sync_errors and self.rng.random() < self.sync_errors:
            raise _error(errno.EIO, path)
        last = max((i for i, op in enumerate(self.pending) if op.touches(path)), default=-1)
        self._commit(last + 1)
        self.syncs += 1

    def sync_all(self, path: Path) -> None:
        for inode in self.inodes.values():
            inode.synced = inode.device_copy()
        self._commit(len(self.pending))

    def _commit(self, count: int) -> None:
        for op in self.pending[:count]:
            self.durable.apply(op)
        del self.pending[:count]

    def read_bytes(self, path: Path) -> bytes:
        return bytes(self.inodes[self._inode_of(path)].data)

    def write_synced(self, path: Path, data: bytes) -> None:
        fd = self.create(path)
        try:
            if self.writev(fd, (data,)) != len(data):
                raise _error(errno.ENOSPC, path)
            self.fdatasync(fd)
        finally:
            self.close(fd)

    def copy(self, source: Path, target: Path) -> None:
        data = self.read_bytes(source)
        fd = self.create(target)
        self.inodes[self.fds[fd]].data += data
        self.close(fd)

    @contextlib.contextmanager
    def view(self, path: Path, offset: int) -> Iterator[bytes | None]:
        data = self.read_bytes(path)
        yield data if len(data) > offset else None

    # --- crashes -------------------------------------------------------------------------

    def crash(self, power_loss: bool) -> None:
        """The process died (its descriptors are gone); with ``power_loss`` the machine lost
        what was not durable, as described above."""
        self.fds.clear()
        if not power_loss:
            return
        kept = self.rng.randint(0, len(self.pending))
        self._commit(kept)
        self.pending.clear()
        self.live = self.durable.copy()
        for inode in self.inodes.values():
            inode.data = bytearray(self._survivor(inode))
            inode.synced = bytes(inode.data)
            inode.dropped = []

    def _survivor(self, inode: Inode) -> bytes:
        """What of a file survives a power loss: its synced bytes, and a torn prefix of
        what a sync would have written after them (a cut since the sync persists, or not;
        dropped pages never reach the device)."""
        data, synced = inode.device_copy(), inode.synced
        common = _common_prefix(data, synced)
        if common < len(synced) and self.rng.random() < 0.5:
            return synced  # the cut and what followed it were lost
        return data[: common + self.rng.randint(0, len(data) - common)]


def _common_prefix(data: bytes | bytearray, synced: bytes) -> int:
    """How many leading bytes the page cache and the device agree on."""
    common = len(synced) if data.startswith(synced) else 0
    limit = min(len(data), len(synced))
    while common < limit and data[common] == synced[common]:
        common += 1
    return common
