"""``[[stream]]`` blocks: parsed and refused naming the key, matched first-wins, enforced by the
core's publish intake, written into segment headers, and held at start against what the data
directory remembers (``streams.json``). No process: the node's parts are driven directly."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from test_storage import WINDOW, chain, fresh, write_in_batches

from relay import errors
from relay.config import ConfigError, parse
from relay.core.routing import Routing, StreamRule, Subscription
from relay.runtime import declared
from relay.runtime.templates import cluster_toml
from relay.storage import records
from relay.storage.recovery import open_log
from relay.storage.settings import StorageSettings
from relay.storage.store import dir_name

SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
    "required": ["id"],
}


def config_text(blocks: str, nodes: int = 3) -> str:
    text = cluster_toml(nodes, "127.0.0.1", 20000, name="t", keys=None)
    text = text.replace('security = "curve"', 'security = "none"')
    return text + "\n" + blocks


def load(tmp_path: Path, blocks: str, nodes: int = 3, schemas: dict | None = None):  # type: ignore[no-untyped-def]
    for name, document in (schemas or {}).items():
        (tmp_path / name).write_text(json.dumps(document))
    path = tmp_path / "cluster.toml"
    text = config_text(blocks, nodes)
    path.write_text(text)
    return parse(tomllib.loads(text), path)


def test_the_first_block_that_matches_holds_a_streams_settings(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[[stream]]
pattern = "orders.eu"
retention_txs = 10
[[stream]]
pattern = "orders.*"
nodes = [1, 2, 3]
segment_bytes = 8192
max_payload_bytes = 100
create = false
cleanup = "compact"
[[stream]]
pattern = "*"
retention_ms = 60000
""",
        nodes=4,
    )
    blocks = config.streams
    assert blocks.storage_of("orders.eu").retention_txs == 10
    assert blocks.storage_of("orders.eu").segment_bytes == config.storage.segment_bytes
    assert blocks.storage_of("orders.us").segment_bytes == 8192
    assert blocks.storage_of("orders.us").cleanup == "compact"
    assert blocks.storage_of("other").retention_ms == 60000
    assert blocks.block_of("orders.__queue.g") is None  # a queue's own stream: no block
    routing = config.routing()
    assert routing.replicas_of("orders.us") == (1, 2, 3)  # the block names them
    assert routing.replicas_of("other") == (1, 2, 3, 4)  # the nodes' own patterns ("*")
    assert routing.replicas_of("orders.us.__queue.g") == (1, 2, 3)
    info = blocks.describe("orders.us", (1, 2, 3))
    assert info["pattern"] == "orders.*" and info["max_payload_bytes"] == 100
    assert (info["create"], info["cleanup"], info["nodes"]) == (False, "compact", [1, 2, 3])
    assert blocks.describe("x", (1,))["pattern"] == "*"
    assert load(tmp_path, "").streams.describe("x", (1,))["pattern"] == ""  # the defaults


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ('pattern = ""', r"'stream\[0\].pattern' must be a glob"),
        ('pattern = "a"\nnodes = [1, 9]', r"'stream\[0\].nodes' names node 9"),
        ('pattern = "a"\nnodes = [1, 1, 2]', r"'stream\[0\].nodes' must be a list of distinct"),
        ('pattern = "a"\nnodes = [1, 2]', r"'stream\[0\].nodes' names 2 node\(s\)"),
        ('pattern = "a"\nretention_txs = -1', r"'stream\[0\].retention_txs' must be a non-neg"),
        ('pattern = "a"\nsegment_bytes = 10', r"'stream\[0\].segment_bytes' must be at least"),
        ('pattern = "a"\ncleanup = "shred"', r"'stream\[0\].cleanup' must be one of"),
        ('pattern = "a"\nmax_payload_bytes = 99999999', r"'stream\[0\].max_payload_bytes'"),
        ('pattern = "a"\ncreate = "no"', r"'stream\[0\].create' must be true or false"),
        ('pattern = "a"\nfsync = "never"', r"unknown key 'stream\[0\].fsync'"),
        ('pattern = "a"\nschema = "missing.json"', r"'stream\[0\].schema'.*cannot read"),
        ('pattern = "a"\nschema_major = 2', r"'stream\[0\].schema_major' needs a schema"),
        ('pattern = "a b"', r"'stream\[0\].pattern' must be a glob"),
        ('pattern = "x.__queue.g"', r"'stream\[0\].pattern' 'x.__queue.g': one of relay's own"),
        ('pattern = "a"\n[[stream]]\npattern = "a"', r"'stream\[1\].pattern' 'a' is also stream"),
    ],
)
def test_a_bad_block_is_refused_naming_its_key(tmp_path: Path, block: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, "[[stream]]\n" + block)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1], "a schema is a JSON object"),
        ({"type": "string"}, '"type": "object"'),
        ({"type": "object", "properties": {"a": {"type": "nope"}}}, "not a valid JSON Schema"),
    ],
)
def test_a_schema_that_cannot_type_a_stream_is_refused(
    tmp_path: Path, document: object, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, '[[stream]]\npattern = "a"\nschema = "s.json"', schemas={"s.json": document})


def test_the_core_refuses_what_a_block_forbids() -> None:
    from relay.core.events import PublishRequested
    from relay.core.messages import Item
    from relay.core.publish_intake import _rule_refusal

    def pub(stream: str, key: bytes | None = b"k") -> PublishRequested:
        return PublishRequested(b"c", 1, stream, "p", (Item(1, b"x", key, ()),))

    closed = StreamRule("orders.*", create=False)
    refused = _rule_refusal(closed, pub("orders.new"), exists=False)
    assert refused is not None and refused.code == errors.NOT_FOUND
    assert "create = false" in refused.message
    assert _rule_refusal(closed, pub("orders.new"), exists=True) is None
    assert _rule_refusal(StreamRule("orders.eu", create=False), pub("orders.eu"), False) is None
    keyed = StreamRule("kv", keyed=True)
    refused = _rule_refusal(keyed, pub("kv", None), exists=True)
    assert refused is not None and "without a key" in refused.message
    routing = Routing((Subscription(1, ("*",)),), (StreamRule("big.*", payload_bytes_max=10),))
    assert routing.rule_of("big.x") is not None and routing.rule_of("small") is None


def test_a_payload_over_the_streams_own_bound_is_refused() -> None:
    from relay.core.events import PublishRequested
    from relay.core.messages import Item
    from relay.core.params import CoreParams
    from relay.core.publish import request_problem

    req = PublishRequested(b"c", 1, "s", "p", (Item(1, b"x" * 11, None, ()),))
    assert request_problem(req, CoreParams()) is None
    problem = request_problem(req, CoreParams(), 10)
    assert problem is not None and "exceeds the stream's payload_bytes_max (10)" in problem


def test_a_segment_header_carries_the_schema_and_recovery_takes_only_known_ones(
    tmp_path: Path,
) -> None:
    typed = StorageSettings(schema=b"\x01" * 32, schemas=frozenset({b"\x01" * 32}))
    log = fresh(tmp_path, typed)
    txs, digests = chain("s", 20)
    write_in_batches(log, txs, digests, 5)
    log.close()
    data = log.segments[0].path.read_bytes()
    found = records.read_frame(data, 0)
    assert found is not None and records.decode_header(found[1]).schema == b"\x01" * 32
    recovered = open_log(log.directory, "s", typed, WINDOW, 0)
    assert not recovered.problems and recovered.log.records() == 20
    recovered.log.close()
    other = replace(typed, schema=b"\x02" * 32, schemas=frozenset({b"\x02" * 32}))
    recovered = open_log(log.directory, "s", other, WINDOW, 0)
    assert recovered.log.records() == 0
    assert "no version of this stream's" in recovered.problems[0]
    assert list((log.directory / "quarantine").rglob("*.open"))  # kept for the operator


def test_a_header_with_anything_but_a_fingerprint_in_its_map_is_corrupt() -> None:
    import msgpack

    for extra in ({"schema": b"short"}, {"schema": b""}, {}, {"index": 3}, [1]):
        body = msgpack.packb([records.FORMAT, "s", 0, b"\0" * 32, extra])
        with pytest.raises(records.CorruptRecord, match="bad segment header"):
            records.decode_header(body)


def test_retention_by_txs_keeps_the_newest_segments(tmp_path: Path) -> None:
    log = fresh(tmp_path, StorageSettings(segment_bytes=4096, retention_txs=50))
    txs, digests = chain("s", 300)
    write_in_batches(log, txs, digests, 10)
    before = log.records()
    assert log.retain(0) is not None
    assert 50 <= log.records() < before  # at least retention_txs: one segment fewer is too few
    assert log.records() - log.segments[0].records < 50


def blocks_config(tmp_path: Path, block: str, schema: dict | None = None, nodes: int = 4):  # type: ignore[no-untyped-def]
    return load(tmp_path, block, nodes=nodes, schemas={"s.json": schema} if schema else None)


def test_a_start_refuses_a_block_that_would_shrink_replicas_below_three(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = blocks_config(tmp_path, '[[stream]]\npattern = "o.*"\nnodes = [1, 2, 3, 4]')
    declared.check(config, data)
    grown = blocks_config(tmp_path, '[[stream]]\npattern = "o.*"\nnodes = [1, 2, 3]')
    declared.check(grown, data)  # four to three: still three copies
    small = config_text('[[stream]]\npattern = "o.*"\nnodes = [1, 2]', 4).replace(
        "[cluster]", "[cluster]\nallow_small_replication = true"
    )
    (tmp_path / "cluster.toml").write_text(small)
    shrunk = parse(tomllib.loads(small), tmp_path / "cluster.toml")
    with pytest.raises(declared.DeclaredError, match=r"'stream\[0\].nodes' gives streams 'o.\*' 2"):
        declared.check(shrunk, data)


def test_a_renamed_pattern_is_held_against_what_its_streams_had(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "streams" / dir_name("users")).mkdir(parents=True)  # the node holds the stream
    declared.check(
        blocks_config(tmp_path, '[[stream]]\npattern = "users"\nschema = "s.json"', SCHEMA), data
    )
    retyped = {**SCHEMA, "properties": {**SCHEMA["properties"], "id": {"type": "string"}}}
    renamed = '[[stream]]\npattern = "user*"\nschema = "s.json"'
    with pytest.raises(declared.DeclaredError, match=r"streams 'users' have: \$.id is retyped"):
        declared.check(blocks_config(tmp_path, renamed, retyped), data)
    with pytest.raises(declared.DeclaredError, match=r"streams 'users' are typed"):
        declared.check(blocks_config(tmp_path, '[[stream]]\npattern = "u*"'), data)


def test_a_schema_may_add_optional_fields_and_break_only_under_a_new_major(tmp_path: Path) -> None:
    data = tmp_path / "data"
    block = '[[stream]]\npattern = "users"\nschema = "s.json"'
    first = declared.check(blocks_config(tmp_path, block, SCHEMA), data)
    added = {**SCHEMA, "properties": {**SCHEMA["properties"], "email": {"type": "string"}}}
    second = declared.check(blocks_config(tmp_path, block, added), data)
    assert first < second and len(second) == 2  # both versions' segments stay readable
    retyped = {**added, "properties": {**added["properties"], "id": {"type": "string"}}}
    with pytest.raises(declared.DeclaredError, match=r"'stream\[0\].schema'.*\$.id is retyped"):
        declared.check(blocks_config(tmp_path, block, retyped), data)
    major = block + "\nschema_major = 2"
    assert len(declared.check(blocks_config(tmp_path, major, retyped), data)) == 3
    with pytest.raises(declared.DeclaredError, match=r"'stream\[0\].schema_major' 1 goes back"):
        declared.check(blocks_config(tmp_path, block, added), data)
    with pytest.raises(declared.DeclaredError, match=r"'stream\[0\].schema' is gone"):
        declared.check(blocks_config(tmp_path, '[[stream]]\npattern = "users"'), data)


def test_a_damaged_streams_file_is_refused_naming_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    config = blocks_config(tmp_path, '[[stream]]\npattern = "o"')
    for content in (b"{", b"[]", b'{"format": 1, "schemas": {"zz": {}}, "blocks": {}}'):
        (data / declared.FILE).write_bytes(content)
        with pytest.raises(declared.DeclaredError, match=r"streams\.json: not a relay"):
            declared.check(config, data)
