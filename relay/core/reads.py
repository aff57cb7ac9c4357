"""Reads: verified txs, spans, redirects, and consumer fetches parked until data arrives.

How this works: a read returns up to ``limit`` verified txs after a seq, with the digest
before the first so the reader can re-fold the chain. A node that does not replicate the
stream redirects to the replicas (live ones first); one that is fenced, leaving or still
catching up refuses with ``unavailable`` and names the others. A fetch that finds nothing new
is *parked* (long poll) until the stream's verified seq moves or its wait runs out on elapsed
time; parked fetches are bounded in number, and beyond the bound a fetch is answered at once.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import replace
from itertools import pairwise

from relay import errors
from relay.core.events import (
    FetchRequested,
    LogRead,
    LogSpan,
    ReadResult,
    Redirect,
    Rejected,
    SpanResult,
)
from relay.core.messages import FETCH_BYTES_MAX, within_bytes
from relay.core.timeline import Timeline
from relay.core.timer import Timeout

FETCH_TXS_MAX = 5000  # txs in one fetch answer
FETCH_WAIT_MS_MAX = 30_000  # the longest a fetch may be parked
PARKED_FETCHES_MAX = 10_000  # parked fetches per node, over all streams


def by_liveness(nodes: Iterable[int], up: set[int]) -> tuple[int, ...]:
    return tuple(sorted(nodes, key=lambda n: (n not in up, n)))


def redirect(stream: str, replicas: tuple[int, ...], up: set[int]) -> Redirect | Rejected:
    """The answer for a stream this node does not replicate."""
    if not replicas:
        return Rejected(
            errors.NO_REPLICAS,
            f"no node's streams patterns match {stream!r}; check the stream name or "
            "the cluster config",
        )
    return Redirect(stream, by_liveness(replicas, up))


def unavailable(why: str, replicas: tuple[int, ...], self_id: int, up: set[int]) -> Rejected:
    others = tuple(r for r in by_liveness(replicas, up) if r != self_id)
    return Rejected(errors.UNAVAILABLE, why, others)


def readable(
    stream: str,
    replicas: tuple[int, ...],
    self_id: int,
    up: set[int],
    serving_as: str | None,
    timeline: Timeline | None,
    synced: bool,
) -> Timeline | Redirect | Rejected:
    """The timeline to read, or the answer to give instead. ``serving_as`` is None when the
    node serves, else its state; ``timeline`` is None for a stream this node never heard of."""
    if self_id not in replicas:
        return redirect(stream, replicas, up)
    if serving_as is not None:
        return unavailable(f"this node is {serving_as}", replicas, self_id, up)
    if timeline is None:
        return Timeline(stream, 1)  # a stream nobody published to yet: empty
    if not synced:
        return unavailable("this node is catching up with the stream", replicas, self_id, up)
    return timeline


def read(
    timeline: Timeline,
    stream: str,
    after_seq: int,
    limit: int,
    log_base: int,
    bytes_max: int = FETCH_BYTES_MAX,
) -> ReadResult | LogRead:
    """Up to ``limit`` verified txs (and ``bytes_max`` of them) after ``after_seq``: from
    memory, or from the log (``LogRead``) below the memory ring. A start the log no longer
    holds either (retention) is data loss, except after seq 0: "from the oldest available"."""
    limit = min(limit, FETCH_TXS_MAX)
    trimmed = timeline.trimmed_seq
    if after_seq < trimmed and log_base < trimmed:
        if after_seq >= log_base:
            return LogRead(stream, after_seq, trimmed, limit, timeline.readable_seq, bytes_max)
        if after_seq == 0:
            return LogRead(stream, log_base, trimmed, limit, timeline.readable_seq, bytes_max)
    start, indexes = timeline.read_verified(after_seq, limit)
    held = timeline.txs
    indexes = indexes[: within_bytes([held[i] for i in indexes], bytes_max)]
    return ReadResult(
        stream=stream,
        txs=tuple(timeline.txs[i] for i in indexes),
        digests=tuple(timeline.digests[i] for i in indexes),
        prev_digest=timeline.digest_before(start),
        verified_seq=timeline.readable_seq,
        earliest_seq=timeline.earliest_seq(),
        lost=0 < after_seq < trimmed,
        first_index=timeline.trimmed_count + start,
    )


def seek(timeline: Timeline, stream: str, fetch: FetchRequested) -> FetchRequested | LogRead:
    """A fetch from a dense index (``fetch.from_index``) as a fetch after the seq before that
    entry, where the memory ring holds it; below the ring, a ``LogRead`` from the index. A
    negative index counts back from the readable end (-N: the last N, or all that is held if
    fewer are); one past the readable end waits at the end for the next entry."""
    index = fetch.from_index
    assert index is not None
    last = index < 0  # the last N: as many as are held
    if last:
        index = max(0, timeline.count_at(timeline.readable_seq) + index)
    after = timeline.seek(index)
    if after is None:
        limit = min(fetch.limit, FETCH_TXS_MAX)
        readable, trimmed = timeline.readable_seq, timeline.trimmed_seq
        return LogRead(stream, 0, trimmed, limit, readable, fetch.bytes_max, index, last)
    return replace(fetch, after_seq=after, from_index=None)


def span(
    timeline: Timeline,
    stream: str,
    after_seq: int,
    upto_seq: int,
    max_txs: int,
    parts: int,
    log_base: int,
) -> SpanResult | LogSpan:
    """The readable txs in (``after_seq``, ``upto_seq``], at most ``max_txs`` of them, cut
    into at most ``parts`` parts of near-equal size (0: no bound for ``upto_seq`` and
    ``max_txs``); from the log (``LogSpan``) when it starts below the memory ring."""
    readable = timeline.readable_seq
    upto = readable if upto_seq <= 0 else min(upto_seq, readable)
    trimmed = timeline.trimmed_seq
    if after_seq < trimmed and log_base < trimmed and (after_seq >= log_base or after_seq == 0):
        start = max(after_seq, log_base)
        return LogSpan(stream, start, upto, max_txs, parts, readable, trimmed)
    seqs, digests = entries(timeline, after_seq, upto, max_txs)
    lost = 0 < after_seq < trimmed
    return cut_span(stream, seqs, digests, parts, readable, timeline.earliest_seq(), lost)


def entries(
    timeline: Timeline, after_seq: int, upto_seq: int, max_txs: int
) -> tuple[list[int], list[bytes]]:
    """The seqs and digests the memory ring holds in (``after_seq``, ``upto_seq``]."""
    start = bisect_right(timeline.seqs, after_seq)
    end = max(start, bisect_right(timeline.seqs, upto_seq))
    if max_txs > 0:
        end = min(end, start + max_txs)
    return timeline.seqs[start:end], timeline.digests[start:end]


def cut_span(
    stream: str,
    seqs: list[int],
    digests: list[bytes],
    parts: int,
    readable_seq: int,
    earliest_seq: int,
    lost: bool,
) -> SpanResult:
    """Cut a run of txs into at most ``parts`` parts of near-equal size."""
    total = len(seqs)
    count = max(1, min(parts, total))
    cuts = [(total * k) // count for k in range(count + 1)]
    bounds = tuple((seqs[b - 1], digests[b - 1], b - a) for a, b in pairwise(cuts) if b > a)
    return SpanResult(stream, bounds, readable_seq, earliest_seq, lost)


def worth_parking(result: ReadResult | LogRead, fetch: FetchRequested) -> bool:
    if isinstance(result, LogRead):
        return False
    return not result.txs and not result.lost and fetch.limit > 0 and fetch.wait_ms > 0


class ParkedFetches:
    """Fetches waiting for their stream's verified seq to move."""

    def __init__(self) -> None:
        self.by_stream: dict[str, list[tuple[FetchRequested, Timeout]]] = {}
        self.count = 0

    def park(self, elapsed_ms: int, fetch: FetchRequested, deadline: Timeout | None) -> bool:
        """Park ``fetch`` (keeping its deadline if it was parked before); False if full."""
        if self.count >= PARKED_FETCHES_MAX:
            return False
        if deadline is None:
            deadline = Timeout(min(fetch.wait_ms, FETCH_WAIT_MS_MAX))
            deadline.start(elapsed_ms)
        self.by_stream.setdefault(fetch.stream, []).append((fetch, deadline))
        self.count += 1
        return True

    def wake(self, stream: str) -> list[tuple[FetchRequested, Timeout]]:
        woken = self.by_stream.pop(stream, [])
        self.count -= len(woken)
        return woken

    def expired(self, elapsed_ms: int) -> list[FetchRequested]:
        found: list[FetchRequested] = []
        for stream in list(self.by_stream):
            keep = []
            for fetch, deadline in self.by_stream[stream]:
                if deadline.fired(elapsed_ms):
                    found.append(fetch)
                else:
                    keep.append((fetch, deadline))
            if keep:
                self.by_stream[stream] = keep
            else:
                del self.by_stream[stream]
        self.count -= len(found)
        return found

    def all(self) -> list[FetchRequested]:
        found = [f for parked in self.by_stream.values() for f, _ in parked]
        self.by_stream.clear()
        self.count = 0
        return found
