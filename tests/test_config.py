"""Config files: the example loads; every kind of mistake is refused, naming the key."""

import re
from pathlib import Path

import pytest

from relay.auth import keys
from relay.config import ConfigError, load, parse
from relay.runtime.templates import cluster_toml

ROOT = Path(__file__).resolve().parent.parent


def raw(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


def set_key(text: str, key: str, value: str) -> str:
    """The config text with ``[cluster] key = value`` (replaced, or added)."""
    if re.search(rf"^{key} = ", text, flags=re.M):
        return re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    return text.replace("[cluster]", f"[cluster]\n{key} = {value}", 1)


def test_the_example_config_loads_with_keys_made_on_first_use(tmp_path: Path) -> None:
    example = (ROOT / "cluster.example.toml").read_text()
    (tmp_path / "cluster.toml").write_text(example)
    config = load(tmp_path / "cluster.toml")
    assert [n.id for n in config.nodes] == [1, 2, 3]
    keys_dir = config.keys_dir()
    assert keys_dir == tmp_path / ".relay" / "local3" / "keys"
    assert config.node(2).public_key == keys.read(keys.secret_file(keys_dir, "node-2")).public
    assert config.auth.client_keys == (keys.read(keys.secret_file(keys_dir, "client")).public,)
    assert load(tmp_path / "cluster.toml") == config  # made once, read after
    (tmp_path / "far.toml").write_text(example.replace('host = "127.0.0.1"', 'host = "10.1.2.3"'))
    with pytest.raises(ConfigError, match=r"'node\[0\].host' is '10.1.2.3', not a loopback"):
        load(tmp_path / "far.toml")


def test_init_writes_loadable_3_and_5_node_configs() -> None:
    three = parse(raw(cluster_toml(3)))
    five = parse(raw(cluster_toml(5)))
    assert len(three.nodes) == 3
    routing = five.routing()
    assert routing.replicas_of("orders.eu") == (1, 2, 3)
    assert routing.replicas_of("payments.eu") == (3, 4, 5)
    assert routing.replicas_of("events.x") == (1, 2, 3, 4, 5)


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda t: t.replace("id = 2", "id = 1"), "node[1].id"),
        (
            lambda t: t.replace('metrics_token_sha256 = ""', 'metrics_token_sha256 = "secret"'),
            "cluster.metrics_token_sha256",
        ),
        (
            lambda t: t.replace("memory_bytes_max = 0 ", "memory_bytes_max = 1000 "),
            "cluster.memory_bytes_max",
        ),
        (lambda t: t.replace('fsync = "always"', 'fsync = "sometimes"'), "cluster.fsync"),
        (lambda t: t.replace("segment_bytes = 67108864", "segment_bytes = 10"), "segment_bytes"),
        (lambda t: t.replace("segment_ms = 3600000", "segment_ms = -1"), "cluster.segment_ms"),
        (lambda t: t.replace("id = 2\n", 'id = 2\ndata_dir = ""\n'), "node[1].data_dir"),
        (
            lambda t: t.replace("id = 2\n", 'id = 2\ndata_dir = "d"\n').replace(
                "id = 3\n", 'id = 3\ndata_dir = "d"\n'
            ),
            "share the data_dir",
        ),
        (lambda t: t.replace("mesh_port = 7102", "mesh_port = 7101"), "node[1].mesh_port"),
        (
            lambda t: t.replace("heartbeat_ms = 100", "heartbeat_ms = 100\nhartbeat_ms = 1"),
            "cluster.hartbeat_ms",
        ),
        (
            lambda t: t.replace("heartbeat_ms = 100", 'heartbeat_ms = "fast"'),
            "cluster.heartbeat_ms",
        ),
        (lambda t: t.replace("client_port = 7201", "client_port = 70000"), "node[0].client_port"),
        (lambda t: t.replace('streams = ["*"]', 'streams = ["solo"]', 1), "node[1].streams"),
        (  # a NUL would end a mesh topic early: its prefix would match another stream's frames
            lambda t: t.replace('streams = ["*"]', 'streams = ["a\\u0000*"]', 1),
            "node[0].streams",
        ),
        (lambda t: t.replace('host = "127.0.0.1"\n', "", 1), "node[0].host"),
        (
            lambda t: t.replace("[[node]]\nid = 1", "[[node]]\nid = 1\ncolour = 3", 1),
            "node[0].colour",
        ),
        *[
            (lambda t, k=k: set_key(t, k, "0"), k)
            for k in (
                "payload_bytes_max",
                "publish_items_max",
                "streams_max",
                "repair_batch_txs_max",
                "dedup_keys_max",
                "buffer_txs_max",
            )
        ],
        (lambda t: set_key(t, "queue_group_bytes_max", "1000"), "cluster.queue_group_bytes_max"),
        (lambda t: set_key(t, "queue_groups_max", '"many"'), "cluster.queue_groups_max"),
        (
            lambda t: set_key(
                set_key(t, "memory_bytes_max", str(256 << 20)), "queue_groups_max", "100"
            ),
            "would take more than 'cluster.memory_bytes_max'",
        ),
        (  # the same port under two names of one address
            lambda t: t.replace('host = "127.0.0.1"', 'host = "localhost"', 1).replace(
                "mesh_port = 7102", "mesh_port = 7101"
            ),
            "node[1].mesh_port",
        ),
        (
            lambda t: t.replace('host = "127.0.0.1"', 'host = "no-such-host.invalid"', 1),
            "node[0].host",
        ),
    ],
)
def test_bad_configs_are_refused_naming_the_key(edit, key: str) -> None:
    text = edit(cluster_toml(3))
    with pytest.raises(ConfigError) as info:
        parse(raw(text))
    assert key in str(info.value)


def test_small_replication_can_be_allowed_explicitly() -> None:
    text = cluster_toml(3).replace('streams = ["*"]', 'streams = ["solo"]', 1)
    text = text.replace("[cluster]\n", "[cluster]\nallow_small_replication = true\n")
    assert parse(raw(text)).allow_small_replication


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load(tmp_path / "nope.toml")


def test_storage_keys_and_data_dirs() -> None:
    config = parse(
        raw(cluster_toml(3).replace('fsync = "always"', 'fsync = "never"')), ROOT / "x.toml"
    )
    assert config.storage.fsync == "never" and not config.params.votes_wait_for_disk
    assert config.data_dir(2) == config.run_dir / "data" / "node-2"
    assert parse(raw(cluster_toml(3))).params.votes_wait_for_disk


def test_a_run_dir_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a directory")
    settings = raw(cluster_toml(3))
    settings["cluster"]["run_dir"] = str(tmp_path / "plain" / "run")
    with pytest.raises(ConfigError, match=r"run_dir .* is a file"):
        parse(settings)


def test_work_group_bounds_default_to_half_the_memory_budget() -> None:
    text = set_key(cluster_toml(3), "memory_bytes_max", str(1 << 30))
    bounds = parse(raw(text)).queues
    assert (bounds.group_bytes_max, bounds.groups_max) == (16 << 20, 32)
    text = set_key(set_key(text, "queue_group_bytes_max", str(64 << 20)), "queue_groups_max", "3")
    bounds = parse(raw(text)).queues
    assert (bounds.group_bytes_max, bounds.groups_max) == (64 << 20, 3)
