"""What ``Producer.send`` returns: a message's publish, and the ``Ack`` it resolves to."""

from __future__ import annotations

import time
from dataclasses import dataclass

from relay import errors
from relay.core.digest import Headers
from relay.core.flake import seq_unix_ms
from relay.wire.replies import AckRow


@dataclass(frozen=True, slots=True)
class Ack:
    """A transaction a quorum verified: its place (seq) and the stream's digest there."""

    stream: str
    seq: int
    digest: bytes
    msg_id: int
    node: int | None = None  # the id of the node that answered (None if not in a config)

    @property
    def timestamp_ms(self) -> int:
        return seq_unix_ms(self.seq)


class PublishFuture:
    """One message's publish: the message itself until it is answered (then only its id and
    stream stay: a caller may keep millions of futures), then its answer. Its
    ``Ack`` is made when ``result`` asks for it: a pipelined producer resolves thousands of
    futures a second that nobody asks."""

    __slots__ = (
        "_deadline",
        "_error",
        "_headers",
        "_key",
        "_node",
        "_payload",
        "_row",
        "done_at",
        "last_error",
        "msg_id",
        "stream",
    )

    def __init__(
        self,
        stream: str,
        msg_id: int,
        payload: bytes,
        key: bytes | None,
        headers: Headers,
        deadline: float,
    ) -> None:
        self.stream = stream
        self.msg_id = msg_id
        self._payload = payload
        self._key = key
        self._headers = headers
        self._deadline = deadline  # time.monotonic() by which a quorum must have answered
        self._row: AckRow | None = None
        self._node: int | None = None
        self._error: errors.RelayError | None = None
        self.done_at = 0.0  # time.perf_counter() when it resolved
        self.last_error = ""  # why the last attempt did not get an answer

    def done(self) -> bool:
        return self._row is not None or self._error is not None

    def failed(self) -> bool:
        return self._error is not None

    def _failed(self, error: errors.RelayError) -> None:
        self._error, self.done_at = error, time.perf_counter()
        self._payload, self._key, self._headers = b"", None, ()  # answered: the message goes

    def result(self) -> Ack:
        """The ack; raises the ``RelayError`` the publish failed with. Call after ``flush``."""
        if self._error is not None:
            raise self._error
        if self._row is None:
            raise RuntimeError("the publish is still in flight; call Producer.flush() first")
        return Ack(self.stream, self._row.seq, self._row.digest, self.msg_id, self._node)
