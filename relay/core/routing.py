"""Which nodes replicate a stream: static glob subscriptions, matched case-sensitively."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

STREAM_NAME_BYTES_MAX = 200
QUEUE_SUFFIX = ".__queue."  # <stream>.__queue.<group>: a work group's control stream
DEAD_SUFFIX = ".dead"  # <stream>.dead: the jobs that died in its work groups


@dataclass(frozen=True, slots=True)
class Subscription:
    node_id: int
    patterns: tuple[str, ...]

    def covers(self, stream: str) -> bool:
        return any(fnmatchcase(stream, p) for p in self.patterns)


def stream_name_problem(stream: str) -> str | None:
    """Why ``stream`` is not a valid stream name, or None."""
    if not stream:
        return "a stream name must not be empty"
    if len(stream.encode()) > STREAM_NAME_BYTES_MAX:
        return f"a stream name is at most {STREAM_NAME_BYTES_MAX} bytes"
    if any(c in stream for c in "*?[] \t\r\n\0"):
        return "a stream name may not contain spaces, control characters or glob characters"
    return None


class Routing:
    """The static map from stream names to their replicas, with a bounded cache."""

    CACHE_MAX = 10_000

    def __init__(self, subscriptions: tuple[Subscription, ...]) -> None:
        self.subscriptions = subscriptions
        self._cache: dict[str, tuple[int, ...]] = {}

    def replicas_of(self, stream: str) -> tuple[int, ...]:
        """The nodes whose patterns cover ``stream``. A work group's control stream is
        replicated by its job stream's replicas (they fold it over the jobs they hold), and a
        dead-letter stream ``<stream>.dead`` that no pattern covers by the job stream's."""
        found = self._cache.get(stream)
        if found is None:
            jobs, sep, group = stream.rpartition(QUEUE_SUFFIX)
            if sep and jobs and group and "." not in group:
                found = self.replicas_of(jobs)
            else:
                found = tuple(sorted(s.node_id for s in self.subscriptions if s.covers(stream)))
                if not found and stream.endswith(DEAD_SUFFIX) and len(stream) > len(DEAD_SUFFIX):
                    found = self.replicas_of(stream[: -len(DEAD_SUFFIX)])
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[stream] = found
        return found
