"""The workload of a chaos run, through the public clients, with every operation recorded.

Producers (one per node and stream, each starting at its node and failing over like any
client; with the queue workload each message is a job with one of four priorities) publish at a
steady total rate and record each message's outcome: ``ok`` with its seq
and the node that acknowledged it, ``fail`` when the cluster refused it for good, ``unknown``
when it timed out (it may or may not be in the stream). Consumers (one per node and stream,
from the earliest tx) record every tx they receive. An observer records each node's state
(serving, fenced, leaving, or unreachable) whenever it changes, and every sighting of a fenced
node.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from relay import Consumer, Producer, errors
from relay.queue.jobs import job_headers
from relay.runtime.launcher import query_status
from relay.runtime.local_cluster import LocalCluster

PUBLISH_TIMEOUT_S = 10.0
PER_ROUND = 4  # messages a producer sends before it waits for their answers
KEYS = 50  # the keys a keyed workload updates
TOMBSTONE_EVERY = 17  # and one of its updates in this many deletes its key


class History:
    """JSON-lines files under one folder, written by many threads."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._files: dict[str, IO[str]] = {}
        self._lock = threading.Lock()

    def writer(self, name: str) -> Callable[[dict[str, Any]], None]:
        def write(row: dict[str, Any]) -> None:
            line = json.dumps(row, separators=(",", ":")) + "\n"
            with self._lock:
                f = self._files.get(name)
                if f is None:
                    path = self.folder / f"{name}.jsonl"
                    f = self._files[name] = path.open("a", buffering=1)  # a crash keeps lines
                f.write(line)

        return write

    def close(self) -> None:
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()


class Workload:
    def __init__(
        self,
        cluster: LocalCluster,
        streams: list[str],
        rate: float,
        history: History,
        clock: Callable[[], float],
        jobs: bool = False,
        keyed: bool = False,
    ) -> None:
        self.cluster = cluster
        self.jobs = jobs  # each message a job with a priority (the queue workload)
        self.keyed = keyed  # each message an update of a key, some tombstones (compacted)
        self.streams = streams
        self.clock = clock
        self.ops = history.writer("ops")
        self.deliveries = history.writer("deliveries")
        self.states = history.writer("states")
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.errors: list[str] = []
        node_ids = [spec.id for spec in cluster.config.nodes]
        pairs = [(n, s) for n in node_ids for s in streams]
        self.interval = len(pairs) * PER_ROUND / rate  # seconds between one producer's rounds
        self.delivered: dict[str, int] = {}  # consumer name -> txs received
        self.producers = [
            threading.Thread(
                target=self._produce, args=(n, s), name=f"produce-{s}@{n}", daemon=True
            )
            for n, s in pairs
        ]
        self.consumers = [
            threading.Thread(
                target=self._consume, args=(n, s), name=f"consume-{s}@{n}", daemon=True
            )
            for n, s in pairs
        ]
        self.observer = threading.Thread(
            target=self._observe, args=(node_ids,), name="observe", daemon=True
        )

    def start(self) -> None:
        for t in [*self.consumers, *self.producers, self.observer]:
            t.start()

    def finish_producing(self) -> None:
        self.stop_producing.set()
        for t in self.producers:
            if t.is_alive():
                t.join(PUBLISH_TIMEOUT_S + 30)

    def finish_consuming(self) -> None:
        self.stop_consuming.set()
        for t in [*self.consumers, self.observer]:
            if t.is_alive():
                t.join(30)

    # --- producers ----------------------------------------------------------------------

    def _produce(self, node: int, stream: str) -> None:
        name = f"{stream}@{node}"
        try:
            with Producer(
                config=self.cluster.config_path,
                node=node,
                producer_id=f"chaos-{name}",
                timeout_s=PUBLISH_TIMEOUT_S,
                request_timeout_s=1.0,
                window=2,
                batch_max=PER_ROUND,
            ) as producer:
                next_round = self.clock()
                msg_id = 0
                while not self.stop_producing.is_set():
                    sent = []
                    for _ in range(PER_ROUND):
                        msg_id += 1
                        payload = f"{name}:{msg_id}".encode()
                        headers = job_headers(msg_id % 4 * 60, None) if self.jobs else None
                        key = f"k{(msg_id * 7 + node) % KEYS}" if self.keyed else None
                        if key is not None and msg_id % TOMBSTONE_EVERY == 0:
                            payload = b""  # a tombstone: the key is deleted
                        future = producer.send(stream, payload, msg_id, key=key, headers=headers)
                        sent.append((msg_id, payload, key, self.clock(), future))
                    producer.flush()
                    base = time.perf_counter() - self.clock()
                    for mid, payload, key, t0, future in sent:
                        row = self._outcome(
                            stream,
                            producer.producer_id,
                            node,
                            mid,
                            payload,
                            t0,
                            future.done_at - base,
                            future,
                        )
                        self.ops({**row, "key": key} if key is not None else row)
                    next_round += self.interval
                    pause = next_round - self.clock()
                    if pause > 0:
                        self.stop_producing.wait(pause)
                    else:
                        next_round = self.clock()  # behind (a fault): do not burst to catch up
        except Exception as exc:  # reported in the run summary; the checker sees the gap
            self.errors.append(f"producer {name}: {exc!r}")

    @staticmethod
    def _outcome(
        stream: str,
        producer: str,
        node: int,
        msg_id: int,
        payload: bytes,
        t0: float,
        t1: float,
        future: Any,
    ) -> dict[str, Any]:
        row: dict[str, Any] = {
            "stream": stream,
            "producer": producer,
            "msg_id": msg_id,
            "payload": payload.decode(),
            "node": node,
            "t0": round(t0, 4),
            "t1": round(t1, 4),
        }
        try:
            ack = future.result()
        except errors.RelayError as exc:
            definite = exc.code in (errors.BAD_REQUEST, errors.NO_REPLICAS)
            row.update(outcome="fail" if definite else "unknown", error=str(exc)[:200])
        else:
            row.update(outcome="ok", seq=ack.seq, digest=ack.digest.hex(), acked_by=ack.node)
        return row

    # --- consumers ----------------------------------------------------------------------

    def _consume(self, node: int, stream: str) -> None:
        name = f"{stream}@{node}"
        self.delivered[name] = 0
        try:
            with Consumer(
                stream, config=self.cluster.config_path, node=node, wait_ms=200, reply_timeout_s=1.0
            ) as consumer:
                while not self.stop_consuming.is_set():
                    for tx in consumer.poll(timeout_s=0.5):
                        self.deliveries(
                            {
                                "consumer": name,
                                "stream": stream,
                                "node": consumer.node.node_id if consumer.node else None,
                                "t": round(self.clock(), 4),
                                "seq": tx.seq,
                                "digest": tx.digest.hex(),
                                "key": tx.key.decode() if tx.key is not None else None,
                            }
                        )
                        self.delivered[name] += 1
        except errors.RelayError as exc:  # data loss or a digest mismatch: a violation
            self.deliveries(
                {"consumer": name, "stream": stream, "t": self.clock(), "error": str(exc)}
            )
        except Exception as exc:
            self.errors.append(f"consumer {name}: {exc!r}")

    # --- node states --------------------------------------------------------------------

    def _observe(self, node_ids: list[int]) -> None:
        """Each node's state: a row when it changes, and every sighting of a fenced node, with
        when the question was asked and when the answer came (the state held in between)."""
        last: dict[int, str] = {}
        while not self.stop_consuming.is_set():
            for n in node_ids:
                asked = self.clock()
                status = query_status(self.cluster.config.node(n), 150, self.cluster.client_pair)
                state = status.state if status else "unreachable"
                if last.get(n) != state or state == "fenced":
                    last[n] = state
                    t = round(self.clock(), 4)
                    self.states({"node": n, "asked": round(asked, 4), "t": t, "state": state})
            self.stop_consuming.wait(0.05)
