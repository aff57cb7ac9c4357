"""A producer's journal: every message kept on the local disk until the cluster acknowledged it.

How this works (libfastjournal's idea): ``add`` appends a message to ``journal.log`` before
``Producer.send`` returns, so a crash of the producer process loses nothing it accepted, and
``sync`` (fdatasync) runs before a batch goes to the cluster, so a power loss loses nothing the
cluster may have seen. ``acked`` appends the ids the cluster acknowledged (no sync: an ack lost
in a crash only makes the message go again, and the cluster answers a resend of the same
producer id and message id with the original seq). The file starts with the producer id and the
next message id, so a producer that starts again on it keeps its id and numbers on where it
stopped, never reusing a message id. When the file has grown to twice what is still
unacknowledged, it is rewritten with only that (a new file, synced, renamed over the old one).

Frames are ``length u32 | crc32 u32 | body`` with a msgpack body: ``[0, producer id, next msg
id]`` (the header), ``[1, msg id, stream, payload, key, headers]`` (a message) or ``[2, [msg
id, ...]]`` (acks). A torn or corrupt frame ends the file: what follows it is not trusted (a
crash tears only the last write).
"""

from __future__ import annotations

import fcntl
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from struct import Struct

import msgspec

from relay.core.digest import Headers
from relay.wire.fields import as_bytes, as_int, as_str

FRAME = Struct(">II")
FRAME_BYTES_MAX = 64 << 20
COMPACT_BYTES_MIN = 1 << 20  # below this the file is never rewritten
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


class JournalError(RuntimeError):
    """The journal belongs to another producer id, or the disk refused it."""


@dataclass(frozen=True, slots=True)
class Entry:
    msg_id: int
    stream: str
    payload: bytes
    key: bytes | None
    headers: Headers

    def estimate(self) -> int:
        """About the bytes of its frame, without encoding it."""
        headers = sum(len(n) + len(v) + 8 for n, v in self.headers)
        return len(self.payload) + len(self.key or b"") + len(self.stream) + headers + 48

    def frame(self) -> bytes:
        body = [1, self.msg_id, self.stream, self.payload, self.key, self.headers]
        return _frame(_encode(body))


class Journal:
    def __init__(self, directory: str | Path, producer_id: str | None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "journal.log"
        self._lock = os.open(self.directory / "journal.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock)
            raise JournalError(f"{self.directory} is in use by another producer") from None
        self.pending: dict[int, Entry] = {}  # msg id -> message not yet acknowledged
        self.sizes: dict[int, int] = {}  # msg id -> the bytes of its frame
        self.pending_bytes = 0
        self.next_msg_id = 1  # above every message id this producer ever used
        found_id = self._load()
        if found_id and producer_id and found_id != producer_id:
            raise JournalError(
                f"{self.path} belongs to producer {found_id!r}, not {producer_id!r}; give each "
                "producer its own journal"
            )
        self.producer_id = found_id or producer_id or os.urandom(16).hex()
        self._rewrite()  # a clean file: the header and what is pending, nothing torn
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._dirty = False

    # --- writing ------------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        data = entry.frame()
        if len(data) > FRAME_BYTES_MAX:
            raise JournalError(f"a message of {len(data)} bytes is too large for the journal")
        self._append(data)
        self._hold(entry, len(data))
        self._dirty = True

    def _hold(self, entry: Entry, size: int) -> None:
        self.pending_bytes += size - self.sizes.get(entry.msg_id, 0)  # a re-sent id replaces
        self.pending[entry.msg_id], self.sizes[entry.msg_id] = entry, size
        self.next_msg_id = max(self.next_msg_id, entry.msg_id + 1)

    def _drop(self, msg_id: int) -> None:
        if msg_id in self.pending:
            del self.pending[msg_id]
            self.pending_bytes -= self.sizes.pop(msg_id)

    def sync(self) -> None:
        """Make every message added so far durable (before it goes to the cluster)."""
        if self._dirty:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                raise JournalError(f"{self.path}: {exc.strerror or exc}") from None
            self._dirty = False

    def acked(self, msg_ids: list[int]) -> None:
        """These messages are done with (acknowledged, or refused for good)."""
        done = [m for m in msg_ids if m in self.pending]
        if not done:
            return
        for msg_id in done:
            self._drop(msg_id)
        self._append(_frame(_encode([2, done])))
        try:
            size = os.fstat(self._fd).st_size
            if size > COMPACT_BYTES_MIN and size > 2 * self.pending_bytes:
                self._rewrite()  # the old descriptor stays valid until the new file is in place
                os.close(self._fd)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise JournalError(f"{self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock >= 0:
            os.close(self._lock)  # and with it the lock
            self._lock = -1

    def _append(self, data: bytes) -> None:
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            raise JournalError(f"{self.path}: {exc.strerror or exc}") from None

    def _rewrite(self) -> None:
        """Replace the file by its header and the pending messages, durably."""
        fresh = self.path.with_suffix(".new")
        parts = [_frame(_encode([0, self.producer_id, self.next_msg_id]))]
        parts += [e.frame() for e in self.pending.values()]
        fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, b"".join(parts))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(fresh, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # --- reading ------------------------------------------------------------------------

    def _load(self) -> str:
        """The producer id of an existing file, filling ``pending`` and ``next_msg_id``."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return ""
        producer_id, offset = "", 0
        while offset + FRAME.size <= len(data):
            length, crc = FRAME.unpack_from(data, offset)
            body = data[offset + FRAME.size : offset + FRAME.size + length]
            if length > FRAME_BYTES_MAX or len(body) != length or zlib.crc32(body) != crc:
                break  # a torn or corrupt tail: nothing after it is trusted
            offset += FRAME.size + length
            try:
                record = _decode(body)
                kind = record[0]
                if kind == 0 and offset == FRAME.size + length:
                    producer_id, self.next_msg_id = as_str(record[1]), as_int(record[2])
                elif kind == 1 and producer_id:
                    entry = Entry(
                        as_int(record[1]),
                        as_str(record[2]),
                        as_bytes(record[3]),
                        None if record[4] is None else as_bytes(record[4]),
                        tuple((as_str(n), as_bytes(v)) for n, v in record[5]),
                    )
                    self._hold(entry, FRAME.size + length)
                elif kind == 2 and producer_id:
                    for msg_id in record[1]:
                        self._drop(as_int(msg_id))
                else:
                    break
            except (msgspec.DecodeError, ValueError, TypeError, IndexError, RecursionError):
                break
        if not producer_id:
            raise JournalError(f"{self.path}: not a producer journal (no header)")
        return producer_id


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (a short write goes on where it stopped; a full disk raises)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(28, "No space left on device")
        view = view[written:]


def _frame(body: bytes) -> bytes:
    return FRAME.pack(len(body), zlib.crc32(body)) + body
