"""One chaos run: a fresh local cluster, the workload, the seeded faults, the final state.

Order of events: start the cluster (with admin hooks); start consumers, producers and the state
observer; let the nemesis play the schedule; at ``duration`` stop the producers, heal every
fault, wait until every replica serves with equal digests (the settle); wait until every
consumer has the whole timeline; record each replica's final head and one full timeline per
stream; stop every process. An interrupt (Ctrl-C) still heals and stops everything.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from chaos.nemesis import Nemesis
from chaos.queue_worker import JOB_STREAM
from chaos.queue_workload import QueueWorkload
from chaos.schedule import Fault
from chaos.workload import History, Workload
from relay import Consumer
from relay.client.table import newest_by_key
from relay.runtime.launcher import query_status
from relay.runtime.local_cluster import LocalCluster

STREAMS = ["orders.chaos", "payments.chaos", "events.chaos"]
KV_STREAM = "kv.chaos"  # the compacted workload's stream
# the compacted workload's cluster: its stream compacted, in small segments, with a dedup window
# and a tombstone retention that let a pass take most of a run (both are at least a second)
KV_BLOCK = """
[[stream]]
pattern = "kv.*"
cleanup = "compact"
segment_bytes = 32768
delete_retention_ms = 3000
"""
KV_DEDUP_MS = 5000
SETTLE_TIMEOUT_S = 90.0
READ_STALL_S = 10.0  # reading a final timeline fails once nothing came for this long
# A corrupt fault flips a byte of a sealed segment, but at the default segment_bytes (64 MiB) a
# run's logs never roll: a run with corrupt faults rolls them every few seconds of records.
CORRUPT_SEGMENT_BYTES = 32 << 10


def run(
    out: Path,
    nodes: int,
    duration_s: float,
    faults: list[Fault],
    rate: float,
    settings: dict[str, Any],
    say: Any = print,
    net: str = "local",
    workload_kind: str = "stream",
) -> None:
    """``net``: "local" (every node on 127.0.0.1, network faults by admin hooks) or "netns"
    (each node in a namespace of its own, network faults by nftables). ``workload_kind``:
    "stream" (producers and consumers on three streams), "queue" (producers of jobs on one
    stream, and worker processes, some killed with SIGKILL: ``chaos.queue_workload``) or
    "compacted" (updates of keys, some tombstones, on a compacted stream)."""
    streams = {"queue": [JOB_STREAM], "compacted": [KV_STREAM]}.get(workload_kind, STREAMS)
    out.mkdir(parents=True, exist_ok=True)
    overrides: dict[str, int | str] = {"fsync": settings.get("fsync", "always")}
    if any(f.kind == "corrupt" for f in faults):
        overrides["segment_bytes"] = CORRUPT_SEGMENT_BYTES
    compacted = workload_kind == "compacted"
    if compacted:
        overrides["dedup_window_ms"] = KV_DEDUP_MS
    schedule = [f.to_json() for f in faults]
    (out / "run.json").write_text(
        json.dumps(
            {**settings, "streams": streams, "overrides": overrides, "schedule": schedule},
            indent=1,
        )
    )
    history = History(out)
    origin = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - origin

    with LocalCluster(
        out / "cluster",
        nodes=nodes,
        overrides=overrides,
        admin=True,
        netns=net == "netns",
        streams=KV_BLOCK if compacted else "",
    ) as cluster:
        cluster.start()
        cluster.wait_serving()
        origin = time.perf_counter()
        jobs = workload_kind == "queue"
        workload = Workload(cluster, streams, rate, history, clock, jobs=jobs, keyed=compacted)
        queue = None
        if workload_kind == "queue":
            queue = QueueWorkload(cluster, out, int(settings["seed"]), duration_s)
        write_fault = history.writer("faults")

        def record(row: dict[str, Any]) -> None:
            write_fault(row)
            nodes = ",".join(str(n) for n in row["nodes"])
            say(f"{row['t']:7.1f} s  {row['event']:<5} {row['kind']} (node {nodes})")

        nemesis = Nemesis(cluster, faults, clock, record)
        try:
            if queue is not None:
                queue.start()
            workload.start()
            nemesis.start()
            say(f"running {duration_s:.0f} s with {len(faults)} faults ...")
            while clock() < duration_s:
                time.sleep(0.2)
            say("stopping the producers, healing every fault ...")
            workload.finish_producing()
            nemesis.join()
            nemesis.heal_all()
            settled, heads = settle(cluster, streams, clock, out)
            say(f"settled {settled:.1f} s after the heal")
            if queue is not None:
                drained, info = queue.drain()
                counts = f"acked {info.get('acked')}, dead {info.get('dead')}"
                say(f"work group {'drained' if drained else 'NOT drained'}: {counts}")
            timelines = read_timelines(cluster, heads)
            if compacted:
                write_tables(out, cluster, heads)
            else:  # a compacted timeline is shorter than what a consumer received
                wait_consumers(workload, {s: len(t) for s, t in timelines.items()})
            if queue is not None:
                queue.finish()
                queue.write_final()
        finally:  # also on an interrupt: undo the faults, stop the clients, keep the history
            if queue is not None:
                queue.finish()
            nemesis.join()
            nemesis.heal_all()
            workload.finish_producing()
            workload.finish_consuming()
            history.close()
        write_final(out, heads, timelines)
        for problem in nemesis.errors + workload.errors:
            say(f"note: {problem}")


Heads = dict[str, dict[int, tuple[int, str]]]  # stream -> node -> (verified seq, digest)


def settle(cluster: LocalCluster, streams: list[str], clock: Any, out: Path) -> tuple[float, Heads]:
    """Wait until every node serves and each stream has one verified head everywhere; if it
    does not, keep every node's status in ``unsettled.json`` and fail."""
    started = clock()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        heads = final_heads(cluster, streams)
        if heads is not None and all(len(set(h.values())) <= 1 for h in heads.values()):
            return float(clock() - started), heads
        time.sleep(0.2)
    statuses = {
        spec.id: query_status(spec, 1000, cluster.client_pair) for spec in cluster.config.nodes
    }
    raw = {n: s.to_wire() if s else None for n, s in statuses.items()}
    (out / "unsettled.json").write_text(json.dumps(raw, indent=1))
    raise RuntimeError(
        f"the cluster did not settle within {SETTLE_TIMEOUT_S:.0f} s of the heal; "
        f"node statuses are in {out / 'unsettled.json'}"
    )


def final_heads(cluster: LocalCluster, streams: list[str]) -> Heads | None:
    """Each replica's verified head per stream, or None while a node is not serving or lags."""
    heads: Heads = {s: {} for s in streams}
    for spec in cluster.config.nodes:
        status = query_status(spec, 1000, cluster.client_pair)
        if status is None or status.state != "serving":
            return None
        for s in streams:
            info = status.stream(s)
            if info is None:
                continue
            if info.unverified_txs:
                return None
            heads[s][spec.id] = (info.verified_seq, info.digest)
    return heads


def read_timelines(cluster: LocalCluster, heads: Heads) -> dict[str, list[list[Any]]]:
    """Each stream's whole verified timeline, read (and digest-checked) from one replica:
    rows ``[seq, digest, producer, msg_id, payload, key]``."""
    timelines = {}
    for stream, per_node in heads.items():
        if not per_node:
            continue
        node = min(per_node)
        rows: list[list[Any]] = []
        with Consumer(stream, config=cluster.config_path, node=node) as consumer:
            stalled = time.monotonic() + READ_STALL_S
            while not consumer.at_end() or consumer.verified_head is None:
                txs = consumer.poll(timeout_s=1)  # none while it passes a compacted range
                if txs:
                    stalled = time.monotonic() + READ_STALL_S
                elif time.monotonic() > stalled:
                    raise RuntimeError(f"could not read {stream} to its end from node {node}")
                rows += [
                    [
                        t.seq,
                        t.digest.hex(),
                        t.producer_id,
                        t.msg_id,
                        t.payload.decode(),
                        t.key.decode() if t.key is not None else None,
                    ]
                    for t in txs
                ]
        timelines[stream] = rows
    return timelines


def write_tables(out: Path, cluster: LocalCluster, heads: Heads) -> None:
    """Every replica's table of each stream, read as a consumer reads it from the earliest
    (``relay consume --compacted-view``): ``tables.json``, stream -> node -> key -> seq."""
    tables: dict[str, dict[str, dict[str, int]]] = {}
    for stream, per_node in heads.items():
        for node in sorted(per_node):
            with Consumer(stream, config=cluster.config_path, node=node) as consumer:
                live = newest_by_key(consumer)
            table = {t.key.decode(): t.seq for t in live if t.key is not None}
            tables.setdefault(stream, {})[str(node)] = table
    (out / "tables.json").write_text(json.dumps(tables))


def wait_consumers(workload: Workload, lengths: dict[str, int], timeout_s: float = 60.0) -> None:
    """Until every consumer received its stream's whole timeline (or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(n >= lengths.get(c.split("@")[0], 0) for c, n in workload.delivered.items()):
            return
        time.sleep(0.2)


def write_final(out: Path, heads: Heads, timelines: dict[str, list[list[Any]]]) -> None:
    with (out / "final.jsonl").open("w") as f:
        for stream, per_node in heads.items():
            for node, (seq, digest) in sorted(per_node.items()):
                row = {"stream": stream, "node": node, "verified_seq": seq, "digest": digest}
                f.write(json.dumps(row) + "\n")
            if stream in timelines:
                timeline = timelines[stream]
                head = {
                    "stream": stream,
                    "node": min(per_node),
                    "verified_seq": timeline[-1][0],
                    "digest": timeline[-1][1],
                    "timeline": timeline,
                }
                f.write(json.dumps(head) + "\n")
