"""Durable streams on real node processes and real disks: every node SIGKILLed at once under
load, restarts from the log, a restarted node fetching only what it lacks."""

import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq
from waits import until

from relay import Consumer, Producer
from relay.client.producer import Ack
from relay.config import load
from relay.core.status import NodeStatus, StreamStatus
from relay.errors import DataLossError
from relay.runtime.local_cluster import LocalCluster
from relay.wire.client import publish_request

pytestmark = pytest.mark.slow


def read_back(cluster: LocalCluster, stream: str, node_id: int, upto: int) -> dict[int, bytes]:
    """seq -> digest of every tx up to ``upto`` that ``node_id`` serves."""
    found: dict[int, bytes] = {}
    with Consumer(stream, config=cluster.config_path, node=node_id) as consumer:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for tx in consumer.poll(timeout_s=1.0):
                found[tx.seq] = tx.digest
                if tx.seq >= upto:
                    return found
    raise AssertionError(f"node {node_id} served {len(found)} txs, never reaching seq {upto}")


def test_every_node_killed_at_once_under_load_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        acked: list[Ack] = []
        running = threading.Event()
        running.set()

        def publish() -> None:
            with Producer(config=cluster.config_path, timeout_s=3, window=8) as producer:
                futures = []
                i = 0
                while running.is_set():
                    futures.append(producer.send("orders", b"order %d" % i, key=b"k%d" % (i % 7)))
                    i += 1
                    if i % 64 == 0:
                        producer.poll(1)
                producer.flush()
                acked.extend(f.result() for f in futures if f.done() and not f.failed())

        thread = threading.Thread(target=publish)
        thread.start()

        def verified(status: NodeStatus | None) -> bool:
            return status is not None and bool(getattr(status.stream("orders"), "verified_seq", 0))

        status = until(  # until node 1 verified some load (or stopped answering)
            lambda: cluster.status(1), lambda s: s is None or verified(s), timeout_s=30
        )
        if verified(status):
            time.sleep(1.0)  # not a wait: the load runs on, a second of publishes in flight
        for node_id in (1, 2, 3):  # every node at the same moment: no fsync after this
            cluster.send_signal(node_id, signal.SIGKILL)
        running.clear()
        thread.join(60)
        assert not thread.is_alive()
        assert len(acked) > 500, f"only {len(acked)} publishes were acknowledged before the kill"
        for node_id in (1, 2, 3):
            cluster.stop(node_id, signal.SIGKILL)
        cluster.start()
        cluster.wait_serving(timeout_s=30)
        last = max(a.seq for a in acked)
        for node_id in (1, 2, 3):
            held = read_back(cluster, "orders", node_id, last)
            lost = [a.seq for a in acked if held.get(a.seq) != a.digest]
            assert not lost, f"node {node_id} lost {len(lost)} acknowledged txs: {lost[:5]}"


def test_a_restarted_node_fetches_only_what_it_lacks(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:
            for i in range(2000):
                producer.send("orders", b"before %d" % i)
            producer.flush()
            cluster.stop(3, signal.SIGKILL)
            futures = [producer.send("orders", b"while down %d" % i) for i in range(300)]
            producer.flush()
            last = max(f.result().seq for f in futures)
        # node 3's log so far is its first life's, which may have taken the stream's start by
        # a sync from seq 0 (a replica that first heard of the stream after peers verified)
        first_life = len(cluster.log(3))
        cluster.start(3)
        cluster.wait_serving([3], timeout_s=30)
        held = read_back(cluster, "orders", 3, last)
        assert len(held) == 2300
        log = cluster.log(3)[first_life:]
        restored = re.findall(r"restored 1 streams \((\d+) txs in memory\)", log)
        assert restored and int(restored[-1]) > 1000, "node 3 came back with its log"
        synced = sum(int(n) for n in re.findall(r"sync: orders: adopted (\d+) verified", log))
        assert "snapshot" not in log
        assert synced <= 300, f"node 3 fetched {synced} txs by sync; it lacked 300"


def test_a_node_on_a_replaced_disk_recovers_once_every_other_replica_was_heard(
    tmp_path: Path,
) -> None:
    """Node 3's data directory is lost and it starts again with --recover while node 2 is
    down: it learns of the stream from node 1 but stays recovering (it counts in no cut, so
    its own old epoch cannot be cut without node 2). Once node 2 is back, publishing goes on,
    the first txs verified recover the stream, and node 3 serves everything."""
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        assert "start it again with --recover" in cluster.log(1), "a first start says how"
        with Producer(config=cluster.config_path, node=1) as producer:
            for i in range(500):
                producer.send("orders", b"before %d" % i)
            producer.flush()
        cluster.stop(3, signal.SIGKILL)
        cluster.stop(2)
        shutil.rmtree(cluster.config.data_dir(3))
        first_life = len(cluster.log(3))
        cluster.node_args[3] = [*cluster.node_args.get(3, []), "--recover"]
        cluster.start(3)
        cluster.wait_serving([3], timeout_s=30)

        def orders_on_3() -> StreamStatus | None:
            status = cluster.status(3)
            return status.stream("orders") if status else None

        seen = until(orders_on_3, lambda s: s is not None, 20)
        assert seen is not None and seen.recovering, seen
        cluster.start(2)
        cluster.wait_serving([2], timeout_s=30)
        with Producer(config=cluster.config_path, node=3) as producer:
            futures = [producer.send("orders", b"after %d" % i) for i in range(100)]
            producer.flush()
            last = max(f.result().seq for f in futures)
        # the first txs verified after its start pass every seq it may have voted on
        done = until(orders_on_3, lambda s: s is not None and not s.recovering, 30)
        assert done is not None and not done.recovering, done
        assert len(read_back(cluster, "orders", 3, last)) == 600
        assert "--recover" not in cluster.log(3)[first_life:], "told: it does not warn"


def test_a_consumer_from_earliest_reads_ten_memory_rings_back(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 3, overrides={"buffer_txs_max": 1000}) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:
            futures = [producer.send("orders", b"tx %d" % i) for i in range(10_000)]
            producer.flush()
            acks = [f.result() for f in futures]
        for node_id in (1, 3):
            with Consumer("orders", config=cluster.config_path, node=node_id) as consumer:
                txs = consumer.take(10_000, timeout_s=60)
            assert [(t.seq, t.digest) for t in txs] == sorted((a.seq, a.digest) for a in acks)


def relay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay", *args], capture_output=True, text=True, timeout=60
    )


def test_a_flipped_byte_and_a_torn_tail_are_found_and_fetched_again(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 3, overrides={"segment_bytes": 4096}) as cluster:
        cfg = str(cluster.config_path)
        cluster.start()
        cluster.wait_serving()
        acks = []
        with Producer(config=cluster.config_path) as producer:
            for batch in range(30):  # many small writes: the log rolls
                futures = [
                    producer.send("orders", b"tx %d" % (batch * 100 + i)) for i in range(100)
                ]
                producer.flush()
                acks += [f.result() for f in futures]
        cluster.stop(3)
        cluster.stop(2, signal.SIGKILL)
        logs = cluster.config.data_dir(3) / "streams" / "s.orders"
        segments = sorted(logs.glob("*.seg"))
        assert segments, "node 3's log rolled"
        sealed = segments[len(segments) // 2]
        data = bytearray(sealed.read_bytes())
        data[len(data) // 2] ^= 0x20
        sealed.write_bytes(bytes(data))
        active = next((cluster.config.data_dir(2) / "streams" / "s.orders").glob("*.open"))
        active.write_bytes(active.read_bytes()[:-7])  # a write cut short by the crash
        for node_id, found in ((3, sealed.name), (2, active.name)):
            out = relay_cli("log", "verify", "--config", cfg, "--node", str(node_id))
            assert out.returncode == 1, out
            assert found in out.stderr and "offset" in out.stderr
        out = relay_cli("log", "verify", "--config", cfg, "--node", "1")
        assert out.returncode == 0 and "orders: 3000 records ok" in out.stdout
        cluster.start(2)
        cluster.start(3)
        cluster.wait_serving(timeout_s=30)
        assert "recovery:" in cluster.log(3) and sealed.name in cluster.log(3)
        for node_id in (2, 3):
            with Consumer("orders", config=cluster.config_path, node=node_id) as consumer:
                txs = consumer.take(3000, timeout_s=60)
            got = [(t.seq, t.digest) for t in txs]
            want = sorted((a.seq, a.digest) for a in acks)  # a resent batch may take later seqs
            assert got == want, (node_id, txs[0], len(txs))
        listing = relay_cli("log", "ls", "--config", cfg, "--node", "3")
        assert listing.returncode == 0 and "sealed" in listing.stdout


def raw_publish(cluster: LocalCluster, node_id: int, payload: bytes) -> list[object]:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    cluster.secure(sock, node_id)
    sock.connect(cluster.config.node(node_id).client_address)
    try:
        sock.send(publish_request(1, "orders", "raw", [[1, payload, None, []]]))
        assert sock.poll(10_000), "no answer"
        reply: list[object] = msgpack.unpackb(sock.recv(), raw=False)
        return reply
    finally:
        sock.close()


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_a_full_disk_acknowledges_nothing_and_recovers_when_space_returns(
    tmp_path: Path, fsync: str
) -> None:
    """With ``fsync = "never"`` a node whose disk had filled up never took a write again
    (each retry started below the mark its log held) and went on refusing publishes."""
    overrides = {"publish_timeout_ms": 2000, "fsync": fsync}
    cluster = LocalCluster(tmp_path / "c", 3, overrides=overrides)
    full = cluster.config.data_dir(3)
    full.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(full)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:  # not root, or no mount(8): say which
        pytest.skip(f"a small tmpfs is needed (root): mount said {mounted.stderr.strip()!r:.200}")
    try:
        with cluster:
            cluster.start()
            cluster.wait_serving()
            with Producer(config=cluster.config_path, node=1) as producer:
                deadline = time.monotonic() + 60
                while not (cluster.status(3) or fail_status()).storage:
                    assert time.monotonic() < deadline, "node 3's disk never filled"
                    for _ in range(50):
                        producer.send("orders", bytes(2000))
                    producer.flush()
            reply = raw_publish(cluster, 3, b"on a full disk")
            assert reply[1] == "error" and reply[3] == "storage", reply
            cluster.stop(2, signal.SIGKILL)  # node 1 alone has a disk that takes writes
            with Producer(config=cluster.config_path, node=1, timeout_s=3) as producer:
                future = producer.send("orders", b"needs two disks")
                producer.flush()
                # a node whose disk refuses writes votes for nothing: with "always" its vote is
                # its durable head; without, its ack is held back, its vote not in its page cache
                assert future.failed(), "acknowledged with one disk"
            subprocess.run(["mount", "-o", "remount,size=64m", str(full)], check=True)
            healed = until(
                lambda: cluster.status(3) or fail_status(), lambda s: not s.storage, timeout_s=30
            )
            assert not healed.storage, "node 3 never took writes again"
            with Producer(config=cluster.config_path, node=3) as producer:
                ack = producer.publish("orders", b"space again")
            assert ack.seq > 0
    finally:
        subprocess.run(["umount", "-l", str(full)])


def fail_status() -> NodeStatus:
    raise AssertionError("node 3 stopped answering")


def test_retention_deletes_old_segments_and_a_read_past_them_is_data_loss(
    tmp_path: Path,
) -> None:
    overrides: dict[str, int | str] = {"segment_bytes": 4096, "buffer_txs_max": 200}
    with LocalCluster(tmp_path / "c", 3, overrides=overrides) as cluster:
        text = cluster.config_path.read_text().replace(
            "segment_ms =", "retention_bytes = 20000\nsegment_ms ="
        )
        cluster.config_path.write_text(text)
        cluster.config = load(cluster.config_path)
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:
            futures = [producer.send("orders", bytes(100)) for _ in range(2000)]
            producer.flush()
            acks = sorted((f.result() for f in futures), key=lambda a: a.seq)  # oldest first
        deleted = "retention: orders now starts after seq"
        logs = until(  # every replica: a reader goes to another one for what one lacks
            lambda: [cluster.log(n) for n in (1, 2, 3)],
            lambda texts: all(deleted in text for text in texts),
            timeout_s=30,
        )
        assert all(deleted in text for text in logs), "retention never deleted a segment"
        with Producer(config=cluster.config_path) as producer:  # the memory rings move on
            later = [producer.send("orders", bytes(100)) for _ in range(500)]
            producer.flush()
            acks += [f.result() for f in later]
        listing = subprocess.run(
            [
                sys.executable,
                "-m",
                "relay",
                "log",
                "ls",
                "--config",
                str(cluster.config_path),
                "--node",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout
        assert str(acks[0].seq) not in listing
        with (
            pytest.raises(DataLossError, match="data_loss"),
            Consumer("orders", config=cluster.config_path, node=1, start=acks[0].seq) as consumer,
        ):
            consumer.take(10, timeout_s=10)
        with Consumer("orders", config=cluster.config_path, node=1) as consumer:
            first = consumer.take(1, timeout_s=10)[0]
        acked = {a.seq for a in acks}  # retention may since have taken all of the first 2000
        assert first.seq > acks[0].seq and first.seq in acked
