"""The ``relay`` data source's options, checked once on the driver and shipped to the workers.

Names follow Spark's Kafka source where one exists (``subscribe``, ``subscribePattern``,
``startingOffsets``, ``endingOffsets``, ``startingTimestamp``, ``endingTimestamp``,
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``, ``failOnDataLoss``,
``minPartitions``) and are case-insensitive, as Spark options are. A bad value raises
``ValueError`` naming the option and what it accepts; so does an option this source does not
know (a typo would otherwise be ignored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress, identity, resolve
from relay.client.groups import group_stream
from relay.core.flake import SEQ_MAX, make_seq
from relay.core.routing import stream_name_problem

VERIFICATION_MODES = ("fail", "flag")
FETCH_ROWS_MAX = 5000  # what a node returns per fetch at most

KNOWN = {
    "config": "a cluster config file (TOML) readable on the driver and every executor",
    "nodes": "comma-separated host:port (KEY@host:port for CURVE) client addresses of nodes",
    "clientKey": "a .key_secret file on the driver and every executor, for a cluster with "
    'client_auth = "keys" (default: the config\'s client.key_secret if there, else a new key)',
    "stream": "the stream to read (one name)",
    "subscribe": "streams to read, comma-separated (as Kafka's subscribe)",
    "subscribePattern": "a glob of the streams to read, e.g. orders.* (streams that appear "
    "later are picked up, from their earliest)",
    "startingOffsets": "earliest, latest, a seq to start at (inclusive; one stream), or JSON "
    'per stream: {"orders.eu": 123, "orders.us": -2} (-2 earliest, -1 latest)',
    "startingTimestamp": "start at the first tx at or after this time (ms since the Unix epoch)",
    "endingOffsets": "batch reads: latest, the last seq to read (inclusive; one stream), or "
    'JSON per stream: {"orders.eu": 456, "orders.us": -1} (-1 latest)',
    "endingTimestamp": "batch reads: stop before the first tx at or after this time (ms)",
    "maxOffsetsPerTrigger": "streaming: at most this many txs per micro-batch",
    "minOffsetsPerTrigger": "streaming: wait for this many txs before a micro-batch ...",
    "maxTriggerDelay": "... but no longer than this (ms, or 30s, 15m; default 15m)",
    "minPartitions": "split each stream's read range into this many Spark partitions",
    "failOnDataLoss": "true: fail when a range was trimmed from every buffer; false: warn, skip",
    "verification": "fail: a digest mismatch fails the read; flag: mark the row verified=false",
    "fetchRows": f"txs per fetch request (1 to {FETCH_ROWS_MAX})",
    "readTimeoutMs": "how long a read keeps trying nodes before failing",
    "compactedView": "batch reads: true gives a compacted stream as a table, the newest row of "
    "each live key (a tombstone, an empty payload, deletes its key), in seq order",
    "group": "streaming: report progress as this consumer group (relay groups describe); the "
    "checkpoint stays the source of truth",
}
EARLIEST, LATEST = -2, -1  # as in Kafka's JSON offsets
Position = str | int  # "earliest", "latest", or the seq *after* which to start


@dataclass(frozen=True, slots=True)
class SourceOptions:
    streams: tuple[str, ...]  # the streams named (empty with a pattern)
    pattern: str  # a glob of streams ("" with names)
    nodes: tuple[NodeAddress, ...]
    starting: Position  # for every stream not in starting_each
    starting_each: tuple[tuple[str, Position], ...]
    ending: int  # batch: the last seq to read; 0 for the latest verified at planning
    ending_each: tuple[tuple[str, int], ...]
    max_per_trigger: int  # 0: no limit
    min_per_trigger: int  # 0: no minimum
    max_trigger_delay_s: float
    min_partitions: int
    fail_on_data_loss: bool
    flag_mismatches: bool
    fetch_rows: int
    read_timeout_s: float
    group: str = ""  # a consumer group to report each committed batch's end as
    compacted_view: bool = False  # batch reads: the newest row of each live key
    config: str | None = None
    client_key: str | None = None

    def pair(self) -> KeyPair:
        """Who the source is to the nodes (read on the driver and in each task)."""
        return identity(self.config, self.client_key)

    def nodes_from(self, index: int) -> list[NodeAddress]:
        """The nodes in an order that spreads partitions across them."""
        shift = index % len(self.nodes)
        return list(self.nodes[shift:] + self.nodes[:shift])

    def subscribes(self, stream: str) -> bool:
        """Is ``stream`` one this query reads? A pattern leaves out group and batch streams
        (``.__``) unless it names them."""
        if not self.pattern:
            return stream in self.streams
        internal = ".__" in stream and ".__" not in self.pattern
        return not internal and fnmatchcase(stream, self.pattern)

    def start_of(self, stream: str) -> Position:
        return dict(self.starting_each).get(stream, self.starting)

    def end_of(self, stream: str) -> int:
        return dict(self.ending_each).get(stream, self.ending)


def parse_options(raw: Mapping[str, str], default_start: str) -> SourceOptions:
    by_lower = {name.lower(): name for name in KNOWN}
    options = {by_lower.get(str(k).lower(), str(k)): str(v) for k, v in raw.items()}
    unknown = sorted(set(options) - set(KNOWN))
    if unknown:
        known = "\n".join(f"  {name}: {what}" for name, what in KNOWN.items())
        raise ValueError(f"relay source: unknown option {unknown[0]!r}. Options:\n{known}")
    streams, pattern = _subscription(options)
    starting, starting_each = _starting(options, default_start, streams, pattern)
    ending, ending_each = _ending(options, streams, pattern)
    return SourceOptions(
        streams=streams,
        pattern=pattern,
        nodes=tuple(_nodes(options)),
        starting=starting,
        starting_each=starting_each,
        ending=ending,
        ending_each=ending_each,
        max_per_trigger=_int(options, "maxOffsetsPerTrigger", 0, low=1),
        min_per_trigger=_int(options, "minOffsetsPerTrigger", 0, low=1),
        max_trigger_delay_s=_duration_s(options, "maxTriggerDelay", 15 * 60),
        min_partitions=_int(options, "minPartitions", 1, low=1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        flag_mismatches=_choice(options, "verification", "fail") == "flag",
        fetch_rows=_int(options, "fetchRows", FETCH_ROWS_MAX, low=1, high=FETCH_ROWS_MAX),
        read_timeout_s=_int(options, "readTimeoutMs", 30_000, low=100) / 1000,
        group=_group(options, streams),
        compacted_view=_bool(options, "compactedView", False),
        config=options.get("config") or None,
        client_key=options.get("clientKey") or None,
    )


def _subscription(options: dict[str, str]) -> tuple[tuple[str, ...], str]:
    given = [k for k in ("stream", "subscribe", "subscribePattern") if options.get(k)]
    if len(given) != 1:
        raise ValueError(
            "relay source: give exactly one of option 'stream', 'subscribe' (streams, "
            "comma-separated) or 'subscribePattern' (a glob such as orders.*)"
        )
    (name,) = given
    if name == "subscribePattern":
        return (), options[name].strip()
    streams = tuple(dict.fromkeys(s.strip() for s in options[name].split(",") if s.strip()))
    for stream in streams:
        problem = stream_name_problem(stream)
        if problem:
            raise ValueError(f"relay source: option {name!r}: {stream!r}: {problem}")
    if not streams:
        raise ValueError(f"relay source: option {name!r} names no stream")
    return streams, ""


def _group(options: dict[str, str], streams: tuple[str, ...]) -> str:
    group = options.get("group", "")
    if group:
        try:
            for stream in streams or ("stream",):
                group_stream(stream, group)
        except ValueError as exc:
            raise ValueError(f"relay source: option 'group': {exc}") from None
    return group


def _nodes(options: dict[str, str]) -> list[NodeAddress]:
    config, nodes = options.get("config"), options.get("nodes")
    if bool(config) == bool(nodes):
        raise ValueError("relay source: give exactly one of option 'config' or option 'nodes'")
    try:
        if config:
            return resolve(config=config)
        return resolve(nodes=[n.strip() for n in (nodes or "").split(",") if n.strip()])
    except (OSError, ValueError) as exc:
        raise ValueError(f"relay source: option {'config' if config else 'nodes'}: {exc}") from None


def _starting(
    options: dict[str, str], default: str, streams: tuple[str, ...], pattern: str
) -> tuple[Position, tuple[tuple[str, Position], ...]]:
    if "startingTimestamp" in options:
        ms = _int(options, "startingTimestamp", 0, low=0)
        return min(max(0, make_seq(ms, 0, 0) - 1), SEQ_MAX), ()
    text = options.get("startingOffsets", default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower(), ()
    if text.isdigit() and len(streams) == 1:
        return max(0, int(text) - 1), ()
    each = _per_stream(text, "startingOffsets", streams, pattern)
    positions = {
        s: "earliest" if v == EARLIEST else "latest" if v == LATEST else max(0, v - 1)
        for s, v in each.items()
    }
    return default, tuple(sorted(positions.items()))


def _ending(
    options: dict[str, str], streams: tuple[str, ...], pattern: str
) -> tuple[int, tuple[tuple[str, int], ...]]:
    if "endingTimestamp" in options:
        ms = _int(options, "endingTimestamp", 1, low=1)
        return min(make_seq(ms, 0, 0) - 1, SEQ_MAX), ()  # every tx before that millisecond
    text = options.get("endingOffsets", "latest").strip()
    if text.lower() == "latest":
        return 0, ()
    if text.isdigit() and int(text) > 0 and len(streams) == 1:
        return int(text), ()
    each = _per_stream(text, "endingOffsets", streams, pattern)
    if EARLIEST in each.values():
        raise ValueError("relay source: option 'endingOffsets': -2 (earliest) cannot end a read")
    return 0, tuple(sorted((s, 0 if v == LATEST else v) for s, v in each.items()))


def _per_stream(text: str, name: str, streams: tuple[str, ...], pattern: str) -> dict[str, int]:
    """A JSON object of stream -> seq, -2 or -1."""
    forms = "earliest, latest, a seq" if name == "startingOffsets" else "latest, the last seq"
    usage = (
        f"relay source: option {name!r} is {text!r}; use {forms} (with one stream), or JSON "
        'such as {"orders.eu": 123, "orders.us": -1}'
    )
    try:
        found = json.loads(text)
    except ValueError:
        raise ValueError(usage) from None
    if not isinstance(found, dict) or not found:
        raise ValueError(usage)
    for stream, value in found.items():
        if type(value) is not int or value < EARLIEST or value == 0 or value >= 1 << 63:
            raise ValueError(f"{usage}: {stream!r} has {value!r}")
        named = stream in streams if streams else fnmatchcase(stream, pattern)
        if not named:
            raise ValueError(f"relay source: option {name!r} names {stream!r}, not subscribed")
    return dict(found)


def _duration_s(options: dict[str, str], name: str, default_s: float) -> float:
    """Milliseconds, or a number with s, m or h (as Kafka's maxTriggerDelay: 15m)."""
    text = options.get(name)
    if text is None:
        return default_s
    text = text.strip().lower()
    unit = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:])
    number = text[:-1] if unit else text
    if not number.isdigit():
        raise ValueError(f"relay source: option {name!r} is {text!r}; use ms, or 30s, 15m, 1h")
    return int(number) * unit if unit else int(number) / 1000


def _int(options: dict[str, str], name: str, default: int, low: int, high: int = 1 << 63) -> int:
    text = options.get(name)
    if text is None:
        return default
    if not text.strip().isdigit() or not low <= int(text) <= high:
        bound = f"from {low} to {high}" if high < 1 << 63 else f"of at least {low}"
        raise ValueError(f"relay source: option {name!r} is {text!r}; use a whole number {bound}")
    return int(text)


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    text = options.get(name, str(default)).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"relay source: option {name!r} is {text!r}; use true or false")
    return text == "true"


def _choice(options: dict[str, str], name: str, default: str) -> str:
    text = options.get(name, default).strip().lower()
    if text not in VERIFICATION_MODES:
        raise ValueError(
            f"relay source: option {name!r} is {text!r}; use one of {', '.join(VERIFICATION_MODES)}"
        )
    return text
