"""Which schema changes a typed stream takes within one major version (Sherlock's derived
types): a new version may add optional fields, anywhere in the tree of objects; it may not
remove a field, retype one, make one required, or close an object to fields it did not name.

How this works: the two documents are walked together from the root. Where both describe an
object (``properties``), every old property must still be there, each compared in turn; a
property only the new one has must be optional; ``required`` may not grow, and
``additionalProperties: false`` may not appear. Anywhere else the two must say the same, less
annotations (``title``, ``description``...), except that ``type`` may widen to a list that
holds the old type. Entries stored under the old version stay valid under the new one, but
for one case no schema comparison can see: an entry of an open object (no
``additionalProperties: false``) that carried a field the old version did not name, with a
value the new version's field of that name refuses.
"""

from __future__ import annotations

import json
from typing import Any

from relay.schema.document import Schema

ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "default",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)


def change_problem(old: Schema, new: Schema) -> str | None:
    """Why ``new`` cannot follow ``old`` within one major version, or None."""
    return _compare(old.document, new.document, "$")


def _compare(old: Any, new: Any, path: str) -> str | None:
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None if _same(old, new) else f"{path} changes"
    if "properties" in old or "properties" in new:
        return _compare_objects(old, new, path)
    if not _types_widen(old.get("type"), new.get("type")):
        return f"{path} is retyped from {_shown(old.get('type'))} to {_shown(new.get('type'))}"
    rest = {k: v for k, v in old.items() if k not in ANNOTATIONS and k != "type"}
    news = {k: v for k, v in new.items() if k not in ANNOTATIONS and k != "type"}
    if rest.keys() != news.keys():
        changed = sorted(rest.keys() ^ news.keys())[0]
        return f"{path} changes its {changed!r}"
    for key in rest:
        if key == "items":  # an array's entries: compared as a tree of their own
            problem = _compare(rest[key], news[key], f"{path}[*]")
            if problem:
                return problem
        elif not _same(rest[key], news[key]):
            return f"{path} changes its {key!r}"
    return None


def _compare_objects(old: dict[str, Any], new: dict[str, Any], path: str) -> str | None:
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    if not isinstance(old_props, dict) or not isinstance(new_props, dict):
        return f"{path} changes its 'properties'"
    for name, was in old_props.items():
        if name not in new_props:
            return f"{path}.{name} is removed"
        problem = _compare(was, new_props[name], f"{path}.{name}")
        if problem:
            return problem
    required = set(_names(new.get("required"))) - set(_names(old.get("required")))
    if required:
        return f"{path}.{sorted(required)[0]} becomes required"
    if new.get("additionalProperties") is False and old.get("additionalProperties") is not False:
        return f"{path} is closed to fields it does not name (additionalProperties: false)"
    if not _types_widen(old.get("type"), new.get("type")):
        return f"{path} is retyped from {_shown(old.get('type'))} to {_shown(new.get('type'))}"
    skip = ANNOTATIONS | {"properties", "required", "additionalProperties", "type"}
    rest = {k: v for k, v in old.items() if k not in skip}
    news = {k: v for k, v in new.items() if k not in skip}
    if not _same(rest, news):
        changed = sorted(
            k for k in rest.keys() | news.keys() if not _same(rest.get(k), news.get(k))
        )[0]
        return f"{path} changes its {changed!r}"
    return None


def _types_widen(old: Any, new: Any) -> bool:
    if old == new:
        return True
    olds = old if isinstance(old, list) else [old]
    news = new if isinstance(new, list) else [new]
    return old is not None and set(map(str, olds)) <= set(map(str, news))


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _shown(value: Any) -> str:
    return json.dumps(value)[:60]
