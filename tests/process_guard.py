"""The fast tier starts no process. While a test not marked ``slow`` is set up, run or torn
down, each way Python starts one raises :class:`ProcessStartRefused`, naming the test:
subprocess (so a relay node, the CLI as a process, a Spark JVM), os.fork, os.posix_spawn,
os.system and multiprocessing. A refusal that a library caught still fails the test at the end
of its phase.

The hooks wrap pytest's phases rather than being a function fixture, so a module or session
fixture that a fast test is the first to use (a real cluster, a Spark session) is caught too.
tests/conftest.py loads this module as a plugin; its checks stay installed for the session and
do nothing while no fast test runs."""

from __future__ import annotations

import _posixsubprocess
import functools
import multiprocessing.process
import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

NO_PROCESS = "a test not marked slow must start no process; mark it slow"


class ProcessStartRefused(RuntimeError):
    pass


class Guard:
    """Armed for one test: refuses, and remembers, each start of a process."""

    def __init__(self, test: str) -> None:
        self.test = test
        self.refused: list[str] = []

    def refuse(self, how: str) -> None:
        message = f"{self.test} started a process ({how}): {NO_PROCESS}"
        self.refused.append(message)
        raise ProcessStartRefused(message)

    def verify(self) -> None:
        """Raise the first refusal again if the code under test caught it and went on."""
        if self.refused:
            raise ProcessStartRefused(f"{self.refused[0]} (the error was caught, not fixed)")


_armed: Guard | None = None  # the guard of the phase that runs now; None: any process may start


def armed() -> Guard | None:
    return _armed


@contextmanager
def guarding(test: str | None) -> Iterator[Guard | None]:
    """Within: starts of a process refused for ``test`` (or allowed, for None)."""
    global _armed
    before = _armed
    _armed = Guard(test) if test is not None else None
    try:
        yield _armed
    finally:
        _armed = before


def _checked(how: str, start: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(start)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if _armed is not None:
            _armed.refuse(how)
        return start(*args, **kwargs)

    return checked


STARTS: list[tuple[Any, str]] = [
    (subprocess.Popen, "__init__"),  # subprocess.run/call/check_output, os.popen, asyncio
    (_posixsubprocess, "fork_exec"),  # what Popen and multiprocessing's spawn call underneath
    (os, "fork"),  # multiprocessing's fork, os.spawn*, pty
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (multiprocessing.process.BaseProcess, "start"),  # Process, Pool, any start method
]
_installed = False


def install() -> None:
    """Put the check in front of every start of a process, once per interpreter (nested
    pytest runs, as in tests/test_process_guard.py, share it)."""
    global _installed
    if _installed:
        return
    for owner, name in STARTS:
        start = getattr(owner, name, None)
        if start is not None:
            setattr(owner, name, _checked(f"{getattr(owner, '__name__', owner)}.{name}", start))
    _installed = True


def pytest_configure(config: pytest.Config) -> None:
    install()


def _phase(item: pytest.Item) -> Generator[None, object, object]:
    slow = item.get_closest_marker("slow") is not None
    with guarding(None if slow else item.nodeid) as guard:
        result = yield
    if guard is not None:
        guard.verify()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _phase(item))
