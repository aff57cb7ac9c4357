"""The chaos smoke CI runs: 3 nodes, kills and partitions for about a minute, a clean verdict."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_a_short_chaos_run_with_kills_and_partitions_keeps_every_invariant(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "chaos", "run", "--nodes", "3", "--duration", "50"]
    command += ["--faults", "kill,partition", "--seed", "1", "--out", str(out)]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = run.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGINT)  # the runner heals and stops its nodes on an interrupt
        output, _ = run.communicate(timeout=60)
        pytest.fail(f"the chaos run did not finish in 240 s:\n{output}")
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    text = (out / "report.txt").read_text()
    assert "verdict: every invariant held" in text
    assert "kill" in text and "partition" in text
    assert (out / "report.png").stat().st_size > 1000
