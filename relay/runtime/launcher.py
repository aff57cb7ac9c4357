"""Start, stop and query the nodes of a config file on this machine (``relay cluster``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import relay
from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress
from relay.client.status import node_status
from relay.config import ClusterConfig, NodeSpec
from relay.core.status import NodeStatus


@dataclass(frozen=True, slots=True)
class NodeProcess:
    spec: NodeSpec
    pid_file: Path
    log_file: Path

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _alive(pid) else None


def processes(config: ClusterConfig) -> list[NodeProcess]:
    return [
        NodeProcess(
            spec, config.run_dir / f"node-{spec.id}.pid", config.run_dir / f"node-{spec.id}.log"
        )
        for spec in config.nodes
    ]


def child_env() -> dict[str, str]:
    """The environment for a child ``python -m relay``: this process's, with the folder this
    process imported relay from first on the path, so that a child runs the same relay (``-m``
    would otherwise take the one in the working directory: a benchmark of a second checkout
    run from the first would start the first's nodes)."""
    root = str(Path(relay.__file__).resolve().parent.parent)
    paths = [root, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start_node(config: ClusterConfig, proc: NodeProcess, extra_args: tuple[str, ...] = ()) -> int:
    """Start one node in the background; its pid."""
    assert config.path is not None
    config.run_dir.mkdir(parents=True, exist_ok=True)
    log = proc.log_file.open("ab")
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "relay",
            "node",
            "--config",
            str(config.path),
            "--id",
            str(proc.spec.id),
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=child_env(),
    )
    log.close()
    proc.pid_file.write_text(f"{child.pid}\n")
    return child.pid


def stop_node(proc: NodeProcess, timeout_s: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout_s``; True if a process was stopped."""
    pid = proc.pid()
    if pid is None:
        proc.pid_file.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    proc.pid_file.unlink(missing_ok=True)
    return True


def query_status(
    spec: NodeSpec, timeout_ms: int = 1000, pair: KeyPair | None = None, brief: bool = False
) -> NodeStatus | None:
    """A node's status (``node_status``), or None if it does not answer in time."""
    address = NodeAddress(spec.id, spec.host, spec.client_port, spec.public_key)
    return node_status(address, timeout_ms, pair, brief)


def wait_until_answering(
    spec: NodeSpec, pid: int, timeout_s: float, pair: KeyPair | None = None
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return False
        if query_status(spec, 300, pair, brief=True) is not None:
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return True
