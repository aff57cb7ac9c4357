"""Hostile admin requests and config mistakes that used to crash a node or print a bare errno:
each now gets a clear error, and the node keeps serving. Every test but the port-in-use one
runs a real cluster: slow."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import msgpack
import pytest
import zmq
from click.testing import CliRunner

from relay import Producer
from relay.cli import main
from relay.runtime.admin import admin_call
from relay.runtime.local_cluster import LocalCluster
from relay.runtime.node import NodeRuntime, StartupError


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("admin"), nodes=3, admin=True) as made:
        made.start()
        made.wait_serving()
        yield made


def raw_admin(cluster: LocalCluster, node_id: int, *frames: bytes) -> dict[str, object]:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        cluster.secure(sock, node_id, cluster.admin_pair)
        sock.connect(f"tcp://127.0.0.1:{cluster.admin_ports[node_id]}")
        sock.send_multipart(list(frames))
        assert sock.poll(5000), "the node did not answer"
        reply: dict[str, object] = msgpack.unpackb(sock.recv(), raw=False)
        return reply
    finally:
        sock.close(linger=0)


def admin(cluster: LocalCluster, node_id: int, command: str, argument: object) -> dict[str, Any]:
    """An admin call to ``node_id`` with the node's key and the cluster's admin key."""
    address = f"127.0.0.1:{cluster.admin_ports[node_id]}"
    key = cluster.config.node(node_id).public_key
    return admin_call(address, command, argument, 3000, key, cluster.admin_pair)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "argument", "why"),
    [
        ("tamper", {"stream": "orders", "seq": [1, 2]}, "seq is an integer"),
        ("set", {"clock_offset_ms": 1 << 62}, "clock_offset_ms must be an integer from"),
        ("set", {"delay_ms": 10**9}, "delay_ms must be an integer from"),
        ("set", {"block_from": [1 << 40]}, "block_from names node ids"),
        ("set", {"loss_in": "all"}, "loss_in must be a fraction"),
        ("nuke", None, "commands:"),
    ],
)
def test_a_hostile_admin_request_gets_an_error_and_the_node_serves_on(
    cluster: LocalCluster, command: str, argument: object, why: str
) -> None:
    with Producer(config=cluster.config_path) as producer:
        producer.publish("orders", b"before")
    reply = admin(cluster, 1, command, argument)
    assert reply["ok"] is False and why in str(reply["error"])
    with Producer(config=cluster.config_path, node=1) as producer:
        assert producer.publish("orders", b"after").seq > 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "frame", [b"\xc1 not msgpack", b"\x91" * 60_000, msgpack.packb([1, 2, 3]), b""]
)
def test_a_malformed_admin_frame_gets_an_error(cluster: LocalCluster, frame: bytes) -> None:
    reply = raw_admin(cluster, 2, frame)
    assert reply["ok"] is False
    assert cluster.status(2) is not None and cluster.status(2).state == "serving"


@pytest.mark.slow
def test_a_request_of_several_frames_gets_an_error_and_the_node_serves_on(
    cluster: LocalCluster,
) -> None:
    reply = raw_admin(cluster, 1, msgpack.packb(["status", None]), b"second")
    assert reply == {"ok": False, "error": "an admin request is one frame, not 2"}
    assert admin(cluster, 1, "status", None)["ok"] is True


@pytest.mark.slow
def test_an_oversized_admin_frame_is_dropped_and_the_node_serves_on(
    cluster: LocalCluster,
) -> None:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        cluster.secure(sock, 3, cluster.admin_pair)
        sock.connect(f"tcp://127.0.0.1:{cluster.admin_ports[3]}")
        sock.send(b"x" * (1 << 20))  # over the 64 KiB an admin request may take: disconnected
        assert not sock.poll(500)
    finally:
        sock.close(linger=0)
    assert admin(cluster, 3, "status", None)["ok"] is True


def test_a_metrics_port_in_use_names_the_key_and_the_address(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", nodes=3) as made:
        spec = made.config.node(1)
        blocker = socket.socket()
        try:
            blocker.bind((spec.host, spec.metrics_port))
            blocker.listen()
            with pytest.raises(StartupError) as info:
                NodeRuntime(made.config, 1)
        finally:
            blocker.close()
    message = str(info.value)
    assert "metrics_port" in message and f"{spec.host}:{spec.metrics_port}" in message
    assert "Address already in use" in message


@pytest.mark.slow
def test_metrics_can_listen_on_an_interface_of_their_own(tmp_path: Path) -> None:
    """/metrics listened wherever the node's client port did; metrics_host moves it alone."""
    with LocalCluster(tmp_path / "c", nodes=3) as made:
        port = made.config.node(1).metrics_port
        text = made.config_path.read_text()
        line = f"metrics_port = {port}\n"
        made.config_path.write_text(text.replace(line, line + 'metrics_host = "127.0.0.2"\n', 1))
        made.start()
        made.wait_serving()
        assert b"relay_node_info" in urlopen(f"http://127.0.0.2:{port}/metrics", timeout=5).read()
        with pytest.raises(OSError):
            urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


@pytest.mark.slow
def test_metrics_can_require_a_bearer_token(tmp_path: Path) -> None:
    """Anyone who reached the port read every node's metrics; a token now guards them, and
    the file holds only its hash."""
    token_file = tmp_path / "metrics.token"
    made_token = CliRunner().invoke(main, ["keys", "metrics-token", "--out", str(token_file)])
    assert made_token.exit_code == 0, made_token.output
    digest = made_token.output.split('"')[1]
    token = token_file.read_text().strip()
    assert token not in made_token.output and (token_file.stat().st_mode & 0o777) == 0o600
    with LocalCluster(tmp_path / "c", nodes=3, overrides={"metrics_token_sha256": digest}) as made:
        made.start()
        made.wait_serving()
        url = f"http://127.0.0.1:{made.config.node(1).metrics_port}/metrics"
        for header in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
            with pytest.raises(HTTPError) as refused:
                urlopen(Request(url, headers=header), timeout=5)
            assert refused.value.code == 401
        scraped = urlopen(Request(url, headers={"Authorization": f"Bearer {token}"}), timeout=5)
        assert b"relay_node_info" in scraped.read()
