"""Consumer groups on a real cluster: a group consumer killed mid-stream resumes on another node
after the committed position with no gap; `relay groups` describes and resets."""

import signal
import subprocess
import sys
from pathlib import Path
from urllib.request import urlopen

import pytest
from waits import until

from relay import Consumer, Producer
from relay.client.groups import commit_payload
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

GROUP_CONSUMER = """
import sys, time
from relay import Consumer
config, node = sys.argv[1], int(sys.argv[2])
with Consumer(
    "orders", config=config, node=node, group="billing", commit_interval_ms=100, batch_max=50
) as c:
    while True:
        for tx in c.poll(1.0, max_txs=50):
            time.sleep(0.001)  # not a wait: the work each transaction takes
            print(tx.seq, tx.payload.decode(), flush=True)
"""


def scrape(metrics_port: int) -> str:
    return urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()


def relay_cli(cluster: LocalCluster, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "relay", *args, "--config", str(cluster.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_group_consumer_killed_mid_stream_resumes_elsewhere_after_its_commit(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:
            acks = [producer.send("orders", b"%d" % i) for i in range(3000)]
            producer.flush()
        seqs = sorted(f.result().seq for f in acks)  # a resent batch may take later seqs
        script = tmp_path / "consumer.py"
        script.write_text(GROUP_CONSUMER)
        first = subprocess.Popen(
            [sys.executable, str(script), str(cluster.config_path), "1"],
            stdout=subprocess.PIPE,
            text=True,
        )
        printed: list[int] = []
        try:
            assert first.stdout is not None
            for line in first.stdout:
                printed.append(int(line.split()[0]))
                if len(printed) == 1500:
                    break
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        finally:
            if first.poll() is None:
                first.kill()
        assert printed == seqs[:1500]
        described = relay_cli(cluster, "groups", "describe", "billing")
        committed = int(described.splitlines()[1].split("\t")[1])
        assert seqs[0] <= committed <= seqs[1499]  # at most what was printed, and something
        lag = int(described.splitlines()[1].split("\t")[3])
        assert lag == sum(1 for s in seqs if s > committed)
        spec = cluster.config.node(1)
        metric = f'relay_group_lag_txs{{group="billing",stream="orders"}} {float(lag)}'
        shown = until(lambda: scrape(spec.metrics_port), lambda text: metric in text, timeout_s=20)
        assert metric in shown, "relay_group_lag_txs never showed the lag"  # counted every 5 s
        assert "billing\torders" in relay_cli(cluster, "groups", "ls")
        with Consumer("orders", config=cluster.config_path, node=3, group="billing") as second:
            rest = second.take(3000 - seqs.index(committed) - 1, timeout_s=30)
            assert not second.poll(0.5)  # nothing more: no duplicate past the end
        assert [t.seq for t in rest] == [s for s in seqs if s > committed]  # no gap
        assert "0\t" in relay_cli(cluster, "groups", "describe", "billing").splitlines()[1]
        relay_cli(cluster, "groups", "reset", "billing", "--stream", "orders", "--to", "earliest")
        with Consumer("orders", config=cluster.config_path, node=2, group="billing") as again:
            assert [t.seq for t in again.take(10, timeout_s=20)] == seqs[:10]


def test_a_hostile_group_stream_is_a_clear_error_and_the_nodes_keep_serving(
    tmp_path: Path,
) -> None:
    from relay import RelayError

    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path) as producer:
            producer.publish("orders", b"x")
            producer.publish("orders.__group.evil", b"[" * 5000)  # nested past any parser
            good = commit_payload("orders", 0, bytes(32))
            producer.publish("orders.__group.good", good, key="orders")
        with (
            pytest.raises(RelayError, match="not a group commit"),
            Consumer("orders", config=cluster.config_path, group="evil") as consumer,
        ):
            consumer.poll(5.0)
        spec = cluster.config.node(1)  # the good group's lag shows once a count passed both
        metric = 'relay_group_lag_txs{group="good",stream="orders"}'
        shown = until(lambda: scrape(spec.metrics_port), lambda text: metric in text, timeout_s=20)
        assert metric in shown, "no node counted the groups' lag"
        for node_id in (1, 2, 3):
            status = cluster.status(node_id)
            assert status is not None and status.state == "serving"
        out = relay_cli(cluster, "groups", "describe", "evil")
        assert "not a group commit" in out
