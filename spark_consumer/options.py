"""The ``relay`` data source's options, checked once on the driver and shipped to the workers.

Names follow Spark's Kafka source where one exists (``startingOffsets``, ``endingOffsets``,
``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``minPartitions``, ``startingTimestamp``) and are
case-insensitive, as Spark options are. A bad value raises ``ValueError`` naming the option
and what it accepts; so does an option this source does not know (a typo would otherwise be
ignored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress, identity, resolve
from relay.client.groups import group_stream
from relay.core.flake import make_seq
from relay.core.routing import stream_name_problem

VERIFICATION_MODES = ("fail", "flag")
FETCH_ROWS_MAX = 5000  # what a node returns per fetch at most

KNOWN = {
    "config": "a cluster config file (TOML) readable on the driver and every executor",
    "nodes": "comma-separated host:port (KEY@host:port for CURVE) client addresses of nodes",
    "clientKey": "a .key_secret file on the driver and every executor, for a cluster with "
    'client_auth = "keys" (default: the config\'s client.key_secret if there, else a new key)',
    "stream": "the stream to read (one name, no wildcards)",
    "startingOffsets": "earliest, latest, or a seq to start at (inclusive)",
    "startingTimestamp": "start at the first tx at or after this time (ms since the Unix epoch)",
    "endingOffsets": "batch reads only: latest, or the last seq to read (inclusive)",
    "maxOffsetsPerTrigger": "streaming: at most this many txs per micro-batch",
    "minPartitions": "split each read range into this many Spark partitions",
    "failOnDataLoss": "true: fail when a range was trimmed from every buffer; false: warn, skip",
    "verification": "fail: a digest mismatch fails the read; flag: mark the row verified=false",
    "fetchRows": f"txs per fetch request (1 to {FETCH_ROWS_MAX})",
    "readTimeoutMs": "how long a read keeps trying nodes before failing",
    "group": "streaming: report progress as this consumer group (relay groups describe); the "
    "checkpoint stays the source of truth",
}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    stream: str
    nodes: tuple[NodeAddress, ...]
    starting: str | int  # "earliest", "latest", or the seq *after* which to start
    ending: int  # batch: the last seq to read; 0 for the latest verified at planning
    max_per_trigger: int  # 0: no limit
    min_partitions: int
    fail_on_data_loss: bool
    flag_mismatches: bool
    fetch_rows: int
    read_timeout_s: float
    group: str = ""  # a consumer group to report each committed batch's end as
    config: str | None = None
    client_key: str | None = None

    def pair(self) -> KeyPair:
        """Who the source is to the nodes (read on the driver and in each task)."""
        return identity(self.config, self.client_key)

    def nodes_from(self, index: int) -> list[NodeAddress]:
        """The nodes in an order that spreads partitions across them."""
        shift = index % len(self.nodes)
        return list(self.nodes[shift:] + self.nodes[:shift])


def parse_options(raw: Mapping[str, str], default_start: str) -> SourceOptions:
    by_lower = {name.lower(): name for name in KNOWN}
    options = {by_lower.get(str(k).lower(), str(k)): str(v) for k, v in raw.items()}
    unknown = sorted(set(options) - set(KNOWN))
    if unknown:
        known = "\n".join(f"  {name}: {what}" for name, what in KNOWN.items())
        raise ValueError(f"relay source: unknown option {unknown[0]!r}. Options:\n{known}")
    stream = options.get("stream", "")
    if not stream:
        raise ValueError("relay source: option 'stream' is required (the stream to read)")
    problem = stream_name_problem(stream)
    if problem:
        raise ValueError(f"relay source: option 'stream': {problem}")
    return SourceOptions(
        stream=stream,
        nodes=tuple(_nodes(options)),
        starting=_starting(options, default_start),
        ending=_ending(options.get("endingOffsets", "latest")),
        max_per_trigger=_int(options, "maxOffsetsPerTrigger", 0, low=1),
        min_partitions=_int(options, "minPartitions", 1, low=1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        flag_mismatches=_choice(options, "verification", "fail") == "flag",
        fetch_rows=_int(options, "fetchRows", FETCH_ROWS_MAX, low=1, high=FETCH_ROWS_MAX),
        read_timeout_s=_int(options, "readTimeoutMs", 30_000, low=100) / 1000,
        group=_group(options),
        config=options.get("config") or None,
        client_key=options.get("clientKey") or None,
    )


def _group(options: dict[str, str]) -> str:
    group = options.get("group", "")
    if group:
        try:
            group_stream(options["stream"], group)
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


def _starting(options: dict[str, str], default: str) -> str | int:
    if "startingTimestamp" in options:
        ms = _int(options, "startingTimestamp", 0, low=0)
        return max(0, make_seq(ms, 0, 0) - 1)
    text = options.get("startingOffsets", default).strip().lower()
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return max(0, int(text) - 1)
    raise ValueError(
        f"relay source: option 'startingOffsets' is {text!r}; "
        "use earliest, latest or a seq to start at (inclusive)"
    )


def _ending(text: str) -> int:
    text = text.strip().lower()
    if text == "latest":
        return 0
    if text.isdigit() and int(text) > 0:
        return int(text)
    raise ValueError(
        f"relay source: option 'endingOffsets' is {text!r}; use latest or the last seq to read"
    )


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
