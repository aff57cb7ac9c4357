"""A job as a work group sees it: a transaction of the job stream, with its priority, its
not-before time and its resource read from the transaction.

How this works: producers need nothing new. A job's resource is the transaction's key; its
priority (0-255, smaller first, 128 when absent) and its not-before time (unix ms, ready at
once when absent) are the headers ``relay-priority`` and ``relay-not-before``, decimal ASCII. A
header that does not parse (hostile or broken producers) counts as absent and the job is
counted as ``malformed``: a job is never refused by the queue, since the stream already holds
it. Among ready jobs the order is priority, then the *order time* (the not-before time, or the
seq's own time for a job ready at once: FIFO by time within a priority), then seq.
"""

from __future__ import annotations

from dataclasses import dataclass

from blake3 import blake3

from relay.core.flake import seq_unix_ms
from relay.core.messages import Tx

PRIORITY_HEADER = "relay-priority"
NOT_BEFORE_HEADER = "relay-not-before"
PRIORITY_DEFAULT = 128
PRIORITY_MAX = 255
NOT_BEFORE_MAX = 1 << 53  # unix ms; beyond this a header is malformed
KEY_BYTES_MAX = 1024  # a longer key is hashed down for the queue's indexes


@dataclass(frozen=True, slots=True)
class Job:
    seq: int
    priority: int
    not_before: int  # unix ms; 0: ready at once
    key: bytes | None  # the resource; None: none
    malformed: bool = False

    @property
    def order_ms(self) -> int:
        """The time that orders it within its priority."""
        return self.not_before or seq_unix_ms(self.seq)


def job_of(tx: Tx) -> Job:
    """The job a transaction of the job stream is (headers that do not parse count as absent)."""
    priority, not_before, malformed = PRIORITY_DEFAULT, 0, False
    for name, value in tx.headers:
        if name == PRIORITY_HEADER:
            parsed = _decimal(value, PRIORITY_MAX)
            if parsed is None:
                malformed = True
            else:
                priority = parsed
        elif name == NOT_BEFORE_HEADER:
            parsed = _decimal(value, NOT_BEFORE_MAX)
            if parsed is None:
                malformed = True
            else:
                not_before = parsed
    return Job(tx.seq, priority, not_before, index_key(tx.key), malformed)


def index_key(key: bytes | None) -> bytes | None:
    """The key as the queue indexes it: as is up to KEY_BYTES_MAX, else its blake3 digest."""
    if key is None or len(key) <= KEY_BYTES_MAX:
        return key
    return b"\0blake3:" + blake3(key).digest()


def job_headers(priority: int | None, not_before_ms: int | None) -> tuple[tuple[str, bytes], ...]:
    """The headers a producer adds for a job's priority and not-before time (checked)."""
    headers: list[tuple[str, bytes]] = []
    if priority is not None:
        if not 0 <= priority <= PRIORITY_MAX:
            raise ValueError(f"a priority is 0-{PRIORITY_MAX}, not {priority}")
        headers.append((PRIORITY_HEADER, str(priority).encode()))
    if not_before_ms is not None:
        if not 0 <= not_before_ms <= NOT_BEFORE_MAX:
            raise ValueError(f"a not-before time is unix ms, not {not_before_ms}")
        headers.append((NOT_BEFORE_HEADER, str(not_before_ms).encode()))
    return tuple(headers)


def _decimal(value: bytes, most: int) -> int | None:
    if not value or len(value) > 20 or not value.isdigit():
        return None
    number = int(value)
    return number if number <= most else None
