"""What a node's data directory remembers of the ``[[stream]]`` blocks it ran under, and the
check at start that a changed block needs no data migration.

``<data_dir>/streams.json`` holds every schema the node ever ran a typed stream under (by
fingerprint: its segment headers name them, and recovery accepts no other) and the replicas, schema
and major version in force, per block pattern (for streams created under it later) and per stream
whose log the node holds (so that renaming a pattern skips no check: a stream with no record of its
own yet is held against its block's). At start each block, and each stream the node holds, is held
against them: streams that would have fewer replicas than before, and fewer than three, are refused,
naming ``stream[i].nodes``; a schema that changed within its major version in a way that
``relay.schema.evolution`` refuses, or whose major version went back, or that was taken away, is
refused, naming ``stream[i].schema``. A file that passes is written back (atomically) with what is
in force now.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from relay.config.cluster import REPLICAS_MIN, ClusterConfig
from relay.config.streams import StreamBlock
from relay.schema import document, evolution
from relay.storage.files import OS_FILES
from relay.storage.store import held_streams

FILE = "streams.json"
FORMAT = 1
FILE_BYTES_MAX = 256 << 20


class DeclaredError(ValueError):
    """The blocks cannot run on this data directory (the message names the key)."""


def check(config: ClusterConfig, data_dir: Path) -> frozenset[bytes]:
    """Hold the cluster file's blocks against what ``data_dir`` remembers and record them;
    every schema fingerprint a segment of this node may carry."""
    path = data_dir / FILE
    known = _read(path)
    schemas: dict[str, Any] = known["schemas"]
    blocks: dict[str, Any] = known["blocks"]
    streams: dict[str, Any] = known.get("streams", {})
    where = str(config.path) if config.path else "config"
    routing = config.routing()
    for block in config.streams.blocks:  # what a stream created under it later will have
        example = "".join("x" if c in "*?[]" else c for c in block.pattern)
        replicas = len(routing.replicas_of(example))
        was = blocks.get(block.pattern, {})
        _check_replicas(where, block, repr(block.pattern), replicas, was)
        _check_schema(where, block, repr(block.pattern), was, schemas, path)
        blocks[block.pattern] = _entry(block, replicas, schemas)
    for name in held_streams(OS_FILES, data_dir):  # its own record, else its block's last
        matching = config.streams.block_of(name)
        replicas = len(routing.replicas_of(name))
        was = streams.get(name) or (blocks.get(matching.pattern, {}) if matching else {})
        _check_replicas(where, matching, repr(name), replicas, was)
        _check_schema(where, matching, repr(name), was, schemas, path)
        streams[name] = _entry(matching, replicas, schemas)
    record = {"format": FORMAT, "schemas": schemas, "blocks": blocks, "streams": streams}
    _write(path, record)
    return frozenset(bytes.fromhex(f) for f in schemas)


def _entry(block: StreamBlock | None, replicas: int, schemas: dict[str, Any]) -> dict[str, Any]:
    """What is in force for streams of ``block`` with ``replicas`` (the schema noted)."""
    entry: dict[str, Any] = {"replicas": replicas}
    if block is not None and block.schema is not None:
        fingerprint = block.schema.fingerprint.hex()
        schemas[fingerprint] = block.schema.document
        entry.update(schema=fingerprint, major=block.schema.major)
    return entry


def _check_replicas(
    where: str, block: StreamBlock | None, streams: str, replicas: int, was: dict[str, Any]
) -> None:
    before = was.get("replicas", 0)
    if type(before) is int and replicas < min(before, REPLICAS_MIN):
        key = f"'{block.label}.nodes'" if block else "the nodes (no [[stream]] block matches)"
        raise DeclaredError(
            f"{where}: {key} gives streams {streams} {replicas} replica(s), fewer than the "
            f"{before} they had and than {REPLICAS_MIN}: a stream would lose copies it holds. "
            "Keep at least three"
        )


def _check_schema(
    where: str,
    block: StreamBlock | None,
    streams: str,
    was: dict[str, Any],
    schemas: dict[str, Any],
    path: Path,
) -> None:
    before = was.get("schema")
    if not before:
        return
    if block is None or block.schema is None:
        key = f"'{block.label}.schema'" if block else "the [[stream]] block with its schema"
        raise DeclaredError(
            f"{where}: {key} is gone, but streams {streams} are typed: their entries "
            "were checked against a schema. A typed stream stays typed"
        )
    key = f"'{block.label}.schema'"
    if block.schema.fingerprint.hex() == before:
        return
    major = was.get("major", 1)
    if type(major) is not int or before not in schemas:
        raise DeclaredError(f"{path}: its record of streams {streams} names no schema it holds")
    if block.schema.major < major:
        raise DeclaredError(
            f"{where}: '{block.label}.schema_major' {block.schema.major} goes back from {major}"
        )
    if block.schema.major > major:
        return  # a new major version may break the old one: it says so
    try:
        old = document.parse(schemas[before], major, f"{path}: {streams}")
    except document.SchemaError as exc:
        raise DeclaredError(str(exc)) from None
    problem = evolution.change_problem(old, block.schema)
    if problem:
        raise DeclaredError(
            f"{where}: {key} cannot replace the schema streams {streams} have: "
            f"{problem}. Within one major version a schema may only add optional fields; "
            f"raise '{block.label}.schema_major' to {major + 1} to break with the old one"
        )


def _read(path: Path) -> dict[str, Any]:
    empty: dict[str, Any] = {"format": FORMAT, "schemas": {}, "blocks": {}}
    try:
        with path.open("rb") as f:
            data = f.read(FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return empty
    except OSError as exc:
        raise DeclaredError(f"{path}: unreadable ({exc.strerror or exc})") from None
    try:
        found: Any = json.loads(data) if len(data) <= FILE_BYTES_MAX else None
    except (ValueError, RecursionError):
        found = None
    if not _is_record(found):
        raise DeclaredError(
            f"{path}: not a relay streams file of format {FORMAT} (the node's record of its "
            "[[stream]] blocks); restore it, or move it away to start this node's record anew"
        )
    return dict(found)


def _is_record(found: Any) -> bool:
    if not isinstance(found, dict) or found.get("format") != FORMAT:
        return False
    schemas, blocks, streams = found.get("schemas"), found.get("blocks"), found.get("streams", {})
    if not isinstance(schemas, dict) or not isinstance(blocks, dict):
        return False
    if not isinstance(streams, dict):
        return False
    entries = [*blocks.values(), *streams.values()]
    return all(isinstance(e, dict) for e in entries) and all(map(_is_fingerprint, schemas))


def _is_fingerprint(text: Any) -> bool:
    return isinstance(text, str) and len(text) == 64 and not text.strip("0123456789abcdef")


def _write(path: Path, content: dict[str, Any]) -> None:
    OS_FILES.mkdir(path.parent, parents=True)
    temporary = path.with_suffix(".tmp")
    OS_FILES.write_synced(temporary, json.dumps(content, sort_keys=True).encode())
    OS_FILES.rename(temporary, path)
    OS_FILES.fsync_dir(path.parent)
