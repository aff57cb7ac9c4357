"""A log line at most once a second per subject: a peer or client that misbehaves in a flood
must not flood the node's log with it."""

from __future__ import annotations

from collections.abc import Hashable

EVERY_MS = 1000


class Throttle:
    def __init__(self) -> None:
        self.last_ms: dict[Hashable, int] = {}  # subject -> when it was last let through

    def allow(self, subject: Hashable, elapsed_ms: int) -> bool:
        """Whether to log about ``subject`` now (and, if so, not again within a second)."""
        if elapsed_ms - self.last_ms.get(subject, -EVERY_MS) < EVERY_MS:
            return False
        self.last_ms[subject] = elapsed_ms
        return True
