"""What idle streams cost: node CPU at rest, single-publish latency on another stream, and a
restart of the whole cluster.

Two fresh 3-node clusters on this machine: one with a single stream, one with ``--streams``
streams created by one producer publishing one message to each (its default window, as a user
would) and then left idle. For each, every node's CPU use while nothing is published (psutil,
100% = one core), the latency of ``--publishes`` sequential publishes on a stream of its own,
and, after every node is stopped and started again, the seconds until every node serves and
until a publish on a new stream is acknowledged. Prints a markdown table with the ratios and
the targets (idle CPU under 5% per node; latency within 20% of one stream; serving again
within 10 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from relay import Producer
from relay.runtime.launcher import query_status
from relay.runtime.local_cluster import LocalCluster


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def idle_cpu(cluster: LocalCluster, seconds: float) -> list[float]:
    """Each node's CPU use (percent of one core) over ``seconds`` with no traffic."""
    pids = [proc.pid for _, proc in sorted(cluster.procs.items())]
    before = [cpu_seconds(p) for p in pids]
    started = time.monotonic()
    time.sleep(seconds)
    spent = time.monotonic() - started
    return [100 * (cpu_seconds(p) - b) / spent for p, b in zip(pids, before, strict=True)]


def latencies_ms(cluster: LocalCluster, count: int) -> list[float]:
    found = []
    with Producer(config=cluster.config_path, node=1) as producer:
        producer.publish("latency", b"warm-up")
        for i in range(count):
            started = time.perf_counter()
            producer.publish("latency", b"%d" % i)
            found.append((time.perf_counter() - started) * 1000)
    return found


def create_streams(cluster: LocalCluster, count: int) -> float:
    """Publish one message to each of ``count`` streams; the seconds it took."""
    started = time.monotonic()
    with Producer(config=cluster.config_path, timeout_s=600) as producer:
        futures = [producer.send(f"idle.{i}", b"x") for i in range(count)]
        producer.flush()
        for future in futures:
            future.result()  # raises if a stream could not be created
    return time.monotonic() - started


def wait_at_rest(cluster: LocalCluster, streams: int, timeout_s: float = 120) -> None:
    """Until every node holds every stream, each verified to its head."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = [
            query_status(cluster.config.node(n), 10_000, cluster.client_pair)
            for n in sorted(cluster.procs)
        ]
        if all(
            s is not None
            and len(s.streams) >= streams
            and all(x.verified_seq == x.head_seq and not x.unverified_txs for x in s.streams)
            for s in statuses
        ):
            return
        time.sleep(1)
    raise TimeoutError(f"the cluster did not come to rest within {timeout_s} s")


def measure(streams: int, publishes: int, idle_s: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        overrides = {"streams_max": streams + 100}
        with LocalCluster(Path(folder), nodes=3, overrides=overrides) as cluster:
            cluster.start()
            cluster.wait_serving()
            created_s = create_streams(cluster, streams)
            wait_at_rest(cluster, streams)
            time.sleep(2)  # let the last re-acks go out
            cpu = idle_cpu(cluster, idle_s)
            lat = sorted(latencies_ms(cluster, publishes))
            rss = [psutil.Process(p.pid).memory_info().rss // 1024 for p in cluster.procs.values()]
            restart_s, fresh_s = restart(cluster)
    return {
        "streams": streams,
        "create_s": round(created_s, 1),
        "idle_cpu_pct": [round(c, 2) for c in cpu],
        "p50_ms": round(statistics.median(lat), 3),
        "p99_ms": round(lat[int(len(lat) * 0.99) - 1], 3),
        "rss_mb": [round(r / 1024) for r in rss],
        "restart_s": round(restart_s, 1),
        "fresh_publish_s": round(fresh_s, 1),
    }


def restart(cluster: LocalCluster) -> tuple[float, float]:
    """Stop every node, start them all again: seconds until every node serves, and until a
    publish on a stream nobody held before is acknowledged."""
    for node_id in sorted(cluster.procs):
        cluster.stop(node_id)
    started = time.monotonic()
    cluster.start()
    cluster.wait_serving(timeout_s=300)
    serving = time.monotonic() - started
    with Producer(config=cluster.config_path, timeout_s=300) as producer:
        producer.publish("after.restart", b"x")
    return serving, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10_000)
    parser.add_argument("--publishes", type=int, default=2000)
    parser.add_argument("--idle-s", type=float, default=20)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    one = measure(1, args.publishes, args.idle_s)
    many = measure(args.streams, args.publishes, args.idle_s)
    print(
        "| streams | create s | idle CPU per node % | publish p50 / p99 ms | RSS per node MB "
        "| restart: serving / publishing s |"
    )
    print("|---|---|---|---|---|---|")
    for row in (one, many):
        cpu = " / ".join(f"{c:.1f}" for c in row["idle_cpu_pct"])  # type: ignore[attr-defined]
        rss = " / ".join(str(r) for r in row["rss_mb"])  # type: ignore[attr-defined]
        print(
            f"| {row['streams']} | {row['create_s']} | {cpu} | "
            f"{row['p50_ms']} / {row['p99_ms']} | {rss} | "
            f"{row['restart_s']} / {row['fresh_publish_s']} |"
        )
    cpu_ok = max(many["idle_cpu_pct"]) < 5  # type: ignore[call-overload]
    p50 = float(many["p50_ms"]) / float(one["p50_ms"])  # type: ignore[arg-type]
    p99 = float(many["p99_ms"]) / float(one["p99_ms"])  # type: ignore[arg-type]
    print(
        f"\nidle CPU under 5% per node: {'met' if cpu_ok else 'NOT met'}; latency with "
        f"{args.streams} idle streams / with one: p50 {p50:.2f}x, p99 {p99:.2f}x "
        f"({'met' if max(p50, p99) <= 1.2 else 'NOT met'}: within 1.2x); serving again "
        f"after a restart within 10 s: {'met' if float(many['restart_s']) < 10 else 'NOT met'}"  # type: ignore[arg-type]
    )
    if args.out:
        args.out.write_text(json.dumps({"one": one, "many": many}, indent=1))


if __name__ == "__main__":
    main()
