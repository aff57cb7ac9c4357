"""The JetStream side of ``scripts/bench_queue.py``: the same three measures on a work-queue
stream of three ``nats-server`` processes (R3, file storage, ``sync_interval: always``),
from one asyncio process with nats-py; prints JSON.

Workers are tasks, each with a pull subscription on one durable consumer (explicit acks, the
work-queue stream's only consumer): they fetch up to ``--batch`` messages and ack each one
(``ack``: sent, not waited for, as JetStream workers ack; a relay settlement is answered once a
quorum verified it). Coalescing is a subject per resource with ``max_msgs_per_subject: 1`` (a
new update replaces the waiting one; one already delivered and not yet acked is not replaced:
JetStream keeps it in the stream until it is acked, and the newer one waits too). The servers
run in a temporary folder on free ports and are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.js import api
from nats.js.client import JetStreamContext
from nats_cluster import nats_cluster, ready

PAYLOAD = b"x" * 100
LATENCY_SAMPLES = 300


async def work_queue(js: JetStreamContext, name: str, per_subject: int = -1) -> None:
    await js.add_stream(
        api.StreamConfig(
            name=name,
            subjects=[f"{name.lower()}.>"],
            retention=api.RetentionPolicy.WORK_QUEUE,
            storage=api.StorageType.FILE,
            num_replicas=3,
            max_msgs_per_subject=per_subject,
            discard=api.DiscardPolicy.OLD,
        )
    )


async def publish(js: JetStreamContext, subject_of: Any, count: int) -> None:
    for i in range(count):
        await js.publish_async(subject_of(i), PAYLOAD, wait_stall=5.0)
    await js.publish_async_completed()


async def work(js: JetStreamContext, name: str, workers: int, batch: int, done: Any) -> int:
    """``workers`` tasks fetch and ack until ``done(acked, got)``; the messages acked."""
    config = api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=60, max_ack_pending=-1)
    subs = [
        await js.pull_subscribe(f"{name.lower()}.>", durable="workers", stream=name, config=config)
        for _ in range(workers)
    ]
    acked = [0]
    stop = asyncio.Event()

    async def loop(sub: Any) -> None:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(batch, timeout=0.2)
            except (TimeoutError, nats.errors.TimeoutError):
                msgs = []
            for m in msgs:
                await m.ack()
            acked[0] += len(msgs)
            if done(acked[0], bool(msgs)):
                stop.set()

    await asyncio.gather(*(loop(s) for s in subs))
    for sub in subs:
        await sub.unsubscribe()
    return acked[0]


async def throughput(js: JetStreamContext, jobs: int, workers: int, batch: int) -> dict[str, Any]:
    name = f"JOBS{workers}"
    await work_queue(js, name)
    await publish(js, lambda i: f"{name.lower()}.job", jobs)
    started = time.perf_counter()
    acked = await work(js, name, workers, batch, lambda n, _: n >= jobs)
    took = time.perf_counter() - started
    return {"workers": workers, "jobs": acked, "seconds": round(took, 2), "per_s": acked / took}


async def latency(js: JetStreamContext) -> dict[str, Any]:
    await work_queue(js, "LATENCY")
    config = api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT)
    sub = await js.pull_subscribe("latency.>", durable="parked", stream="LATENCY", config=config)
    took = []
    for _ in range(LATENCY_SAMPLES):
        fetch = asyncio.create_task(sub.fetch(1, timeout=10))
        await asyncio.sleep(0.005)  # the pull request is at the server, waiting
        sent = time.perf_counter()
        await js.publish("latency.job", PAYLOAD)
        [msg] = await fetch
        took.append((time.perf_counter() - sent) * 1000)
        await msg.ack_sync()
    took.sort()
    return {
        "p50_ms": statistics.median(took),
        "p99_ms": took[int(len(took) * 0.99) - 1],
        "samples": len(took),
    }


async def coalescing(
    js: JetStreamContext, updates: int, resources: int, batch: int
) -> dict[str, Any]:
    await work_queue(js, "COALESCED", per_subject=1)
    started = time.perf_counter()
    producing = asyncio.create_task(publish(js, lambda i: f"coalesced.r{i % resources}", updates))
    idle = [0]

    def done(_acked: int, got: bool) -> bool:
        idle[0] = 0 if got or not producing.done() else idle[0] + 1
        return idle[0] >= 20

    ran = await work(js, "COALESCED", 8, batch, done)
    await producing
    took = time.perf_counter() - started
    return {
        "updates": updates,
        "resources": resources,
        "ran": ran,
        "replaced": updates - ran,
        "seconds": round(took, 2),
    }


async def measure(args: argparse.Namespace, servers: list[str]) -> dict[str, Any]:
    nc = await nats.connect(servers, max_reconnect_attempts=5)
    try:
        js = nc.jetstream(publish_async_max_pending=4000)
        await ready(js)
        return {
            "throughput": [await throughput(js, args.jobs, w, args.batch) for w in (1, 8)],
            "latency": await latency(js),
            "coalescing": await coalescing(js, args.updates, args.resources, args.batch),
        }
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="the nats-server program")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--resources", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="nats-queue-") as tmp,
        nats_cluster(args.server, Path(tmp), sync_always=True) as servers,
    ):
        found = asyncio.run(measure(args, servers))
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
