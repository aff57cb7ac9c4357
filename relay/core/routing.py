"""Which nodes replicate a stream, and what the cluster file declares of it.

Two sources, both glob patterns matched case-sensitively: each node's ``streams`` (its
subscriptions), and the cluster's ``[[stream]]`` blocks, of which the first whose pattern
matches a stream is its rule. A rule that names its nodes sets the stream's replicas; one that
does not leaves them to the subscriptions. A work group's control stream takes no rule: it is
the queue's own, and always kept whole under the defaults; so are a consumer group's commits
and a batch's close and acks.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

STREAM_NAME_BYTES_MAX = 200
GLOB_CHARACTERS = "*?[]"
NO_NAME_HOLDS = " \t\r\n\0"  # spaces and the control characters no stream name holds
QUEUE_SUFFIX = ".__queue."  # <stream>.__queue.<group>: a work group's control stream
DEAD_SUFFIX = ".dead"  # <stream>.dead: the jobs that died in its work groups
GROUP_SUFFIX = ".__group."  # <stream>.__group.<group>: a consumer group's commits
BATCH_SUFFIX = ".__batch."  # <stream>.__batch.<id>: a fan-out batch's close and acks


@dataclass(frozen=True, slots=True)
class Subscription:
    node_id: int
    patterns: tuple[str, ...]

    def covers(self, stream: str) -> bool:
        return any(fnmatchcase(stream, p) for p in self.patterns)


@dataclass(frozen=True, slots=True)
class StreamRule:
    """What the core enforces of a ``[[stream]]`` block."""

    pattern: str
    nodes: tuple[int, ...] = ()  # its replicas; (): the nodes whose streams cover it
    payload_bytes_max: int = 0  # 0: the cluster's ``payload_bytes_max``
    create: bool = True  # whether a publish may create a stream under a glob pattern
    keyed: bool = False  # every message needs a key (a compacted stream)

    def covers(self, stream: str) -> bool:
        return fnmatchcase(stream, self.pattern)

    @property
    def declares(self) -> bool:
        """The pattern names one stream (no glob characters): that stream is declared."""
        return not any(c in self.pattern for c in "*?[")


def is_relays_own(stream: str) -> bool:
    """Whether ``stream`` is one relay keeps for a stream: a work group's control stream, a
    consumer group's commits, a batch's close and acks. No ``[[stream]]`` block holds one."""
    return is_control(stream) or GROUP_SUFFIX in stream or BATCH_SUFFIX in stream


def is_control(stream: str) -> bool:
    """Whether ``stream`` is a work group's control stream (``<stream>.__queue.<group>``)."""
    jobs, sep, group = stream.rpartition(QUEUE_SUFFIX)
    return bool(sep and jobs and group and "." not in group)


def stream_name_problem(stream: str) -> str | None:
    """Why ``stream`` is not a valid stream name, or None."""
    if not stream:
        return "a stream name must not be empty"
    if len(stream.encode()) > STREAM_NAME_BYTES_MAX:
        return f"a stream name is at most {STREAM_NAME_BYTES_MAX} bytes"
    if any(c in stream for c in GLOB_CHARACTERS + NO_NAME_HOLDS):
        return "a stream name may not contain spaces, control characters or glob characters"
    return None


class Routing:
    """The static map from stream names to their replicas, with a bounded cache."""

    CACHE_MAX = 10_000

    def __init__(
        self, subscriptions: tuple[Subscription, ...], rules: tuple[StreamRule, ...] = ()
    ) -> None:
        self.subscriptions = subscriptions
        self.rules = rules
        self._cache: dict[str, tuple[int, ...]] = {}
        self._rules: dict[str, StreamRule | None] = {}

    def rule_of(self, stream: str) -> StreamRule | None:
        """The first rule whose pattern matches ``stream`` (none for relay's own streams)."""
        if not self.rules:
            return None
        if stream in self._rules:
            return self._rules[stream]
        found = None
        if not is_relays_own(stream):
            found = next((r for r in self.rules if r.covers(stream)), None)
        if len(self._rules) >= self.CACHE_MAX:
            self._rules.clear()
        self._rules[stream] = found
        return found

    def replicas_of(self, stream: str) -> tuple[int, ...]:
        """The nodes its rule names, or else those whose patterns cover ``stream``. A work
        group's control stream is replicated by its job stream's replicas (they fold it over
        the jobs they hold), a compacted stream's consumer groups' commits by its own (they
        bound its compaction), and a dead-letter stream ``<stream>.dead`` that nothing covers
        by the job stream's."""
        found = self._cache.get(stream)
        if found is None:
            rule = self.rule_of(stream)
            read, sep, _ = stream.rpartition(GROUP_SUFFIX)
            if is_control(stream):
                found = self.replicas_of(stream.rpartition(QUEUE_SUFFIX)[0])
            elif sep and read and (keyed := self.rule_of(read)) is not None and keyed.keyed:
                found = self.replicas_of(read)  # its compaction waits for the group's commits
            elif rule is not None and rule.nodes:
                found = tuple(sorted(rule.nodes))
            else:
                found = tuple(sorted(s.node_id for s in self.subscriptions if s.covers(stream)))
                if not found and stream.endswith(DEAD_SUFFIX) and len(stream) > len(DEAD_SUFFIX):
                    found = self.replicas_of(stream[: -len(DEAD_SUFFIX)])
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[stream] = found
        return found
