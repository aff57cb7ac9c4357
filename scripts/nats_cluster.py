"""Three ``nats-server`` processes clustered on 127.0.0.1 (free ports, stores in a given
folder), JetStream on, for the peer measures (``bench_nats.py``, ``bench_queue_nats.py``).

``sync_always`` sets the servers' ``sync_interval: always`` (fsync before a publish is
acknowledged; by default JetStream syncs every 2 minutes, so a file-store ack means "in a
majority's page caches").
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nats.js import api
from nats.js.client import JetStreamContext


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@contextmanager
def nats_cluster(server: str, folder: Path, sync_always: bool) -> Iterator[list[str]]:
    """The client URLs of three clustered servers, stopped (and waited for) on exit."""
    ports = free_ports(6)
    clients, routes = ports[:3], ports[3:]
    sync = ", sync_interval: always" if sync_always else ""
    procs = []
    try:
        for i in range(3):
            others = ", ".join(f"nats-route://127.0.0.1:{routes[j]}" for j in range(3) if j != i)
            conf = folder / f"n{i + 1}.conf"
            conf.write_text(
                f'server_name: n{i + 1}\nlisten: "127.0.0.1:{clients[i]}"\n'
                f'jetstream {{ store_dir: "{folder / f"n{i + 1}"}"{sync} }}\n'
                f'cluster {{ name: bench, listen: "127.0.0.1:{routes[i]}", routes: [{others}] }}\n'
            )
            log = (folder / f"n{i + 1}.log").open("wb")
            procs.append(subprocess.Popen([server, "-c", str(conf)], stdout=log, stderr=log))
        for port in clients:
            listening(port, procs)
        yield [f"nats://127.0.0.1:{p}" for p in clients]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def listening(port: int, procs: list[subprocess.Popen[bytes]]) -> None:
    """Until a server takes connections on ``port`` (at most 30 s, while every server runs)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"no nats-server listens on {port}: see its log") from None
            time.sleep(0.05)


async def ready(js: JetStreamContext) -> None:
    """Until the cluster has a JetStream meta leader (a stream can be made), at most 60 s."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await js.add_stream(api.StreamConfig(name="PROBE", subjects=["probe"], num_replicas=3))
            await js.delete_stream("PROBE")
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
