"""Waiting in a test for what a real cluster does in its own time: poll, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(probe: Callable[[], T], done: Callable[[T], bool], timeout_s: float) -> T:
    """The first value of ``probe()`` that ``done`` accepts, polled every 0.1 s, or the last
    one once ``timeout_s`` passed: the caller asserts on it, saying what it knows."""
    deadline = time.monotonic() + timeout_s
    value = probe()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = probe()
    return value
