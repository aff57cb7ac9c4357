"""Fan-out batches: acks in any order and any number of times, complete exactly when the last
item is acknowledged, across processes and a node killed in the middle."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from relay import Producer
from relay.client.batches import acks_payload, item_of, status_of
from relay.runtime.local_cluster import LocalCluster


def test_acks_travel_as_merged_ranges_and_items_name_their_batch() -> None:
    record = json.loads(acks_payload("g", {5, 1, 2, 3, 9}))
    assert record == {"group": "g", "acks": [[1, 3], [5, 5], [9, 9]]}
    assert len(acks_payload("g", set(range(1_000_000)))) < 60  # in order: one range
    assert item_of((("x", b"1"), ("relay-batch", b"s.__batch.ab#7")), "s") == ("s.__batch.ab", 7)
    assert item_of((("relay-batch", b"no index"),), "s") is None
    assert item_of((("relay-batch", b"s.__batch.ab#99999999999"),), "s") is None  # too far
    assert item_of((("relay-batch", b"other.__batch.ab#7"),), "s") is None  # another's batch
    assert item_of((("relay-batch", "s.__batch.ab#\u0661\u0662".encode()),), "s") is None


def test_status_counts_each_acked_index_once_and_skips_hostile_records() -> None:
    records = (
        acks_payload("g", {0, 1, 2, 5}),
        acks_payload("g", {2, 3}),  # a retried ack
        acks_payload("other", {4}),  # another group's
        b"[" * 5000,  # nested past the parser's depth
        b'{"group": "g", "acks": [[7, 3], [-1, 2], [0, 99999999999], "x", [1.5, 2]]}',
        b'{"close": 6}',
        b'{"close": 2}',  # only the first close counts
        acks_payload("g", {9}),  # past the count
    )
    found = status_of("s.__batch.b", "g", records)
    assert (found.closed, found.count, found.acked) == (True, 6, 5)  # item 4 still missing
    assert not found.complete


ACKER = """
import random, sys
from relay import Consumer
config, parity, hold_last = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "hold"
with Consumer("orders", config=config, group="billing", commit_interval_ms=0) as consumer:
    mine = [t for t in consumer.take(10_000, timeout_s=60) if t.msg_id % 2 == parity]
    rng = random.Random(parity)
    rng.shuffle(mine)
    last = mine.pop() if hold_last else None
    for i, tx in enumerate(mine + mine[: len(mine) // 10]):  # a tenth acked twice
        consumer.ack(tx)
        if i % 500 == 499:
            consumer.commit()
    consumer.commit()
    print("waiting" if hold_last else "done", flush=True)
    if last is not None:
        sys.stdin.readline()
        consumer.ack(last)
        consumer.commit()
        print("done", flush=True)
"""


def status(cluster: LocalCluster, batch: str) -> str:
    command = ["batch", "status", batch, "--group", "billing", "--config", str(cluster.config_path)]
    out = subprocess.run(
        [sys.executable, "-m", "relay", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode in (0, 1), out.stderr
    return out.stdout.strip()


@pytest.mark.slow
def test_a_batch_is_complete_exactly_when_its_last_item_is_acknowledged(tmp_path: Path) -> None:
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:
            batch = producer.open_batch("orders")
            for i in range(10_000):
                producer.send("orders", b"item %d" % i, batch=batch)
            assert status(cluster, batch) == "open 0/0"
            assert producer.close_batch(batch) == 10_000
        assert status(cluster, batch) == "closed 0/10000"
        script = tmp_path / "acker.py"
        script.write_text(ACKER)
        base = [sys.executable, str(script), str(cluster.config_path)]
        pipes = {"stdout": subprocess.PIPE, "text": True}
        even = subprocess.Popen([*base, "0", "all"], **pipes)  # type: ignore[call-overload]
        odd = subprocess.Popen([*base, "1", "hold"], stdin=subprocess.PIPE, **pipes)  # type: ignore[call-overload]
        try:
            cluster.stop(2, signal.SIGKILL)  # a node dies while the acks go in
            cluster.start(2)
            assert even.stdout.readline().strip() == "done"
            assert odd.stdout.readline().strip() == "waiting"
            assert status(cluster, batch) == "closed 9999/10000"  # one item still unacked
            odd.stdin.write("go\n")
            odd.stdin.flush()
            assert odd.stdout.readline().strip() == "done"
            assert status(cluster, batch) == "complete 10000/10000"
        finally:
            for proc in (even, odd):
                if proc.poll() is None:
                    proc.kill()
                proc.wait(10)
