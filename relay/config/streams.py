"""The cluster file's ``[[stream]]`` blocks: settings per stream, by glob pattern.

Each block names a ``pattern``; the first block whose pattern matches a stream's name holds
that stream's settings, and a stream no block matches takes the ``[cluster]`` defaults. A block
may set the stream's replicas (``nodes``), its log's roll and retention, its largest message
(``max_payload_bytes``), its cleanup (``delete``, or ``compact`` to the newest tx per key), its
type (``schema``: a JSON Schema file, relative to the cluster file, and ``schema_major``), and
whether a publish may create a stream under a glob pattern at all (``create``; a pattern with
no glob characters declares the one stream it names). relay's own streams (a work group's
control stream, a consumer group's commits, a batch's acks) take no block.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from relay.core.routing import Routing, StreamRule, is_relays_own, stream_name_problem
from relay.schema import document
from relay.schema.document import Schema
from relay.storage import settings as storage
from relay.storage.settings import StorageSettings

KEYS = {
    "pattern",
    "nodes",
    "max_payload_bytes",
    "cleanup",
    "schema",
    "schema_major",
    "create",
    *storage.STREAM_KEYS,
}
SCHEMA_MAJOR_MAX = 1 << 20


class BlockError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class StreamBlock:
    index: int  # its place in the file: stream[index]
    rule: StreamRule  # what the core enforces of it
    storage: StorageSettings  # the cluster's with the block's keys in force
    schema: Schema | None
    schema_path: str = ""  # as the block names it

    @property
    def pattern(self) -> str:
        return self.rule.pattern

    @property
    def label(self) -> str:
        return f"stream[{self.index}]"


@dataclass(frozen=True, slots=True)
class StreamBlocks:
    """Every block, in order; which one holds a stream's settings."""

    blocks: tuple[StreamBlock, ...] = ()
    defaults: StorageSettings = field(default_factory=StorageSettings)
    payload_bytes_max: int = 1 << 20  # the cluster's
    _routing: Routing = field(init=False, compare=False, repr=False)  # finds a stream's rule
    _by_pattern: dict[str, StreamBlock] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_routing", Routing((), self.rules))
        object.__setattr__(self, "_by_pattern", {b.pattern: b for b in self.blocks})

    @property
    def rules(self) -> tuple[StreamRule, ...]:
        return tuple(b.rule for b in self.blocks)

    def block_of(self, stream: str) -> StreamBlock | None:
        rule = self._routing.rule_of(stream)
        return self._by_pattern[rule.pattern] if rule is not None else None

    def storage_of(self, stream: str) -> StorageSettings:
        block = self.block_of(stream)
        return block.storage if block is not None else self.defaults

    def describe(self, stream: str, replicas: tuple[int, ...]) -> dict[str, Any]:
        """The settings in force for ``stream``, by their keys in the cluster file (``pattern``
        empty: no block matches, the defaults hold)."""
        block = self.block_of(stream)
        s = self.storage_of(stream)
        info: dict[str, Any] = {
            "stream": stream,
            "pattern": block.pattern if block else "",
            "nodes": list(replicas),
            "create": block.rule.create if block else True,
            "max_payload_bytes": block.rule.payload_bytes_max if block else self.payload_bytes_max,
            "cleanup": s.cleanup,
            "delete_retention_ms": s.delete_retention_ms,
            "retention_ms": s.retention_ms,
            "retention_bytes": s.retention_bytes,
            "retention_txs": s.retention_txs,
            "segment_bytes": s.segment_bytes,
            "segment_ms": s.segment_ms,
        }
        if block is not None and block.schema is not None:
            info["schema"] = block.schema.canonical
            info["schema_major"] = block.schema.major
            info["schema_fingerprint"] = block.schema.fingerprint.hex()
        return info


def parse(
    where: str,
    raw: Any,
    node_ids: set[int],
    defaults: StorageSettings,
    payload_bytes_max: int,
    base: Path,
) -> StreamBlocks:
    """The blocks of ``raw`` (the file's ``stream`` array, or None); ``BlockError`` names
    the key at fault."""
    if raw is None:
        return StreamBlocks((), defaults, payload_bytes_max)
    if not isinstance(raw, list):
        raise BlockError(f"{where}: 'stream' must be an array of tables ([[stream]])")
    blocks: list[StreamBlock] = []
    seen: dict[str, int] = {}
    for i, table in enumerate(raw):
        block = _block(where, i, table, node_ids, defaults, payload_bytes_max, base)
        first = seen.get(block.pattern)
        if first is not None:
            raise BlockError(
                f"{where}: 'stream[{i}].pattern' {block.pattern!r} is also stream[{first}]'s; "
                "the first block that matches a stream holds its settings, so this one never would"
            )
        seen[block.pattern] = i
        blocks.append(block)
    return StreamBlocks(tuple(blocks), defaults, payload_bytes_max)


def _block(
    where: str,
    i: int,
    table: Any,
    node_ids: set[int],
    defaults: StorageSettings,
    payload_bytes_max: int,
    base: Path,
) -> StreamBlock:
    label = f"stream[{i}]"
    if not isinstance(table, dict):
        raise BlockError(f"{where}: '{label}' must be a table")
    for key in table:
        if key not in KEYS:
            raise BlockError(
                f"{where}: unknown key '{label}.{key}'; known keys: " + ", ".join(sorted(KEYS))
            )
    pattern = table.get("pattern")
    if type(pattern) is not str or not pattern or any(c in pattern for c in " \t\r\n\0"):
        raise BlockError(
            f"{where}: '{label}.pattern' must be a glob of stream names, such as \"orders.*\", "
            f"got {pattern!r:.60}"
        )
    literal = not any(c in pattern for c in "*?[")
    problem = stream_name_problem(pattern) if literal else None
    if problem or (literal and is_relays_own(pattern)):
        why = problem or "one of relay's own streams, which take no block"
        raise BlockError(f"{where}: '{label}.pattern' {pattern!r}: {why}")
    nodes = table.get("nodes", [])
    if (
        not isinstance(nodes, list)
        or not all(type(n) is int for n in nodes)
        or len(set(nodes)) != len(nodes)
    ):
        raise BlockError(f"{where}: '{label}.nodes' must be a list of distinct node ids")
    unknown = sorted(set(nodes) - node_ids)
    if unknown:
        raise BlockError(
            f"{where}: '{label}.nodes' names node {unknown[0]}, which no [[node]] table has"
        )
    bytes_max = table.get("max_payload_bytes", payload_bytes_max)
    if type(bytes_max) is not int or not 1 <= bytes_max <= payload_bytes_max:
        raise BlockError(
            f"{where}: '{label}.max_payload_bytes' must be an integer from 1 to the cluster's "
            f"payload_bytes_max ({payload_bytes_max}), got {bytes_max!r:.40}"
        )
    create = table.get("create", True)
    if type(create) is not bool:
        raise BlockError(f"{where}: '{label}.create' must be true or false")
    major = table.get("schema_major", 1)
    if type(major) is not int or not 1 <= major <= SCHEMA_MAJOR_MAX:
        raise BlockError(f"{where}: '{label}.schema_major' must be an integer from 1")
    try:
        settings = storage.for_stream(where, label, table, defaults)
    except storage.SettingsError as exc:
        raise BlockError(str(exc)) from None
    schema, schema_path = None, table.get("schema", "")
    if schema_path:
        if type(schema_path) is not str:
            raise BlockError(f"{where}: '{label}.schema' must be a file path")
        try:
            schema = document.load(base / schema_path, major, f"{where}: '{label}.schema'")
        except document.SchemaError as exc:
            raise BlockError(str(exc)) from None
        settings = replace(settings, schema=schema.fingerprint)
    elif "schema_major" in table:
        raise BlockError(f"{where}: '{label}.schema_major' needs a schema")
    keyed = settings.cleanup == "compact"
    rule = StreamRule(pattern, tuple(sorted(nodes)), bytes_max, create, keyed)
    return StreamBlock(i, rule, settings, schema, schema_path or "")
