"""What a node's data directory remembers of the ``[[stream]]`` blocks it ran under, and the
check at start that a changed block needs no data migration.

``<data_dir>/streams.json`` holds every schema the node ever ran a typed stream under (by
fingerprint: its segment headers name them, and recovery accepts no other) and, per block
pattern, the replicas its streams had and the schema and major version in force. At start
each block of the cluster file is held against it: a block whose streams would have fewer
replicas than before, and fewer than three, is refused, naming ``stream[i].nodes``; a schema
that changed within its major version in a way that ``relay.schema.evolution`` refuses, or whose
major version went back, or that was taken away, is refused, naming ``stream[i].schema``. A
file that passes is written back (atomically) with what is in force now.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from relay.config.cluster import REPLICAS_MIN, ClusterConfig
from relay.config.streams import StreamBlock
from relay.schema import document, evolution

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
    where = str(config.path) if config.path else "config"
    routing = config.routing()
    for block in config.streams.blocks:
        example = "".join("x" if c in "*?[]" else c for c in block.pattern)
        replicas = len(routing.replicas_of(example))
        was = blocks.get(block.pattern, {})
        before = was.get("replicas", 0)
        if type(before) is int and replicas < min(before, REPLICAS_MIN):
            raise DeclaredError(
                f"{where}: '{block.label}.nodes' gives streams {block.pattern!r} {replicas} "
                f"replica(s), fewer than the {before} they had and than {REPLICAS_MIN}: a stream "
                "would lose copies it holds. Keep at least three"
            )
        _check_schema(where, block, was, schemas, path)
        entry: dict[str, Any] = {"replicas": replicas}
        if block.schema is not None:
            fingerprint = block.schema.fingerprint.hex()
            schemas[fingerprint] = block.schema.document
            entry.update(schema=fingerprint, major=block.schema.major)
        blocks[block.pattern] = entry
    _write(path, {"format": FORMAT, "schemas": schemas, "blocks": blocks})
    return frozenset(bytes.fromhex(f) for f in schemas)


def _check_schema(
    where: str, block: StreamBlock, was: dict[str, Any], schemas: dict[str, Any], path: Path
) -> None:
    before = was.get("schema")
    if not before:
        return
    key = f"'{block.label}.schema'"
    if block.schema is None:
        raise DeclaredError(
            f"{where}: {key} is gone, but streams {block.pattern!r} are typed: their entries "
            "were checked against a schema. A typed stream stays typed"
        )
    if block.schema.fingerprint.hex() == before:
        return
    major = was.get("major", 1)
    if type(major) is not int or before not in schemas:
        raise DeclaredError(f"{path}: its record of {block.pattern!r} names no schema it holds")
    if block.schema.major < major:
        raise DeclaredError(
            f"{where}: '{block.label}.schema_major' {block.schema.major} goes back from {major}"
        )
    if block.schema.major > major:
        return  # a new major version may break the old one: it says so
    try:
        old = document.parse(schemas[before], major, f"{path}: {block.pattern}")
    except document.SchemaError as exc:
        raise DeclaredError(str(exc)) from None
    problem = evolution.change_problem(old, block.schema)
    if problem:
        raise DeclaredError(
            f"{where}: {key} cannot replace the schema streams {block.pattern!r} have: "
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
    schemas, blocks = found.get("schemas"), found.get("blocks")
    if not isinstance(schemas, dict) or not isinstance(blocks, dict):
        return False
    return all(isinstance(b, dict) for b in blocks.values()) and all(map(_is_fingerprint, schemas))


def _is_fingerprint(text: Any) -> bool:
    return isinstance(text, str) and len(text) == 64 and not text.strip("0123456789abcdef")


def _write(path: Path, content: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    with temporary.open("wb") as f:
        f.write(json.dumps(content, sort_keys=True).encode())
        f.flush()
        os.fsync(f.fileno())
    temporary.replace(path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
