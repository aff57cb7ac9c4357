"""The ceiling of this machine for a quorum relay written in Python: the least program that
does relay's hot path, measured beside relay and JetStream in the same run.

What it does, and nothing more: three (or ``--nodes 5``) node processes and one producer
process on 127.0.0.1, ZeroMQ as relay uses it (a ROUTER for the producer, PUB/SUB between
nodes, msgpack frames). The producer sends batches of 100-byte payloads with a window of
batches in flight. Node 0 gives each payload the next seq, folds a rolling blake3 digest over
(previous digest, seq, payload), and broadcasts everything pending in one frame per loop turn;
every other node folds the same chain and answers with one vote (its id, last seq, digest) per
turn; node 0 answers a batch once enough other nodes' digests agree with its own at or beyond
the batch's last seq to make a majority with it (one other of three, two of five). No disk,
no deduplication, no epochs, no encryption, no repair, no consumers: every figure relay reaches
is below this one, so a target above it is out of reach for any Python design of relay on this
machine.

Usage: python scripts/ceiling.py [--count N] [--window W] [--batch B] [--nodes 3|5] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import time
from collections import deque
from typing import Any

import msgpack
import zmq
from blake3 import blake3

SEQ = 8  # bytes of a seq in the digest's input
PAYLOAD = bytes(100)
DIGEST_KEEP = 1 << 16  # node 0's latest digests, kept to compare votes with


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fold(digest: bytes, seq: int, payloads: list[bytes]) -> tuple[bytes, list[bytes]]:
    chain = []
    for payload in payloads:
        seq += 1
        digest = blake3(digest + seq.to_bytes(SEQ, "big") + payload).digest()
        chain.append(digest)
    return digest, chain


def at(digests: deque[bytes], head: int, seq: int) -> bytes | None:
    """The digest at ``seq`` if still kept (``digests`` ends at ``head``)."""
    back = head - seq
    return digests[-1 - back] if 0 <= back < len(digests) else None


def mesh(ctx: zmq.Context[Any], own: int, peers: list[int]) -> tuple[Any, Any]:
    """A PUB bound on port ``own`` and a SUB connected to ``peers``, neither dropping."""
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.bind(f"tcp://127.0.0.1:{own}")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    for port in peers:
        sub.connect(f"tcp://127.0.0.1:{port}")
    return pub, sub


def coordinator(ports: dict[str, int], nodes: int, stop: Any) -> None:
    ctx = zmq.Context()
    client = ctx.socket(zmq.ROUTER)
    client.bind(f"tcp://127.0.0.1:{ports['client']}")
    pub, votes = mesh(ctx, ports["node0"], [ports[f"node{n}"] for n in range(1, nodes)])
    others = nodes // 2  # the other nodes' votes that make a majority with node 0's own
    poller = zmq.Poller()
    poller.register(client, zmq.POLLIN)
    poller.register(votes, zmq.POLLIN)
    seq, digest = 0, bytes(32)
    digests: deque[bytes] = deque(maxlen=DIGEST_KEEP)  # the digest at seq - len + 1 .. seq
    waiting: list[tuple[bytes, int, int, int]] = []  # (who, req_id, first seq, last seq)
    verified = 0
    agreed: dict[int, int] = {}  # node -> the highest seq its vote agreed with node 0 at
    while not stop.is_set():
        if not poller.poll(100):
            continue
        pending: list[bytes] = []
        first = seq
        while True:
            try:
                who, body = client.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            req_id, payloads = msgpack.unpackb(body)
            waiting.append((who, req_id, seq + 1, seq + len(payloads)))
            digest, chain = fold(digest, seq, payloads)
            digests += chain
            seq += len(payloads)
            pending += payloads
        if pending:
            pub.send(msgpack.packb((first, pending)))
        while True:
            try:
                voter, vote_seq, vote_digest = msgpack.unpackb(votes.recv(zmq.NOBLOCK))
            except zmq.Again:
                break
            if at(digests, seq, vote_seq) == vote_digest:
                agreed[voter] = vote_seq
        if len(agreed) >= others:
            verified = max(verified, sorted(agreed.values())[-others])
        if waiting and waiting[0][3] <= verified:
            kept = []
            for who, req_id, low, high in waiting:
                if high <= verified:
                    client.send_multipart(
                        (who, msgpack.packb((req_id, low, at(digests, seq, high))))
                    )
                else:
                    kept.append((who, req_id, low, high))
            waiting = kept
    ctx.destroy(linger=0)


def replica(node: int, ports: dict[str, int], stop: Any) -> None:
    ctx = zmq.Context()
    pub, sub = mesh(ctx, ports[f"node{node}"], [ports["node0"]])
    seq, digest = 0, bytes(32)
    while not stop.is_set():
        if not sub.poll(100):
            continue
        moved = False
        while True:
            try:
                first, payloads = msgpack.unpackb(sub.recv(zmq.NOBLOCK))
            except zmq.Again:
                break
            assert first == seq, "the broadcast is ordered and lossless on 127.0.0.1"
            digest, _ = fold(digest, seq, payloads)
            seq += len(payloads)
            moved = True
        if moved:
            pub.send(msgpack.packb((node, seq, digest)))
    ctx.destroy(linger=0)


def produce(port: int, count: int, window: int, batch: int) -> dict[str, Any]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.connect(f"tcp://127.0.0.1:{port}")
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    next_req, acked = 0, 0
    started = time.perf_counter()
    while acked < count:
        while len(sent_at) < window and next_req * batch < count:
            n = min(batch, count - next_req * batch)
            sent_at[next_req] = time.perf_counter()
            sock.send(msgpack.packb((next_req, [PAYLOAD] * n)))
            next_req += 1
        if not sock.poll(5000):
            raise RuntimeError("the ceiling's cluster stopped answering")
        while True:
            try:
                req_id, _first, _digest = msgpack.unpackb(sock.recv(zmq.NOBLOCK))
            except zmq.Again:
                break
            latencies.append(time.perf_counter() - sent_at.pop(req_id))
            acked += min(batch, count - req_id * batch)
    seconds = time.perf_counter() - started
    ctx.destroy(linger=0)
    latencies.sort()
    return {
        "acked": acked,
        "tx_per_s": acked / seconds,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def measure(count: int, window: int, batch: int, nodes: int) -> dict[str, Any]:
    names = ["client", *(f"node{n}" for n in range(nodes))]
    ports = {name: free_port() for name in names}
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    procs = [ctx.Process(target=coordinator, args=(ports, nodes, stop))] + [
        ctx.Process(target=replica, args=(n, ports, stop)) for n in range(1, nodes)
    ]
    for proc in procs:
        proc.start()
    try:
        time.sleep(1.0)  # every SUB connected before the first broadcast (slow joiner)
        produce(ports["client"], min(count, 2000), window, batch)  # warm-up
        return {"window": window, "batch": batch, **produce(ports["client"], count, window, batch)}
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=300_000)
    parser.add_argument("--window", type=int, default=32, help="batches in flight")
    parser.add_argument("--batch", type=int, default=512, help="payloads per request")
    parser.add_argument("--single", type=int, default=3000, help="one-in-flight publishes")
    parser.add_argument("--nodes", type=int, choices=(3, 5), default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {
        "nodes": args.nodes,
        "pipelined": measure(args.count, args.window, args.batch, args.nodes),
        "single": measure(args.single, 1, 1, args.nodes),
    }
    if args.json:
        print(json.dumps(result))
        return
    p, s = result["pipelined"], result["single"]
    print(
        f"{args.nodes} nodes, pipelined (window {p['window']} x batch {p['batch']}): "
        f"{p['tx_per_s']:,.0f} tx/s"
    )
    print(f"one in flight: p50 {s['p50_ms']:.3f} ms, p99 {s['p99_ms']:.3f} ms")


if __name__ == "__main__":
    main()
