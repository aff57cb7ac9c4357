"""The ``relay`` command against a test's cluster, as a user runs it: a process of its own."""

from __future__ import annotations

import subprocess
import sys

from relay.runtime.local_cluster import LocalCluster


def relay(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``relay ARGS --config <the cluster's file>``, its output captured (at most 60 s)."""
    return subprocess.run(
        [sys.executable, "-m", "relay", *args, "--config", str(cluster.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
