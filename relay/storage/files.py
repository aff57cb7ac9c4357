"""The file system as the storage code uses it: a port with the real one behind it.

Every file operation of ``relay/storage`` goes through a ``Files``: appends through descriptors
(``create``, ``open_append``, ``writev``), cuts, syncs of a descriptor, of a directory and of
the whole file system, renames, removals and whole-file reads. ``OsFiles`` is the operating
system's; the simulator plugs in a file system that keeps what was written apart from what was
synced, so a simulated power loss tears and loses what a real one would.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

IOV_MAX = max(16, os.sysconf("SC_IOV_MAX"))  # buffers one writev takes (1,024 on Linux)


class Files(Protocol):
    def create(self, path: Path) -> int:
        """A new empty file (replacing one of that name) open for appending."""

    def open_append(self, path: Path) -> int:
        """An existing file open for appending."""

    def writev(self, fd: int, parts: list[bytes] | tuple[bytes, ...]) -> int:
        """Append ``parts`` (at most ``IOV_MAX``) in one write; the bytes written."""

    def ftruncate(self, fd: int, size: int) -> None: ...

    def truncate(self, path: Path, size: int) -> None: ...

    def dup(self, fd: int) -> int: ...

    def close(self, fd: int) -> None: ...

    def fdatasync(self, fd: int) -> None:
        """Make what was written through ``fd``'s file durable (not its name)."""

    def fsync_dir(self, path: Path) -> None:
        """Make the directory's entries (files created, renamed, removed) durable."""

    def sync_all(self, path: Path) -> None:
        """Make everything written to the file system holding ``path`` durable."""

    def rename(self, source: Path, target: Path) -> None:
        """Rename, replacing ``target``; atomic, durable once the directory is synced."""

    def unlink(self, path: Path, missing_ok: bool = False) -> None: ...

    def mkdir(self, path: Path, parents: bool = False) -> None:
        """Make a directory (nothing if it exists)."""

    def listdir(self, path: Path) -> list[Path]:
        """The entries of a directory, sorted."""

    def exists(self, path: Path) -> bool: ...

    def is_file(self, path: Path) -> bool: ...

    def read_bytes(self, path: Path) -> bytes: ...

    def write_synced(self, path: Path, data: bytes) -> None:
        """Create ``path`` holding ``data``, synced (its name is durable once its directory
        is synced)."""

    def copy(self, source: Path, target: Path) -> None: ...

    def view(
        self, path: Path, offset: int
    ) -> contextlib.AbstractContextManager[bytes | mmap.mmap | None]:
        """The file's bytes to read from (None if it ends at or before ``offset``)."""


_LIBC = ctypes.CDLL(None, use_errno=True)


class OsFiles:
    """The operating system's file system."""

    def create(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)

    def open_append(self, path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_APPEND)

    def writev(self, fd: int, parts: list[bytes] | tuple[bytes, ...]) -> int:
        return os.writev(fd, parts)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def truncate(self, path: Path, size: int) -> None:
        os.truncate(path, size)

    def dup(self, fd: int) -> int:
        return os.dup(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def sync_all(self, path: Path) -> None:
        """One ``syncfs(2)`` where the C library has it (Linux), else ``sync(2)``; either
        way one call, not an fsync per file."""
        syncfs = getattr(_LIBC, "syncfs", None)
        if syncfs is None:
            os.sync()
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            if syncfs(fd) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code), str(path))
        finally:
            os.close(fd)

    def rename(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def unlink(self, path: Path, missing_ok: bool = False) -> None:
        path.unlink(missing_ok=missing_ok)

    def mkdir(self, path: Path, parents: bool = False) -> None:
        path.mkdir(parents=parents, exist_ok=True)

    def listdir(self, path: Path) -> list[Path]:
        return sorted(path.iterdir())

    def exists(self, path: Path) -> bool:
        return path.exists()

    def is_file(self, path: Path) -> bool:
        return path.is_file()

    def read_bytes(self, path: Path) -> bytes:
        return path.read_bytes()

    def write_synced(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(28, "short write (disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)

    def copy(self, source: Path, target: Path) -> None:
        shutil.copy2(source, target)

    @contextlib.contextmanager
    def view(self, path: Path, offset: int) -> Iterator[bytes | mmap.mmap | None]:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size <= offset:
                yield None
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                yield data


OS_FILES = OsFiles()
