"""A typed stream's schema: what it admits (and the path it names when it refuses), its
fingerprint, and which changes one major version takes."""

from __future__ import annotations

import re
from typing import Any

import pytest

from relay.schema import document, evolution

BASE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "user": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
            "required": ["name"],
        },
        "items": {"type": "array", "items": {"type": "object", "properties": {}}},
    },
    "required": ["id"],
}


def schema(doc: dict[str, Any]) -> document.Schema:
    return document.parse(doc, 1, "test")


def test_a_payload_is_checked_and_a_refusal_names_the_path() -> None:
    s = schema(BASE)
    assert s.problem(b'{"id": 1, "user": {"name": "a"}}') is None
    assert s.problem(b'{"id": "one"}') == "$.id: 'one' is not of type 'integer'"
    assert s.problem(b'{"id": 1, "user": {}}') == "$.user: 'name' is a required property"
    assert s.problem(b'{"id": 1, "user": {"name": 5}}') == "$.user.name: 5 is not of type 'string'"
    assert "not UTF-8 JSON" in (s.problem(b"\xff") or "")
    assert "not UTF-8 JSON" in (s.problem(b"{") or "")
    assert s.problem(b"[" * 100_000 + b"]" * 100_000) is not None  # refused, no crash


def test_the_fingerprint_is_of_what_the_schema_says_not_how_it_is_written() -> None:
    reordered = {"required": ["id"], "properties": BASE["properties"], "type": "object"}
    assert schema(BASE).fingerprint == schema(reordered).fingerprint
    assert schema(BASE).fingerprint != schema({**BASE, "required": []}).fingerprint
    assert len(schema(BASE).fingerprint) == 32


def changed(**edits: Any) -> dict[str, Any]:
    import copy

    doc = copy.deepcopy(BASE)
    for path, value in edits.items():
        *parents, last = path.split("__")
        node = doc
        for part in parents:
            node = node[part]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return doc


@pytest.mark.parametrize(
    ("new", "problem"),
    [
        (changed(properties__email={"type": "string"}), None),
        (changed(properties__user__properties__age={"type": "integer"}), None),
        (changed(properties__id={"type": ["integer", "null"]}), None),  # widened
        (changed(properties__id={"type": "integer", "description": "the id"}), None),
        (changed(properties__items__items__properties={"sku": {"type": "string"}}), None),
        (changed(required=[]), None),  # a field no longer required: old entries still hold
        (changed(properties__id=None), "$.id is removed"),
        (changed(properties__id={"type": "string"}), "$.id is retyped"),
        (changed(properties__user__properties__name={"type": "integer"}), "$.user.name is"),
        (changed(properties__email={"type": "string"}, required=["id", "email"]), "$.email"),
        (changed(additionalProperties=False), "$ is closed to fields"),
        (changed(properties__id={"type": "integer", "minimum": 5}), "$.id changes its 'minimum'"),
        (changed(properties__items__items={"type": "string"}), "$.items[*] is retyped"),
        (changed(minProperties=1.0), "$ changes its 'minProperties'"),
    ],
)
def test_one_major_version_takes_only_added_optional_fields(
    new: dict[str, Any], problem: str | None
) -> None:
    found = evolution.change_problem(schema(BASE), schema(new))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ({"type": "object", "$schema": [1]}, "$schema names a draft by its URI"),
        (
            {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/a.json"}}},
            "a $ref outside the schema",
        ),
    ],
)
def test_a_schema_that_cannot_be_checked_here_is_refused_at_load(
    doc: dict[str, Any], problem: str
) -> None:
    with pytest.raises(document.SchemaError, match=re.escape(problem)):
        schema(doc)


def test_a_ref_within_the_schema_is_followed() -> None:
    doc = {
        "type": "object",
        "$defs": {"n": {"type": "integer"}},
        "properties": {"a": {"$ref": "#/$defs/n"}},
    }
    assert schema(doc).problem(b'{"a": "x"}') == "$.a: 'x' is not of type 'integer'"
    assert schema(doc).problem(b'{"a": 1}') is None
