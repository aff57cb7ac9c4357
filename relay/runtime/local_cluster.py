"""A real cluster of node processes on 127.0.0.1 with free ports, for tests, demos and chaos.

Every process it starts is stopped by ``close`` (also used as a context manager), with
SIGKILL for any that ignore SIGTERM.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import zmq

from relay.auth import keys
from relay.auth.keys import KeyPair, write_cluster
from relay.auth.sockets import connect_to
from relay.config import ClusterConfig, load
from relay.core.status import NodeStatus
from relay.runtime.admin import admin_call
from relay.runtime.launcher import child_env, query_status
from relay.runtime.netns import NetnsLayout
from relay.runtime.templates import cluster_toml

PORT_RANGE_ENV = "RELAY_PORT_RANGE"  # "FIRST-LAST": where free_ports looks


def free_ports(count: int, taken: frozenset[int] = frozenset()) -> list[int]:
    """Ports nothing listens on right now, all distinct, chosen below the kernel's ephemeral
    range so that no outgoing connection can take one before the node binds it, or in
    ``$RELAY_PORT_RANGE`` (``FIRST-LAST``; parallel test workers each get a range of their own,
    so that one never takes a port another's stopped node will bind again); never one of
    ``taken`` (chosen before and not bound yet)."""
    first, last = port_range()
    ports: list[int] = []
    rng = random.SystemRandom()
    while len(ports) < count:
        port = rng.randint(first, last)
        if port in ports or port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def port_range() -> tuple[int, int]:
    """The ports ``free_ports`` chooses from."""
    given = os.environ.get(PORT_RANGE_ENV, "")
    if given:
        first, _, last = given.partition("-")
        return int(first), int(last)
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return 10_000, max(10_001, low) - 1


def write_config(
    folder: Path,
    nodes: int,
    overrides: Mapping[str, int | str] | None = None,
    hosts: Mapping[int, str] | None = None,
    streams: str = "",
) -> Path:
    """A config for ``nodes`` nodes on free ports (4 per node), written into ``folder``, with
    CURVE keys in ``folder/keys`` (unless ``overrides`` say ``security = "none"``); each node
    on 127.0.0.1 or on its address in ``hosts``; ``streams``: ``[[stream]]`` blocks (TOML)."""
    ports = free_ports(4 * nodes)
    keys = write_cluster(folder / "keys", list(range(1, nodes + 1)))
    text = cluster_toml(nodes, "127.0.0.1", 0, name=f"test{nodes}", keys=keys)
    for i in range(1, nodes + 1):
        if hosts:  # the node tables come in id order: the first loopback host left is node i's
            text = text.replace('host = "127.0.0.1"', f'host = "{hosts[i]}"', 1)
        mesh, client, metrics, http = ports[4 * (i - 1) : 4 * i]
        text = text.replace(f"mesh_port = {i}\n", f"mesh_port = {mesh}\n", 1)
        text = text.replace(f"client_port = {100 + i}\n", f"client_port = {client}\n", 1)
        text = text.replace(f"metrics_port = {200 + i}\n", f"metrics_port = {metrics}\n", 1)
        text = text.replace(f"http_port = {400 + i}\n", f"http_port = {http}\n", 1)
    for key, value in (overrides or {}).items():
        setting = f"{key} = {json.dumps(value)}"
        lines = text.splitlines()
        found = [i for i, line in enumerate(lines) if line.split("=")[0].strip() == key]
        for i in found:
            lines[i] = setting
        if not found:  # a key the template leaves out: the first in [cluster]
            lines.insert(lines.index("[cluster]") + 1, setting)
        text = "\n".join(lines) + "\n"
    text = text.replace(f'run_dir = ".relay/test{nodes}"', 'run_dir = "run"') + streams
    path = folder / "cluster.toml"
    path.write_text(text)
    return path


class LocalCluster:
    def __init__(
        self,
        folder: Path,
        nodes: int = 3,
        overrides: Mapping[str, int | str] | None = None,
        node_args: dict[int, list[str]] | None = None,
        admin: bool = False,
        netns: bool = False,
        streams: str = "",
    ) -> None:
        """``netns``: every node in a network namespace of its own (``NetnsLayout``), with
        its own address; the namespaces and the bridge are removed by ``close``."""
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        ids = list(range(1, nodes + 1))
        self.netns = NetnsLayout.new(ids) if netns else None
        hosts = {i: self.netns.address(i) for i in ids} if self.netns else None
        self.config_path = write_config(folder, nodes, overrides, hosts, streams)
        self.config: ClusterConfig = load(self.config_path)
        self.node_args = {n: list(args) for n, args in (node_args or {}).items()}
        self.admin_ports: dict[int, int] = {}
        if admin:
            chosen = frozenset(
                port
                for n in self.config.nodes
                for port in (n.mesh_port, n.client_port, n.metrics_port, n.http_port)
                if port is not None
            )
            for spec, port in zip(self.config.nodes, free_ports(nodes, chosen), strict=True):
                self.admin_ports[spec.id] = port
                args = ["--admin-port", str(port), "--admin-host", self.admin_host(spec.id)]
                self.node_args.setdefault(spec.id, []).extend(args)
        if self.netns is not None:
            self.netns.create()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        keys_dir = self.config.keys_dir()
        self.admin_pair = keys.read(keys.secret_file(keys_dir, "admin"))
        self.client_pair = keys.read(keys.secret_file(keys_dir, "client"))

    # --- processes ----------------------------------------------------------------------

    def start(self, node_id: int | None = None) -> None:
        for spec in self.config.nodes:
            if node_id is not None and spec.id != node_id:
                continue
            log = (self.folder / f"node-{spec.id}.log").open("ab")
            self.procs[spec.id] = subprocess.Popen(
                [
                    *(self.netns.exec_prefix(spec.id) if self.netns else []),
                    sys.executable,
                    "-m",
                    "relay",
                    "node",
                    "--config",
                    str(self.config_path),
                    "--id",
                    str(spec.id),
                    *self.node_args.get(spec.id, []),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=child_env(),
            )
            log.close()

    def send_signal(self, node_id: int, sig: int) -> None:
        proc = self.procs[node_id]
        if proc.poll() is None:
            os.kill(proc.pid, sig)

    def stop(self, node_id: int, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        proc = self.procs.pop(node_id, None)
        if proc is None:
            return
        if proc.poll() is None:
            if sig != signal.SIGKILL:
                os.kill(proc.pid, signal.SIGCONT)
            proc.send_signal(sig)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def close(self) -> None:
        for node_id in list(self.procs):
            self.stop(node_id, signal.SIGKILL)
        if self.netns is not None:
            self.netns.remove()

    def admin_host(self, node_id: int) -> str:
        """Where a node's admin port listens: loopback, or its own address in a namespace
        (whose loopback the test's namespace cannot reach)."""
        return self.netns.address(node_id) if self.netns else "127.0.0.1"

    def net_faults(self, node_id: int, blocked_from: list[int], loss: float) -> None:
        """Real network faults on a namespaced cluster: node ``node_id``'s kernel drops every
        packet from ``blocked_from`` and a ``loss`` fraction of its peers' mesh packets."""
        assert self.netns is not None, "network faults need LocalCluster(netns=True)"
        ports = [s.mesh_port for s in self.config.nodes if s.id != node_id]
        self.netns.set_faults(node_id, blocked_from, loss, ports)

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def fault(self, node_id: int, **settings: object) -> dict[str, object]:
        """Set fault hooks on a node started with an admin port (``admin=True``)."""
        return self._admin(node_id, "set", settings)

    def tamper(self, node_id: int, stream: str, seq: int = 0) -> None:
        """Corrupt the payload a node holds at ``seq`` (0: its last verified tx)."""
        self._admin(node_id, "tamper", {"stream": stream, "seq": seq})

    def heal(self) -> None:
        for node_id in self.procs:
            self._admin(node_id, "clear", None)

    def _admin(self, node_id: int, command: str, argument: object) -> dict[str, object]:
        reply: dict[str, object] = admin_call(
            f"{self.admin_host(node_id)}:{self.admin_ports[node_id]}",
            command,
            argument,
            node_key=self.config.node(node_id).public_key,
            admin_pair=self.admin_pair,
        )
        if not reply["ok"]:
            raise ValueError(reply["error"])
        return reply

    def secure(self, sock: zmq.Socket[Any], node_id: int, pair: KeyPair | None = None) -> None:
        """CURVE options for a raw socket about to connect to a port of ``node_id`` (as the
        cluster's client, or as ``pair``); nothing where the cluster runs unencrypted."""
        key = self.config.node(node_id).public_key
        if key is not None:
            connect_to(sock, key, pair or self.client_pair)

    def node_pair(self, node_id: int) -> KeyPair:
        """Node ``node_id``'s own key pair: what a test playing a compromised node holds."""
        return keys.read(keys.secret_file(self.config.keys_dir(), f"node-{node_id}"))

    # --- waiting ------------------------------------------------------------------------

    def status(self, node_id: int, brief: bool = False) -> NodeStatus | None:
        return query_status(self.config.node(node_id), 500, self.client_pair, brief)

    def wait_serving(self, node_ids: list[int] | None = None, timeout_s: float = 20.0) -> None:
        """Until every named node (default: every started node) answers and is serving."""
        wanted = node_ids or list(self.procs)
        deadline = time.monotonic() + timeout_s
        pending = set(wanted)
        while pending and time.monotonic() < deadline:
            for node_id in list(pending):
                proc = self.procs.get(node_id)
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(
                        f"node {node_id} exited with {proc.returncode}; log:\n" + self.log(node_id)
                    )
                status = self.status(node_id, brief=True)
                if status and status.state == "serving" and len(status.peers_up) >= len(wanted) - 1:
                    pending.discard(node_id)
            time.sleep(0.05)
        if pending:
            raise TimeoutError(f"nodes {sorted(pending)} not serving after {timeout_s} s")

    def log(self, node_id: int) -> str:
        path = self.folder / f"node-{node_id}.log"
        return path.read_text() if path.exists() else ""
