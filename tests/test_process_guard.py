"""The fast tier's guard (tests/process_guard.py) on planted cases: a test not marked slow
that starts a process, by any of the usual ways or from a fixture, fails and is named; one
marked slow may. No process starts here: each planted start is refused before it begins."""

from __future__ import annotations

import subprocess

import pytest
from process_guard import NO_PROCESS, ProcessStartRefused, armed, guarding

pytest_plugins = ("pytester",)


def test_this_test_runs_armed_for_itself(request: pytest.FixtureRequest) -> None:
    guard = armed()
    assert guard is not None and guard.test == request.node.nodeid


def test_the_guard_refuses_subprocess_run_and_names_the_test() -> None:
    with guarding("tests/test_planted.py::test_x") as guard:
        with pytest.raises(ProcessStartRefused) as refused:
            subprocess.run(["true"])
        assert guard is not None
    assert str(refused.value) == (
        f"tests/test_planted.py::test_x started a process (Popen.__init__): {NO_PROCESS}"
    )
    with pytest.raises(ProcessStartRefused, match="the error was caught, not fixed"):
        guard.verify()  # a library that swallowed the error does not hide the start


PLANTED = """
import multiprocessing
import os
import subprocess

import pytest

import process_guard


@pytest.fixture(scope="module")
def started_for_the_module():
    subprocess.Popen(["true"]).wait()


def test_runs_true():
    subprocess.run(["true"])


def test_swallows_the_refusal():
    try:
        subprocess.run(["true"])
    except Exception:
        pass


def test_forks():
    if os.fork() == 0:  # only if the guard failed: the child leaves at once
        os._exit(0)


def test_starts_a_multiprocessing_process():
    multiprocessing.get_context("spawn").Process(target=print).start()


def test_uses_a_module_fixture_that_starts_one(started_for_the_module):
    pass


def test_starts_nothing():
    assert process_guard.armed() is not None


@pytest.mark.slow
def test_marked_slow_may_start_one():
    assert process_guard.armed() is None
"""


def test_planted_tests_that_start_a_process_fail_unless_marked_slow(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    slow: may start processes\n")
    pytester.makeconftest('pytest_plugins = ["process_guard"]\n')
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rfE")
    result.assert_outcomes(passed=2, failed=4, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            f"*test_planted.py::test_runs_true started a process (Popen.__init__): {NO_PROCESS}",
            "*test_planted.py::test_swallows_the_refusal started a process (Popen.__init__)*"
            "the error was caught, not fixed*",
            "*test_planted.py::test_forks started a process (os.fork)*",
            "*test_planted.py::test_starts_a_multiprocessing_process started a process"
            " (BaseProcess.start)*",
            "*test_planted.py::test_uses_a_module_fixture_that_starts_one started a process"
            " (Popen.__init__)*",
        ]
    )
