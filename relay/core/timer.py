"""Time as the core sees it: wall time for stamps, elapsed time for timers.

How this works: the shell hands the core a ``Now`` with two readings. ``wall_ms`` is the
system clock; it stamps seqs and epochs and nothing else, because an operator or NTP may
step it by seconds in either direction. ``elapsed_ms`` is monotonic (the shell reads
``time.monotonic``, the simulator its own step counter); every timer runs on it, so a step of
the wall clock can neither fire a timer early nor hold one back.

Every timer is one ``Timeout``: ``start`` arms it unless it runs, ``reset`` re-arms it from
now, ``stop`` disarms it, ``fired`` says whether ``after_ms`` have passed since it was armed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Now:
    wall_ms: int  # unix ms from the system clock: may step; stamps seqs only
    elapsed_ms: int  # monotonic ms since an arbitrary origin: drives every timer


class Timeout:
    __slots__ = ("after_ms", "started_ms")

    def __init__(self, after_ms: int) -> None:
        self.after_ms = after_ms
        self.started_ms: int | None = None  # None: not running

    @property
    def running(self) -> bool:
        return self.started_ms is not None

    def start(self, elapsed_ms: int) -> None:
        """Arm the timer unless it is already running."""
        if self.started_ms is None:
            self.started_ms = elapsed_ms

    def reset(self, elapsed_ms: int) -> None:
        """Arm the timer from now, whether it was running or not."""
        self.started_ms = elapsed_ms

    def stop(self) -> None:
        self.started_ms = None

    def fired(self, elapsed_ms: int) -> bool:
        return self.started_ms is not None and elapsed_ms - self.started_ms >= self.after_ms

    def age_ms(self, elapsed_ms: int) -> int:
        """How long it has been running (0 when stopped)."""
        return 0 if self.started_ms is None else elapsed_ms - self.started_ms

    def ready(self, elapsed_ms: int) -> bool:
        """For rate limits: True (and re-armed) when stopped or fired, else False."""
        if self.started_ms is not None and elapsed_ms - self.started_ms < self.after_ms:
            return False
        self.started_ms = elapsed_ms
        return True
