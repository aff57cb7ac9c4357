"""Time as the core sees it: wall time for stamps, elapsed time for timers.

How this works: the shell hands the core a ``Now`` with two readings. ``wall_ms`` is the
system clock; it stamps seqs and epochs, and (kept from going back by ``WallGuard``) judges
what peers and producers claim about time, and nothing else, because an operator or NTP may
step it by seconds in either direction. ``elapsed_ms`` is monotonic (the shell reads
``time.monotonic``, the simulator its own step counter); every timer runs on it, so a step of
the wall clock can neither fire a timer early nor hold one back.

Every timer is one ``Timeout``: ``start`` arms it unless it runs, ``reset`` re-arms it from
now, ``stop`` disarms it, ``fired`` says whether ``after_ms`` have passed since it was armed;
its queries change nothing. Every rate limit is one ``RateLimit``, whose ``allow`` counts what
it allows.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, init=False)
class Now:
    wall_ms: int  # unix ms from the system clock: may step; stamps seqs only
    elapsed_ms: int  # monotonic ms since an arbitrary origin: drives every timer

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, wall_ms: int, elapsed_ms: int) -> None:
        object.__setattr__(self, "wall_ms", wall_ms)
        object.__setattr__(self, "elapsed_ms", elapsed_ms)


class WallGuard:
    """The wall clock as peers' claims are judged against (``claims.py``): never behind where
    it stood when the node started plus the elapsed time since, so a step back of the wall
    clock cannot make honest peers look far ahead."""

    __slots__ = ("wall_at_zero",)

    def __init__(self) -> None:
        self.wall_at_zero: int | None = None  # the wall clock at elapsed 0, from the first turn

    def read(self, now: Now) -> int:
        if self.wall_at_zero is None:
            self.wall_at_zero = now.wall_ms - now.elapsed_ms
        return max(now.wall_ms, now.elapsed_ms + self.wall_at_zero)


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


class RateLimit:
    """An act done at most once per ``every_ms``: ``allow`` says whether it may be done now
    and, when it may, counts it as done; ``hold`` counts it as done now; ``release`` lets the
    next ``allow`` through whenever it comes."""

    __slots__ = ("done_ms", "every_ms")

    def __init__(self, every_ms: int) -> None:
        self.every_ms = every_ms
        self.done_ms: int | None = None  # None: not done yet, or released

    def allow(self, elapsed_ms: int) -> bool:
        if self.done_ms is not None and elapsed_ms - self.done_ms < self.every_ms:
            return False
        self.done_ms = elapsed_ms
        return True

    def hold(self, elapsed_ms: int) -> None:
        self.done_ms = elapsed_ms

    def release(self) -> None:
        self.done_ms = None
