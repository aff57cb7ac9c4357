"""``relay bench``: publish N transactions through one pipelined producer; report
throughput and latency percentiles."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass

from relay.client.producer import Producer, PublishFuture


@dataclass(frozen=True, slots=True)
class BenchSettings:
    config: str
    stream: str
    count: int
    size: int
    window: int
    batch: int
    rate: float | None
    node: int | None


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
        return asdict(self)

    def text(self) -> str:
        s = self.settings
        return (
            f"settings: stream={s.stream} count={s.count} size={s.size}B window={s.window} "
            f"batch={s.batch} rate={s.rate or 'max'} node={s.node or 'any'}\n"
            f"acked {self.acked}, failed {self.failed} in {self.seconds:.2f} s: "
            f"{self.tx_per_s:,.0f} tx/s\n"
            f"ack latency ms: p50 {self.p50_ms:.3f}  p99 {self.p99_ms:.3f}  "
            f"p99.9 {self.p999_ms:.3f}  max {self.max_ms:.3f}"
        )


def run_bench(settings: BenchSettings, progress: bool = True) -> BenchReport:
    payload = b"x" * settings.size
    latencies: list[float] = []
    failed = 0
    with Producer(
        config=settings.config, node=settings.node, window=settings.window, batch_max=settings.batch
    ) as producer:
        producer.publish(settings.stream, payload)  # warm up: connect, create the stream
        pending: list[tuple[float, PublishFuture]] = []
        started = time.perf_counter()
        interval = 1.0 / settings.rate if settings.rate else 0.0
        for i in range(settings.count):
            if interval:
                target = started + i * interval
                while time.perf_counter() < target:
                    producer.poll()
            pending.append((time.perf_counter(), producer.send(settings.stream, payload)))
            if len(pending) >= 4 * settings.batch * settings.window or i == settings.count - 1:
                failed += _settle(producer, pending, latencies, final=i == settings.count - 1)
            if progress and i % 5000 == 0:
                _progress(i, settings.count, started)
        failed += _settle(producer, pending, latencies, final=True)
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


def _settle(
    producer: Producer,
    pending: list[tuple[float, PublishFuture]],
    latencies: list[float],
    final: bool,
) -> int:
    """Record finished publishes (all of them when ``final``); count failures."""
    if final:
        producer.flush()
    failed = 0
    keep = []
    for sent, future in pending:
        if not future.done():
            keep.append((sent, future))
            continue
        if future.failed():
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
