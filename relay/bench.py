"""``relay bench``: publish N transactions through one producer; report throughput and
ack latency percentiles.

Three modes: one publish at a time (``--window 1 --batch 1``: the latency of a single
publish in flight), pipelined as fast as acks come back (the default), and open loop at a
fixed ``--rate`` (latency at a chosen load). Latency is measured from ``send`` to the ack.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass

from relay.client.producer import Producer, PublishFuture
from relay.gc_tuning import tune_gc


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

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "mode": self.settings.mode}

    def text(self) -> str:
        s = self.settings
        return (
            f"settings: {s.mode}; stream={s.stream} count={s.count} size={s.size}B "
            f"window={s.window} batch={s.batch} node={s.node or 'any'}\n"
            f"acked {self.acked}, failed {self.failed} in {self.seconds:.2f} s: "
            f"{self.tx_per_s:,.0f} tx/s\n"
            f"ack latency ms: p50 {self.p50_ms:.3f}  p99 {self.p99_ms:.3f}  "
            f"p99.9 {self.p999_ms:.3f}  max {self.max_ms:.3f}"
        )


def run_bench(settings: BenchSettings, progress: bool = True) -> BenchReport:
    payload = b"x" * settings.size
    with Producer(
        config=settings.config,
        nodes=settings.servers,
        node=settings.node,
        window=settings.window,
        batch_max=settings.batch,
    ) as producer:
        producer.publish(settings.stream, payload)  # warm up: connect, create the stream
        tune_gc()  # as the node does, and as the peer's client gets in scripts/bench.sh
        started = time.perf_counter()
        if settings.mode == "one publish in flight":
            latencies, failed = _one_at_a_time(producer, settings, payload, started, progress)
        else:
            latencies, failed = _pipelined(producer, settings, payload, started, progress)
        seconds = time.perf_counter() - started
    if progress:
        _progress(settings.count, settings.count, started)
        sys.stderr.write("\n")
    latencies.sort()
    return BenchReport(
        settings=settings,
        acked=len(latencies),
        failed=failed,
        seconds=seconds,
        tx_per_s=len(latencies) / seconds if seconds else 0.0,
        p50_ms=_pct(latencies, 0.50),
        p99_ms=_pct(latencies, 0.99),
        p999_ms=_pct(latencies, 0.999),
        max_ms=latencies[-1] if latencies else 0.0,
    )


def _one_at_a_time(
    producer: Producer, settings: BenchSettings, payload: bytes, started: float, progress: bool
) -> tuple[list[float], int]:
    latencies: list[float] = []
    for i in range(settings.count):
        sent = time.perf_counter()
        producer.publish(settings.stream, payload)
        latencies.append((time.perf_counter() - sent) * 1000)
        if progress and i % 500 == 0:
            _progress(i, settings.count, started)
    return latencies, 0


def _pipelined(
    producer: Producer, settings: BenchSettings, payload: bytes, started: float, progress: bool
) -> tuple[list[float], int]:
    latencies: list[float] = []
    failed = 0
    pending: list[tuple[float, PublishFuture]] = []
    interval = 1.0 / settings.rate if settings.rate else 0.0
    settle_every = 4 * settings.batch * settings.window
    for i in range(settings.count):
        if interval:
            due = started + i * interval
            while time.perf_counter() < due:
                producer.poll()
        pending.append((time.perf_counter(), producer.send(settings.stream, payload)))
        if len(pending) >= settle_every:
            failed += _settle(pending, latencies)
        if progress and i % 5000 == 0:
            _progress(i, settings.count, started)
    producer.flush()
    failed += _settle(pending, latencies)
    return latencies, failed


def _settle(pending: list[tuple[float, PublishFuture]], latencies: list[float]) -> int:
    """Record the finished publishes, keep the rest; count failures."""
    failed = 0
    keep = []
    for sent, future in pending:
        if not future.done():
            keep.append((sent, future))
        elif future.failed():
            failed += 1
        else:
            latencies.append((future.done_at - sent) * 1000)
    pending[:] = keep
    return failed


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def _progress(done: int, total: int, started: float) -> None:
    elapsed = time.perf_counter() - started
    width = 30
    filled = int(width * done / max(1, total))
    rate = done / elapsed if elapsed else 0.0
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {rate:,.0f} tx/s")
    sys.stderr.flush()
