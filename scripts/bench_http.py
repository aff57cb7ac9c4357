"""HTTP against the ZeroMQ client on one 3-node cluster (fsync = always), in the same run:
publish throughput with batches of 100 messages of 100 bytes (HTTP: one POST of 100 JSON lines;
ZeroMQ: a Producer with batch_max=100), each with the same number of batches in flight, and
the latency of one batch alone (200 in a row); then reading every message back once (HTTP:
one chunked response of JSON lines, follow=false; ZeroMQ: a Consumer that checks the digest
chain).

The HTTP client is aiohttp in this process, with ``--inflight`` requests open at once; its
node parses, validates and re-packs each line, and answers with every seq and digest as JSON.

Usage: scripts/bench_http.sh [--messages 100000] [--inflight 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp

from relay import Consumer, Producer
from relay.runtime.local_cluster import LocalCluster

BATCH = 100
PAYLOAD = "x" * 100


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Result = tuple[float, list[float]]  # tx/s, and the latencies of lone batches (ms)
LONE_BATCHES = 200


async def http_publish(url: str, token: str, batches: int, inflight: int) -> Result:
    body = ("\n".join(json.dumps({"payload": PAYLOAD}) for _ in range(BATCH)) + "\n").encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
    left = batches

    async def post(session: aiohttp.ClientSession) -> None:
        async with session.post(url, data=body, headers=headers) as response:
            answer = await response.read()
            assert response.status == 200, answer[:300]

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await post(session)

    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(inflight)))
        rate = batches * BATCH / (time.perf_counter() - started)
        latencies = []
        for _ in range(LONE_BATCHES):
            begun = time.perf_counter()
            await post(session)
            latencies.append((time.perf_counter() - begun) * 1000)
    return rate, latencies


async def http_consume(url: str, token: str, expected: int) -> float:
    headers = {"Authorization": f"Bearer {token}"}
    started = time.perf_counter()
    count = 0
    timeout = aiohttp.ClientTimeout(total=600)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(url + "?follow=false", headers=headers) as response,
    ):
        async for line in response.content:
            if line.strip():
                count += 1
    assert count == expected, (count, expected)
    return count / (time.perf_counter() - started)


def zmq_publish(
    config: Path, stream: str, batches: int, inflight: int
) -> tuple[float, list[float]]:
    with Producer(config=config, batch_max=BATCH, window=inflight) as producer:
        started = time.perf_counter()
        futures = [producer.send(stream, PAYLOAD.encode()) for _ in range(batches * BATCH)]
        producer.flush()
        rate = batches * BATCH / (time.perf_counter() - started)
        assert all(f.result() for f in futures)
        latencies = []
        for _ in range(LONE_BATCHES):  # one batch alone, as one POST waits for its answer
            begun = time.perf_counter()
            sent = [producer.send(stream, PAYLOAD.encode()) for _ in range(BATCH)]
            producer.flush()
            assert all(f.result() for f in sent)
            latencies.append((time.perf_counter() - begun) * 1000)
    return rate, latencies


def zmq_consume(config: Path, stream: str, expected: int) -> float:
    started = time.perf_counter()
    with Consumer(stream, config=config) as consumer:
        count = 0
        while count < expected:
            count += len(consumer.poll(1.0))
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    batches = args.messages // BATCH
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(
        f"# relay HTTP against ZeroMQ, {args.messages} messages of 100 bytes in batches of "
        f"{BATCH}, {args.inflight} batches in flight, 3 nodes, fsync always; commit {commit}, "
        f"{platform.node()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {args.rounds} rounds\n"
    )
    rows: dict[str, list[tuple[float, list[float]]]] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp), nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        token = (cluster.config.keys_dir() / "client.token").read_text().strip()
        base = cluster.config.node(1).http_address
        for r in range(args.rounds):
            http_stream, zmq_stream = f"http.r{r}", f"zmq.r{r}"
            url = f"{base}/streams/{http_stream}/messages"
            rows.setdefault("publish: HTTP", []).append(
                asyncio.run(http_publish(url, token, batches, args.inflight))
            )
            rows.setdefault("publish: ZeroMQ Producer", []).append(
                zmq_publish(cluster.config_path, zmq_stream, batches, args.inflight)
            )
            total = (batches + LONE_BATCHES) * BATCH
            rows.setdefault("consume: HTTP chunked", []).append(
                (asyncio.run(http_consume(url, token, total)), [])
            )
            zmq_total = total
            rows.setdefault("consume: ZeroMQ Consumer", []).append(
                (zmq_consume(cluster.config_path, zmq_stream, zmq_total), [])
            )
    print("| measure | tx/s (median of rounds) | rounds | one batch of 100: p50 | p99 |")
    print("|---|---|---|---|---|")
    for name, results in rows.items():
        rates = [rate for rate, _ in results]
        latencies = [ms for _, lat in results for ms in lat]
        spread = ", ".join(f"{rate:,.0f}" for rate in rates)
        p50 = f"{pct(latencies, 0.5):.2f} ms" if latencies else "-"
        p99 = f"{pct(latencies, 0.99):.2f} ms" if latencies else "-"
        print(f"| {name} | {statistics.median(rates):,.0f} | {spread} | {p50} | {p99} |")


if __name__ == "__main__":
    main()
