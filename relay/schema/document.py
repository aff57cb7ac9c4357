"""A typed stream's schema: a JSON Schema document, its fingerprint, and what it admits.

A schema is an object schema (``"type": "object"``: its properties become a Spark reader's columns),
checked against its own draft's meta-schema when it is loaded, and read by ``jsonschema`` (the
reference implementation of every draft) with an empty registry: a ``$ref`` refers within the
document, and one to anywhere else is refused at load. Its fingerprint is the blake3 hash of its
canonical JSON (sorted keys, no spaces): two files that say the same thing have one fingerprint,
which segment headers carry.

A payload is admitted when it is UTF-8 JSON that the schema validates; a refusal names the
JSON path of the most relevant error (``jsonschema``'s ``best_match``) and what is wrong there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blake3 import blake3
from jsonschema import exceptions, validators
from jsonschema.protocols import Validator
from referencing import Registry
from referencing.exceptions import Unresolvable

SCHEMA_BYTES_MAX = 1 << 20  # a schema file larger than this is refused
PROBLEM_CHARS_MAX = 300  # a refusal quotes at most this much of the error
REF_DEPTH_MAX = 200  # a schema nested deeper is refused


class SchemaError(ValueError):
    """A schema file that cannot be a typed stream's schema (the message says why)."""


@dataclass(frozen=True, slots=True)
class Schema:
    document: dict[str, Any] = field(compare=False)
    canonical: str  # the document as canonical JSON
    major: int  # the schema's major version (``schema_major``): a new one may break the old
    validator: Validator = field(compare=False, repr=False)

    @property
    def fingerprint(self) -> bytes:
        return blake3(self.canonical.encode()).digest()

    def problem(self, payload: bytes) -> str | None:
        """Why ``payload`` is not an entry of this type, or None."""
        try:
            doc = json.loads(payload)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            return f"the payload is not UTF-8 JSON ({str(exc)[:PROBLEM_CHARS_MAX]})"
        try:
            error = exceptions.best_match(self.validator.iter_errors(doc))
        except RecursionError:
            return "the payload nests too deep to check"
        except Unresolvable as exc:  # a "#/..." pointer to nothing in the schema
            return f"the schema's $ref {str(exc)[:PROBLEM_CHARS_MAX]} points to nothing"
        if error is None:
            return None
        return f"{error.json_path}: {error.message[:PROBLEM_CHARS_MAX]}"


def parse(document: Any, major: int, where: str) -> Schema:
    """The schema ``document`` holds; ``SchemaError`` (naming ``where``) if it is none."""
    if not isinstance(document, dict):
        raise SchemaError(f"{where}: a schema is a JSON object, not {type(document).__name__}")
    if document.get("type") != "object":
        raise SchemaError(
            f'{where}: a stream\'s schema describes an object ("type": "object"), whose '
            "properties are the entries' fields"
        )
    if not isinstance(document.get("$schema", ""), str):
        raise SchemaError(f"{where}: $schema names a draft by its URI (a string)")
    remote = _remote_ref(document)
    if remote is not None:
        raise SchemaError(
            f"{where}: a $ref outside the schema ({remote[:PROBLEM_CHARS_MAX]!r}); a stream's "
            'schema is one document: refer within it ("#/$defs/...")'
        )
    kind = validators.validator_for(document, default=validators.Draft202012Validator)
    try:
        kind.check_schema(document)
    except exceptions.SchemaError as exc:
        path = exc.json_path if hasattr(exc, "json_path") else "$"
        raise SchemaError(
            f"{where}: not a valid JSON Schema at {path}: {exc.message[:PROBLEM_CHARS_MAX]}"
        ) from None
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return Schema(document, canonical, major, kind(document, registry=Registry()))


def _remote_ref(node: Any, depth: int = 0) -> str | None:
    """The first ``$ref`` or ``$dynamicRef`` in ``node`` that is not within the document."""
    if depth > REF_DEPTH_MAX:
        raise SchemaError(f"the schema nests deeper than {REF_DEPTH_MAX} levels")
    if isinstance(node, dict):
        for name, value in node.items():
            ref = name in ("$ref", "$dynamicRef") and isinstance(value, str)
            if ref and not value.startswith("#"):
                return str(value)
            found = _remote_ref(value, depth + 1)
            if found is not None:
                return found
    elif isinstance(node, list):
        for value in node:
            found = _remote_ref(value, depth + 1)
            if found is not None:
                return found
    return None


def load(path: Path, major: int, where: str) -> Schema:
    """The schema in the file at ``path``."""
    try:
        with path.open("rb") as f:
            data = f.read(SCHEMA_BYTES_MAX + 1)
    except OSError as exc:
        raise SchemaError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > SCHEMA_BYTES_MAX:
        raise SchemaError(f"{where}: {path} is larger than {SCHEMA_BYTES_MAX} bytes")
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise SchemaError(f"{where}: {path} is not JSON: {str(exc)[:PROBLEM_CHARS_MAX]}") from None
    return parse(document, major, f"{where} ({path})")
