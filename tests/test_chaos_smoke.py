"""The chaos smokes CI runs: 3 nodes, kills, partitions and loss for half a minute, a clean
verdict; once with the nodes on 127.0.0.1 (faults by admin hooks), once with each node in a
network namespace of its own (partitions and loss by nftables), and once more on 127.0.0.1
with ``fsync = "never"``."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relay.runtime.netns import unavailable

pytestmark = [pytest.mark.chaos, pytest.mark.slow]
NETS = [
    ("local", "always"),
    pytest.param(
        "netns",
        "always",
        marks=pytest.mark.skipif(bool(unavailable()), reason=f"netns: {unavailable()}"),
    ),
    ("local", "never"),  # acknowledged once a quorum verified, nothing synced
]


@pytest.mark.parametrize(("net", "fsync"), NETS)
def test_a_short_chaos_run_with_kills_and_partitions_keeps_every_invariant(
    tmp_path: Path, net: str, fsync: str
) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "chaos", "run", "--nodes", "3", "--duration", "30"]
    command += ["--faults", "kill,partition,loss", "--seed", "1", "--out", str(out)]
    command += ["--net", net, "--fsync", fsync]
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
    assert re.search(r"s  start kill \(node \d\)", output), output  # progress, fault by fault
    assert re.search(r"s  end   kill \(node \d\)", output), output
    text = (out / "report.txt").read_text()
    assert "verdict: every invariant held" in text
    assert "kill" in text and "partition" in text
    assert f"network {net}" in text and f"fsync {fsync}" in text
    assert (out / "report.png").stat().st_size > 1000


def test_a_short_chaos_run_of_the_queue_workload_keeps_every_invariant(tmp_path: Path) -> None:
    out = tmp_path / "run"
    command = [sys.executable, "-m", "chaos", "run", "--nodes", "3", "--duration", "25"]
    command += ["--faults", "kill,partition,clock", "--seed", "2", "--out", str(out)]
    command += ["--workload", "queue", "--rate", "100"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = run.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGINT)
        output, _ = run.communicate(timeout=60)
        pytest.fail(f"the chaos run did not finish in 300 s:\n{output}")
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    text = (out / "report.txt").read_text()
    assert "verdict: every invariant held" in text
    for invariant in ("queue-one-holder", "queue-acked-once", "queue-none-lost"):
        assert re.search(rf"ok   {invariant} +checked [1-9]", text), text
    kills = [line for line in (out / "workers.jsonl").read_text().splitlines() if '"kill"' in line]
    assert kills, "no worker was killed"
