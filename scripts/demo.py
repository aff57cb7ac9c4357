"""The main job: a local 3-node cluster, producers on every node, consumers on every node
agreeing on one verified timeline, the Spark job (``spark_consumer.job``) keeping per-minute
totals of ``orders`` in Parquet while it is written and publishing them into
``orders.minutes``, a work queue (``demo_queue``: priorities, a delayed job, a worker killed
with SIGKILL, a job that dies into the dead-letter stream), a summary, and everything stopped at
the end."""

from __future__ import annotations

import json
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import demo_queue

from relay import Consumer, Producer
from relay.runtime.local_cluster import write_config

STREAMS = ["orders", "payments"]
HIDDEN = "Authorization: Bearer $(cat keys/client.token)"
PER_PRODUCER = 2000
WAVE = 200
SPARK_STREAM = "orders"
SPARK_NOISE = ("WARNING", "Using Spark", "Setting default log level", "To adjust logging")
END = "\0"


def relay(*args: str) -> None:
    print(f"$ relay {shlex.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "relay", *args], check=True)


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="relay-demo-"))
    config = write_config(folder, 3)
    cfg = str(config)
    relay("cluster", "up", "--config", cfg)
    try:
        spark_job, spark_lines = start_spark_job(cfg, folder / "spark")
        try:
            spark_output(spark_lines, "query started", 180)
            acked = run(cfg)
            summary = check_spark_job(spark_job, spark_lines, len(acked[SPARK_STREAM]))
            check_totals_stream(cfg, summary)
            demo_queue.show(cfg)
            show_http(cfg)
        finally:
            if spark_job.poll() is None:
                spark_job.kill()
        relay("cluster", "status", "--config", cfg)
    finally:
        relay("cluster", "down", "--config", cfg)
    print(f"(config and node logs kept in {folder})")


def show_http(cfg: str) -> None:
    """The same streams over HTTP, as curl or any language sees them."""
    from relay.config import load

    config = load(cfg)
    token = (config.keys_dir() / "client.token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    two, three = (config.node(n).http_address for n in (2, 3))
    print(f"\n$ curl -H '{HIDDEN}' --data-binary 'over http' {two}/streams/orders/messages")
    sent = urllib.request.Request(
        f"{two}/streams/orders/messages", data=b"over http", headers=auth, method="POST"
    )
    with urllib.request.urlopen(sent, timeout=30) as answer:
        published = answer.read().decode()
    print(published)
    seq = json.loads(published)["results"][0]["seq"]
    url = f"{three}/streams/orders/messages?from={seq}&limit=1"  # it follows until node 3 has it
    print(f"$ curl -H '{HIDDEN}' '{url}'")
    with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=30) as answer:
        print(answer.read().decode(), end="")


def start_spark_job(cfg: str, out: Path) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """The Spark job in the background; its output lines arrive on the queue."""
    args = ["--config", cfg, "--stream", SPARK_STREAM, "--out", str(out), "--until-idle", "8"]
    print(f"$ python -m spark_consumer.job {' '.join(args)} &", flush=True)
    job = subprocess.Popen(
        [sys.executable, "-m", "spark_consumer.job", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert job.stdout is not None
        for line in job.stdout:
            lines.put(line.rstrip())
        lines.put(END)

    threading.Thread(target=pump, daemon=True).start()
    return job, lines


def spark_output(lines: queue.Queue[str], until: str, timeout_s: float) -> dict[str, Any]:
    """Print the job's lines until one starts with ``until``; the summary if it printed one."""
    deadline = time.monotonic() + timeout_s
    summary: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line == END:
            return summary
        if line.startswith("summary "):
            summary = json.loads(line.removeprefix("summary "))
        elif not line.startswith(SPARK_NOISE) and " WARN " not in line:
            print(f"  spark | {line}", flush=True)
        if line.startswith(until):
            return summary
    sys.exit(f"the Spark job printed no {until!r} line within {timeout_s:.0f} s")


def check_spark_job(
    job: subprocess.Popen[str], lines: queue.Queue[str], acked: int
) -> dict[str, Any]:
    print("\nthe Spark job reads until it is idle, then prints its per-minute totals:", flush=True)
    summary = spark_output(lines, END, 600)
    job.wait(timeout=60)
    if job.returncode != 0 or not summary:
        sys.exit(f"the Spark job failed (exit {job.returncode})")
    exact = summary["txs"] == acked and summary["bad"] == 0
    print(
        f"Spark counted {summary['txs']} {SPARK_STREAM!r} txs (acknowledged: {acked}), "
        f"amount total {summary['total']:,.0f}: {'exactly once' if exact else 'MISMATCH'}"
    )
    if not exact:
        sys.exit(1)
    return summary


def check_totals_stream(cfg: str, summary: dict[str, Any]) -> None:
    """The job's second stage: its totals, read back from the relay stream it wrote them to."""
    stream = f"{SPARK_STREAM}.minutes"
    print(f"\nthe job also published its per-minute totals into {stream!r}:", flush=True)
    relay("consume", "--config", cfg, "--stream", stream, "-e", "--format", "%k %v\\n")
    with Consumer(stream, config=cfg) as consumer:
        rows = [json.loads(tx.payload) for tx in consumer.take(10_000, timeout_s=3)]
    txs, total = sum(r["txs"] for r in rows), sum(r["total"] or 0 for r in rows)
    same = txs == summary["txs"] and abs(total - summary["total"]) < 1e-6
    print(f"{stream!r} sums to {txs} txs, total {total:,.0f}: {'the same' if same else 'MISMATCH'}")
    if not same:
        sys.exit(1)


def run(cfg: str) -> dict[str, dict[int, bytes]]:
    nodes = [1, 2, 3]
    acked: dict[str, dict[int, bytes]] = {s: {} for s in STREAMS}
    lock = threading.Lock()

    def produce(node: int, stream: str) -> None:
        with Producer(config=cfg, node=node) as producer:
            futures = []
            for i in range(PER_PRODUCER):
                payload = f'{{"node": {node}, "n": {i}, "amount": {i % 97}}}'.encode()
                futures.append(producer.send(stream, payload))
                if i % WAVE == WAVE - 1:  # in waves, so Spark reads while producers write
                    producer.flush()
                    time.sleep(0.25)
            producer.flush()
            with lock:
                for f in futures:
                    ack = f.result()
                    acked[stream][ack.seq] = ack.digest

    print(
        f"\npublishing {PER_PRODUCER} transactions from a producer on every node "
        f"to each of {STREAMS} ...",
        flush=True,
    )
    started = time.monotonic()
    threads = [threading.Thread(target=produce, args=(n, s)) for n in nodes for s in STREAMS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    total = sum(len(v) for v in acked.values())
    print(f"acknowledged {total} transactions in {took:.1f} s, in waves\n")

    print(f"{'stream':<10} {'node':<5} {'received':>9} {'last seq':>20} {'digest':<18} agrees")
    ok = True
    for stream in STREAMS:
        views = {}
        for node in nodes:
            with Consumer(stream, config=cfg, node=node) as consumer:
                txs = consumer.take(len(acked[stream]), timeout_s=60)
            views[node] = [(tx.seq, tx.digest) for tx in txs]
        reference = views[nodes[0]]
        for node, view in views.items():
            agrees = view == reference and dict(view) == acked[stream]
            ok &= agrees
            last_seq, last_digest = view[-1] if view else (0, b"")
            print(
                f"{stream:<10} {node:<5} {len(view):>9} {last_seq:>20} "
                f"{last_digest.hex()[:16]:<18} {'yes' if agrees else 'NO'}"
            )
    print(
        "\nevery consumer saw every acknowledged transaction, in one order, with equal digests"
        if ok
        else "\nMISMATCH: consumers disagree"
    )
    if not ok:
        sys.exit(1)
    return acked


if __name__ == "__main__":
    main()
