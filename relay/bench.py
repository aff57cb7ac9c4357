"""``relay bench``: publish N transactions through one or more producers, optionally read
them back with consumers; report throughput and latency percentiles.

Three modes: one publish at a time (``--window 1 --batch 1``: the latency of a single publish in
flight), pipelined as fast as acks come back (the default), and open loop at a fixed ``--rate``
(latency at a chosen load). In open loop a message's latency counts from the time it was due to
be sent, not from when the producer got round to it, so a stall is charged to every message it
delayed (no coordinated omission, as wrk2 and HdrHistogram measure); the producer hands what
is queued to the node once a millisecond (``LINGER_S``: spinning on its socket would take a
core from the nodes and send requests of a message or two), so it sleeps until the next
hand-over, or the next message's due time if that is later, and then queues every message due
by then (a sleep per message would cost the machine's cores a wake-up each and send nothing
sooner). With ``--consumers M`` each of M consumers reads the stream and measures end to
end, from a message's due time (carried in its first 8 bytes) to its arrival at the consumer.
Producers and consumers are processes of their own; the progress line counts acknowledged
messages.
"""

from __future__ import annotations

import multiprocessing as mp
import struct
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from multiprocessing.sharedctypes import Synchronized
from queue import Empty
from typing import Any

from relay.client.consumer import Consumer
from relay.client.futures import PublishFuture
from relay.client.producer import Producer
from relay.gc_tuning import tune_gc

STAMP = struct.Struct("<d")  # a message's due time (Unix seconds), when consumers measure
WARM_UP = b"warm"  # shorter than a stamp: consumers skip it
CONSUMER_IDLE_S = 10.0  # a consumer gives up once nothing arrived this long after the end
# open loop: what is queued goes to the node at least this often (as Kafka's linger.ms), and
# a message due sooner than SLEEP_MIN_S is sent without a sleep
LINGER_S, SLEEP_MIN_S = 0.001, 50e-6


class BenchError(RuntimeError):
    """A producer or consumer process could not run (the cluster is down, say)."""


@dataclass(frozen=True, slots=True)
class BenchSettings:
    config: str | None
    servers: list[str] | None
    stream: str
    count: int
    size: int
    window: int
    batch: int
    rate: float | None
    node: int | None
    producers: int = 1
    consumers: int = 0

    @property
    def mode(self) -> str:
        if self.rate:
            return f"open loop at {self.rate:,.0f} tx/s"
        if self.window == 1 and self.batch == 1:
            return "one publish in flight"
        return "pipelined"


@dataclass(frozen=True, slots=True)
class BenchReport:
    settings: BenchSettings
    acked: int
    failed: int
    seconds: float
    tx_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float
    consumed: int = 0  # messages the consumers received, over all of them
    e2e_p50_ms: float = 0.0  # from due time to a consumer's receipt
    e2e_p99_ms: float = 0.0
    e2e_max_ms: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "mode": self.settings.mode}

    def text(self) -> str:
        s = self.settings
        lines = [
            f"settings: {s.mode}; stream={s.stream} count={s.count} size={s.size}B "
            f"window={s.window} batch={s.batch} node={s.node or 'any'} "
            f"producers={s.producers} consumers={s.consumers}",
            f"acked {self.acked}, failed {self.failed} in {self.seconds:.2f} s: "
            f"{self.tx_per_s:,.0f} tx/s",
            f"ack latency ms: p50 {self.p50_ms:.3f}  p99 {self.p99_ms:.3f}  "
            f"p99.9 {self.p999_ms:.3f}  max {self.max_ms:.3f}",
        ]
        if s.consumers:
            lines.append(
                f"end to end ms ({self.consumed} received): p50 {self.e2e_p50_ms:.3f}  "
                f"p99 {self.e2e_p99_ms:.3f}  max {self.e2e_max_ms:.3f}"
            )
        return "\n".join(lines)


def run_bench(settings: BenchSettings, progress: bool = True) -> BenchReport:
    ctx = mp.get_context("spawn")
    results: Any = ctx.Queue()
    acked: Synchronized[int] = ctx.Value("q", 0)
    ready: Synchronized[int] = ctx.Value("i", 0)  # workers connected and warmed up
    go = ctx.Event()
    with Producer(config=settings.config, nodes=settings.servers, node=settings.node) as warm:
        warm.publish(settings.stream, WARM_UP)  # the stream exists before anyone reads it
    workers = [
        ctx.Process(target=_consume, args=(settings, results, ready, go), daemon=True)
        for _ in range(settings.consumers)
    ] + [
        ctx.Process(target=_produce, args=(settings, i, results, acked, ready, go), daemon=True)
        for i in range(settings.producers)
    ]
    for worker in workers:
        worker.start()
    try:
        deadline = time.monotonic() + 120
        while ready.value < len(workers):  # every process connected and warmed up
            if not all(w.is_alive() for w in workers) or time.monotonic() > deadline:
                raise BenchError("a bench process did not get ready; is the cluster up?")
            time.sleep(0.05)
        go.set()
        found = _gather(settings, workers, results, acked, progress)
    finally:
        for worker in workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.kill()
    return _report(settings, found)


def _gather(
    settings: BenchSettings,
    workers: list[Any],
    results: Any,
    acked: Synchronized[int],
    progress: bool,
) -> list[tuple[str, Any]]:
    """Every worker's result, printing the acknowledged count meanwhile."""
    found: list[tuple[str, Any]] = []
    started = time.perf_counter()
    while len(found) < len(workers):
        try:
            found.append(results.get(timeout=0.25))
        except Empty:
            if not any(w.is_alive() for w in workers) and results.empty():
                raise BenchError("a bench process died without a result") from None
        if progress:
            _progress(acked.value, settings.count, started)
    if progress:
        _progress(acked.value, settings.count, started)
        sys.stderr.write("\n")
    return found


def _report(settings: BenchSettings, found: list[tuple[str, Any]]) -> BenchReport:
    produced = [r for kind, r in found if kind == "produced"]
    latencies = sorted(x for r in produced for x in r["latencies"])
    e2e = sorted(x for kind, r in found if kind == "consumed" for x in r)
    seconds = max(r["ended"] for r in produced) - min(r["started"] for r in produced)
    return BenchReport(
        settings=settings,
        acked=len(latencies),
        failed=sum(r["failed"] for r in produced),
        seconds=seconds,
        tx_per_s=len(latencies) / seconds if seconds else 0.0,
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        p999_ms=percentile(latencies, 0.999),
        max_ms=latencies[-1] if latencies else 0.0,
        consumed=len(e2e),
        e2e_p50_ms=percentile(e2e, 0.50),
        e2e_p99_ms=percentile(e2e, 0.99),
        e2e_max_ms=e2e[-1] if e2e else 0.0,
    )


def _produce(
    settings: BenchSettings,
    index: int,
    results: Any,
    acked: Synchronized[int],
    ready: Synchronized[int],
    go: Any,
) -> None:
    """One producer's share of the messages (and of the rate), timed from ``go``."""
    share = settings.count // settings.producers + (index < settings.count % settings.producers)
    rate = settings.rate / settings.producers if settings.rate else None
    padding = b"x" * max(0, settings.size - STAMP.size)
    with Producer(
        config=settings.config,
        nodes=settings.servers,
        node=settings.node,
        window=settings.window,
        batch_max=settings.batch,
    ) as producer:
        producer.publish(settings.stream, WARM_UP)  # connected before the clock starts
        tune_gc()  # as the node does, and as the peer's client gets in scripts/bench.sh
        _ready(ready, go)
        started = time.perf_counter()
        wall_offset = time.time() - started  # due times as Unix seconds, for the consumers
        latencies: list[float] = []
        pending: deque[tuple[float, PublishFuture]] = deque()
        interval = 1.0 / rate if rate else 0.0
        failed = 0
        handed = started  # when what was queued last went to the node (open loop)
        for i in range(share):
            due = started + i * interval if interval else time.perf_counter()
            if interval and due > time.perf_counter():  # nothing leaves before the hand-over
                _wait_until(producer, max(due, handed + LINGER_S))
            payload = STAMP.pack(due + wall_offset) + padding if settings.consumers else padding
            pending.append((due, producer.send(settings.stream, payload)))
            if settings.window == 1 and settings.batch == 1:
                producer.flush()  # one publish in flight
            elif interval and time.perf_counter() - handed >= LINGER_S:
                producer.poll()  # hand over what is queued, take answers in
                handed = time.perf_counter()
            if pending[0][1].done():
                failed += _settle(pending, latencies, acked)
        producer.flush()
        failed += _settle(pending, latencies, acked)
        ended = time.perf_counter()
    results.put(
        ("produced", {"latencies": latencies, "failed": failed, "started": started, "ended": ended})
    )


def _wait_until(producer: Producer, due: float) -> None:
    """Wait until ``due`` (``time.perf_counter()``) in the producer's poll, so an answer is
    taken in (and its latency stamped) when it arrives, not at the next hand-over; a message
    due within ``SLEEP_MIN_S`` goes at once."""
    while (ahead := due - time.perf_counter()) >= SLEEP_MIN_S:
        producer.poll(ahead * 1000)


def _consume(settings: BenchSettings, results: Any, ready: Synchronized[int], go: Any) -> None:
    """Read the stream from its head until every message arrived (or it went quiet); the
    end-to-end latency of each."""
    latencies: list[float] = []
    with Consumer(
        settings.stream, config=settings.config, nodes=settings.servers, start="latest"
    ) as consumer:
        consumer.poll(timeout_s=0.5)  # the starting point is fixed before anything is sent
        _ready(ready, go)
        quiet_since = time.monotonic()
        while len(latencies) < settings.count and time.monotonic() - quiet_since < CONSUMER_IDLE_S:
            batch = consumer.poll(timeout_s=0.5)
            now = time.time()
            for tx in batch:
                if len(tx.payload) >= STAMP.size:
                    latencies.append((now - STAMP.unpack_from(tx.payload)[0]) * 1000)
            if batch:
                quiet_since = time.monotonic()
    results.put(("consumed", latencies))


def _ready(ready: Synchronized[int], go: Any) -> None:
    with ready.get_lock():
        ready.value += 1
    go.wait()


def _settle(
    pending: deque[tuple[float, PublishFuture]], latencies: list[float], acked: Synchronized[int]
) -> int:
    """Record the finished publishes at the front (they finish about in send order, so this
    costs what it records); count failures."""
    failed = done = 0
    while pending and pending[0][1].done():
        due, future = pending.popleft()
        if future.failed():
            failed += 1
        else:
            latencies.append((future.done_at - due) * 1000)
            done += 1
    with acked.get_lock():
        acked.value += done
    return failed


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values (0 for none)."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _progress(done: int, total: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    width = 30
    filled = int(width * done / max(1, total))
    rate = done / elapsed if elapsed else 0.0
    sys.stderr.write(
        f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} acknowledged {rate:,.0f} tx/s"
    )
    sys.stderr.flush()
