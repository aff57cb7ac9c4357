"""The command line as a kcat or nats user reaches for it (issue 13): --servers and
RELAY_SERVERS, publish as input arrives and --file, consume's --last, --to, -e and --format,
stream ls and info, and a local cluster from --nodes N with no file. Only the output formats
run without a cluster; every other test is slow (node processes, and the CLI as a process)."""

from __future__ import annotations

import base64
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from waits import until

from relay.cli import main
from relay.cli.formats import FormatError, formatter
from relay.client.consumer import Transaction
from relay.client.producer import BATCH_MAX, WINDOW
from relay.runtime.local_cluster import LocalCluster

BIG_SEQ = (1 << 62) + 12345  # a flake seq: above 2^53, as every real one is


def row(payload: bytes, key: bytes | None = None) -> Transaction:
    return Transaction("s", BIG_SEQ, 2, payload, b"\x01" * 32, "p", 1, key, (("h", b"\xff"),))


def test_raw_writes_the_payload_bytes_and_nothing_else() -> None:
    binary = bytes(range(256))
    assert formatter("raw")(row(binary)) == binary


def test_json_keeps_seqs_exact_and_binary_as_base64() -> None:
    found = json.loads(formatter("json")(row(b"\xff\x00", key=b"k")))
    assert found["seq"] == str(BIG_SEQ)  # a string: JavaScript and jq would round it
    assert base64.b64decode(found["payload_b64"]) == b"\xff\x00" and "payload" not in found
    assert found["key"] == "k" and found["headers"] == [{"name": "h", "value_b64": "/w=="}]
    assert json.loads(formatter("json", seq_numbers=True)(row(b"x")))["seq"] == BIG_SEQ


def test_a_template_names_fields_as_kcat_does() -> None:
    out = formatter("%t %s %k %h %S %%\\t%v\\n")(row(b"value", key=b"key"))
    assert out == b"s %d key h=\xff 5 %%\tvalue\n" % BIG_SEQ
    assert formatter("base64")(row(b"\xff")) == b"/w==\n"
    for bad in ("xml", "%q", "ends in %", "no fields\\n"):
        with pytest.raises(FormatError):
            formatter(bad)


@pytest.fixture(scope="module")
def cluster(cluster3: LocalCluster) -> LocalCluster:
    return cluster3


def servers(cluster: LocalCluster) -> str:
    """Every node's client address with its key, as --servers takes them."""
    return ",".join(f"{n.public_key}@127.0.0.1:{n.client_port}" for n in cluster.config.nodes)


def cli(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> bytes:
    result = CliRunner().invoke(main, list(args), env=env, input=stdin)
    assert result.exit_code == 0, result.output
    return result.stdout_bytes


@pytest.mark.slow
def test_servers_and_relay_servers_reach_the_cluster_without_a_file(
    cluster: LocalCluster,
) -> None:
    key = str(cluster.config.keys_dir() / "client.key_secret")  # the cluster admits only it
    refused = CliRunner().invoke(
        main, ["publish", "--servers", servers(cluster), "--stream", "cli.a", "x"]
    )
    assert refused.exit_code != 0 and "every node refused this client's key" in refused.output
    cli(
        "publish",
        "--servers",
        servers(cluster),
        "--client-key",
        key,
        "--stream",
        "cli.a",
        "one",
        "two",
    )
    env = {"RELAY_SERVERS": servers(cluster), "RELAY_CLIENT_KEY": key}
    cli("publish", "--stream", "cli.a", "three", env=env)
    out = cli("consume", "--stream", "cli.a", "-e", "--format", "%v\\n", env=env)
    assert out.split() == [b"one", b"two", b"three"]
    status = json.loads(cli("cluster", "status", "--json", env=env))
    assert sorted(status) == ["1", "2", "3"]
    none = CliRunner().invoke(main, ["consume", "--stream", "cli.a"], env={"RELAY_SERVERS": ""})
    assert none.exit_code != 0 and "--servers" in none.output


@pytest.mark.slow
def test_consume_last_to_and_exit_at_end(cluster: LocalCluster) -> None:
    config = str(cluster.config_path)
    lines = b"\n".join(b"m%d" % i for i in range(30)) + b"\n"
    acks = cli("publish", "--config", config, "--stream", "cli.b", stdin=lines).split(b"\n")
    seqs = [int(line.split()[0]) for line in acks if line]
    assert len(seqs) == 30
    values = "--format", "%v\\n"
    last = cli("consume", "--config", config, "--stream", "cli.b", "--last", "5", "-e", *values)
    assert last.split() == [b"m%d" % i for i in range(25, 30)]
    upto = cli("consume", "--config", config, "--stream", "cli.b", "--to", str(seqs[9]), *values)
    assert upto.split() == [b"m%d" % i for i in range(10)]
    more = cli("consume", "--config", config, "--stream", "cli.b", "--last", "99", "-e", *values)
    assert len(more.split()) == 30  # fewer than asked for: all of them
    empty = cli("consume", "--config", config, "--stream", "cli.never", "-e")
    assert empty == b""


@pytest.mark.slow
def test_a_binary_file_round_trips_through_publish_and_consume(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    config = str(cluster.config_path)
    data = random.Random(7).randbytes(5000) + b"\n\r\x00"
    (tmp_path / "in.bin").write_bytes(data)
    cli("publish", "--config", config, "--stream", "cli.c", "--file", str(tmp_path / "in.bin"))
    got = cli("consume", "--config", config, "--stream", "cli.c", "--last", "1", "-e")
    assert got == b"%s " % got.split(b" ")[0] + data + b"\n"  # the default: '%s %v\n'
    raw = cli("consume", "--config", config, "--stream", "cli.c", "-e", "--format", "raw")
    assert raw == data


@pytest.mark.slow
def test_stream_ls_and_info_show_what_every_node_holds(cluster: LocalCluster) -> None:
    config = str(cluster.config_path)
    cli("publish", "--config", config, "--stream", "cli.d", "a", "b", "c")
    listed = [json.loads(r) for r in cli("stream", "ls", "--config", config, "--json").splitlines()]
    mine = next(r for r in listed if r["stream"] == "cli.d")
    assert mine["replicas"] == [1, 2, 3] and mine["txs"] == 3 and mine["bytes"] > 0
    info = until(  # every replica verifies the last one within a heartbeat or two
        lambda: json.loads(cli("stream", "info", "cli.d", "--config", config, "--json"))["nodes"],
        lambda found: len({n["verified_seq"] for n in found.values()}) == 1,
        timeout_s=10,
    )
    assert sorted(info) == ["1", "2", "3"]
    assert {n["txs"] for n in info.values()} == {3}
    assert len({n["verified_seq"] for n in info.values()}) == 1
    text = cli("stream", "info", "cli.d", "--config", config).decode()
    assert "transactions:  3" in text and "first:" in text
    missing = CliRunner().invoke(main, ["stream", "info", "nope", "--config", config])
    assert missing.exit_code != 0 and "no node" in missing.output


@pytest.mark.slow
def test_publish_sends_each_line_as_it_arrives(cluster: LocalCluster) -> None:
    """As `tail -f app.log | relay publish` needs: a line's ack comes back while the input
    is still open."""
    command = [sys.executable, "-m", "relay", "publish", "--config", str(cluster.config_path)]
    proc = subprocess.Popen(
        [*command, "--stream", "cli.e"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for i in range(3):
            proc.stdin.write(b"line %d\n" % i)
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 20)
            assert ready, f"no ack for line {i} while the input stayed open"
            assert proc.stdout.readline().split()[0].isdigit()
        proc.stdin.close()
        assert proc.wait(20) == 0
    finally:
        proc.kill()
        proc.wait()


def free_base_port(count: int) -> int:
    """A base port whose mesh, client and metrics ports for ``count`` nodes are all free."""
    for _ in range(200):
        base = random.randrange(20_000, 30_000)
        ports = [base + offset + i for offset in (0, 100, 200) for i in range(1, count + 1)]
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free range of ports")


@pytest.mark.slow
def test_cluster_up_with_nodes_writes_its_own_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    base = str(free_base_port(3))
    try:
        up = CliRunner().invoke(main, ["cluster", "up", "--nodes", "3", "--base-port", base])
        assert up.exit_code == 0, up.output
        assert "(config .relay/local3/cluster.toml)" in up.output
        assert (tmp_path / ".relay" / "local3" / "cluster.toml").exists()
        status = json.loads(cli("cluster", "status", "--nodes", "3", "--json"))
        assert all(s is not None for s in status.values())
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "relay",
                "cluster",
                "status",
                "--nodes",
                "3",
                "--watch",
                "--interval",
                "0.2",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert watch.stdout is not None
            headers = 0
            deadline = time.monotonic() + 30
            while headers < 3 and time.monotonic() < deadline:  # shown again and again
                headers += watch.stdout.readline().startswith("node ")
            assert headers == 3
        finally:
            watch.kill()
            watch.wait()
    finally:
        down = CliRunner().invoke(main, ["cluster", "down", "--nodes", "3"])
    assert down.exit_code == 0 and down.output.count("stopped") == 3


@pytest.mark.slow
def test_the_example_file_starts_a_working_cluster_on_a_fresh_checkout(tmp_path: Path) -> None:
    """Its public keys had no secret halves: `relay cluster up` refused it. Its keys are now
    made on first use (local_keys), and its clients are admitted by key."""
    base = free_base_port(3)
    text = (Path(__file__).resolve().parent.parent / "cluster.example.toml").read_text()
    for offset in (0, 100, 200):
        for i in (1, 2, 3):
            text = text.replace(f" = {7100 + offset + i}\n", f" = {base + offset + i}\n")
    path = tmp_path / "cluster.example.toml"
    path.write_text(text)
    config = ["--config", str(path)]
    try:
        up = CliRunner().invoke(main, ["cluster", "up", *config])
        assert up.exit_code == 0, up.output
        assert (tmp_path / ".relay" / "local3" / "keys" / "client.key_secret").exists()
        assert cli("publish", *config, "--stream", "orders", "hello").split()[0].isdigit()
        found = cli("consume", *config, "--stream", "orders", "--from", "earliest", "-e")
        assert found.split()[1] == b"hello"
    finally:
        down = CliRunner().invoke(main, ["cluster", "down", *config])
    assert down.exit_code == 0 and down.output.count("stopped") == 3


def bench_command(cluster: LocalCluster, *args: str) -> list[str]:
    config = str(cluster.config_path)
    return [sys.executable, "-m", "relay", "bench", "--config", config, "--json", *args]


def bench(cluster: LocalCluster, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        bench_command(cluster, *args), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.slow
def test_bench_runs_several_producers_and_consumers_end_to_end(cluster: LocalCluster) -> None:
    found = bench(
        cluster,
        "--stream",
        "bench.e2e",
        "--count",
        "2000",
        "--rate",
        "2000",
        "--producers",
        "2",
        "--consumers",
        "2",
    )
    assert (found["acked"], found["failed"], found["consumed"]) == (2000, 0, 4000)
    # unless told otherwise, a bench producer keeps in flight what a Producer does
    assert (found["settings"]["window"], found["settings"]["batch"]) == (WINDOW, BATCH_MAX)
    assert 0 < found["e2e_p50_ms"] <= found["e2e_p99_ms"] <= found["e2e_max_ms"] < 60_000


def wait_for_txs(cluster: LocalCluster, stream: str, count: int, timeout_s: float = 60) -> None:
    """Until node 1's log holds ``count`` txs of ``stream`` (its status says so)."""

    def held() -> int:
        status = cluster.status(1)
        found = status.stream(stream) if status else None
        return found.log_txs if found is not None else 0

    reached = until(held, lambda txs: txs >= count, timeout_s)
    assert reached >= count, f"{stream} reached {reached} txs, not {count}"


@pytest.mark.slow
def test_bench_at_a_rate_charges_a_stall_to_every_message_it_delayed(
    cluster: LocalCluster,
) -> None:
    """Coordinated omission: with one publish in flight, a 0.7 s stall of every node delays
    the ~140 messages due meanwhile; measured from their due times, p99 shows it (measured
    from their actual sends, only the one in flight would)."""
    proc = subprocess.Popen(
        bench_command(
            cluster,
            "--stream",
            "bench.co",
            "--count",
            "600",
            "--rate",
            "200",
            "--window",
            "1",
            "--batch",
            "1",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        try:
            wait_for_txs(cluster, "bench.co", 150)  # about 0.75 s of sending
            for node_id in (1, 2, 3):
                os.kill(cluster.procs[node_id].pid, signal.SIGSTOP)
            time.sleep(0.7)  # not a wait: the stall itself, which the bench must measure
        finally:
            for node_id in (1, 2, 3):
                os.kill(cluster.procs[node_id].pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()  # stopped whatever failed above (a no-op once it exited)
        proc.wait()
    assert proc.returncode == 0, err
    found = json.loads(out)
    assert found["acked"] == 600 and found["p99_ms"] > 300, found
