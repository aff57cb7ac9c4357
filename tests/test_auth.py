"""CURVE keys, the config's allowlists, the ZAP handler's verdicts and keyed node addresses:
hostile key files and settings get clear errors, and only listed keys are admitted."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import zmq
from click.testing import CliRunner
from zmq.utils import z85

from relay.auth import keys
from relay.auth.zap import ANY, ENDPOINT, ZapHandler
from relay.cli import main
from relay.client.directory import parse_address
from relay.config import ConfigError, load, parse
from relay.runtime.templates import cluster_toml


def test_a_written_pair_reads_back_and_its_secret_is_owner_only(tmp_path: Path) -> None:
    pair = keys.write(tmp_path, "node-1")
    assert keys.read(keys.secret_file(tmp_path, "node-1")) == pair
    assert os.stat(keys.secret_file(tmp_path, "node-1")).st_mode & 0o077 == 0
    assert pair.secret not in repr(pair)
    with pytest.raises(keys.KeyFileError, match="already exists"):
        keys.write(tmp_path, "node-1")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such key file"),
        ("garbage\n", "not a key file"),
        ('curve\n    public-key = "abc"\n', "holds no secret key"),
        ('public-key = "abc"\nsecret-key = "short"\n', "not a valid Z85 CURVE key"),
        ("x" * (128 << 10), "is not a key file"),
    ],
)
def test_a_hostile_key_file_gets_a_clear_error(
    tmp_path: Path, content: str | None, why: str
) -> None:
    path = tmp_path / "k.key_secret"
    if content is not None:
        path.write_text(content)
    with pytest.raises(keys.KeyFileError, match=why):
        keys.read(path)


def test_a_key_file_whose_halves_do_not_belong_together_is_refused(tmp_path: Path) -> None:
    one, other = keys.generate(), keys.generate()
    path = tmp_path / "k.key_secret"
    path.write_text(f'curve\n    public-key = "{one.public}"\n    secret-key = "{other.secret}"\n')
    with pytest.raises(keys.KeyFileError, match="do not belong together"):
        keys.read(path)


def raw_config(**cluster: Any) -> dict[str, Any]:
    made = keys.ClusterKeys(
        {i: keys.generate().public for i in (1, 2, 3)}, keys.generate().public, "", "ab" * 32
    )
    raw = tomllib.loads(cluster_toml(3, keys=made).replace('[""]', "[]"))
    raw["cluster"].update(cluster)
    return raw


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"security": "tls"}, "'cluster.security' must be one of curve, none"),
        ({"client_auth": "maybe"}, "'cluster.client_auth' must be one of none, keys"),
        ({"client_keys": []}, "'cluster.client_keys', which is empty"),
        ({"client_keys": ["short"]}, "'cluster.client_keys[0]' must be a 40-character"),
        ({"admin_keys": "x"}, "'cluster.admin_keys' must be a list"),
        ({"keys_dir": ""}, "'cluster.keys_dir' must be a non-empty string"),
        ({"security": "none", "client_auth": "keys"}, 'needs cluster.security = "curve"'),
    ],
)
def test_a_bad_security_setting_names_its_key(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)):
        parse(raw_config(**change))


def test_curve_needs_every_nodes_own_public_key() -> None:
    raw = raw_config()
    del raw["node"][1]["public_key"]
    with pytest.raises(ConfigError, match=r"'node\[1\].public_key' is missing"):
        parse(raw)
    raw = raw_config()
    raw["node"][2]["public_key"] = raw["node"][0]["public_key"]
    with pytest.raises(ConfigError, match="nodes 1 and 3 have the same public_key"):
        parse(raw)
    raw = raw_config()
    raw["node"][0]["public_key"] = "not a key"
    with pytest.raises(ConfigError, match=r"'node\[0\].public_key' must be a 40-character"):
        parse(raw)


def test_without_curve_public_keys_are_ignored() -> None:
    config = parse(raw_config(security="none", client_auth="none"))
    assert all(spec.public_key is None for spec in config.nodes)


def test_a_node_address_may_carry_its_key() -> None:
    key = keys.generate().public
    found = parse_address(f"{key}@10.0.0.1:7201")
    assert (found.public_key, found.host, found.port) == (key, "10.0.0.1", 7201)
    assert parse_address(found.text) == found
    assert parse_address("h:1").public_key is None
    with pytest.raises(ValueError, match="not a public key"):
        parse_address(f"{'~' * 40}@h:1")


def zap_request(domain: bytes, public: bytes, mechanism: bytes = b"CURVE") -> list[bytes]:
    return [b"1.0", b"7", domain, b"10.0.0.9", b"", mechanism, public]


def test_the_zap_handler_admits_only_listed_keys_per_domain() -> None:
    ctx: zmq.Context[Any] = zmq.Context()
    node, client, stranger = keys.generate(), keys.generate(), keys.generate()
    zap = ZapHandler(ctx, {"mesh": {node.public: "1"}, "client": ANY, "admin": {}})
    asker = ctx.socket(zmq.REQ)
    try:
        asker.connect(ENDPOINT)
        cases = [
            (zap_request(b"mesh", z85.decode(node.public)), b"200", b"1"),
            (zap_request(b"mesh", z85.decode(stranger.public)), b"400", b""),
            (zap_request(b"client", z85.decode(client.public)), b"200", b"client"),
            (zap_request(b"admin", z85.decode(node.public)), b"400", b""),
            (zap_request(b"other", z85.decode(node.public)), b"400", b""),
            (zap_request(b"mesh", z85.decode(node.public), b"NULL"), b"400", b""),
            ([b"2.0", b"7"], b"500", b""),
        ]
        refusals = 0
        for request, status, user in cases:
            asker.send_multipart(request)
            assert asker.poll(0) == 0  # answered in the handler's turn, not by itself
            refused = zap.answer()
            refusals += len(refused)
            reply = asker.recv_multipart()
            assert (reply[2], reply[4]) == (status, user), request
        assert refusals == 5
    finally:
        asker.close(linger=0)
        zap.close()
        ctx.term()


def test_cluster_init_writes_keys_and_keys_gen_adds_one(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(main, ["cluster", "init", "--nodes", "3", "-o", str(tmp_path / "c.toml")])
    assert done.exit_code == 0, done.output
    config = load(tmp_path / "c.toml")
    assert config.auth.curve and len(config.auth.admin_keys) == 1
    for spec in config.nodes:
        pair = keys.read(keys.secret_file(config.keys_dir(), f"node-{spec.id}"))
        assert pair.public == spec.public_key
    made = runner.invoke(main, ["keys", "gen", "--dir", str(tmp_path / "k"), "--name", "ops"])
    assert made.exit_code == 0, made.output
    assert keys.read(keys.secret_file(tmp_path / "k", "ops")).public == made.output.strip()
    again = runner.invoke(main, ["keys", "gen", "--dir", str(tmp_path / "k"), "--name", "ops"])
    assert again.exit_code != 0 and "already exists" in again.output
    plain = runner.invoke(main, ["cluster", "init", "--no-keys", "-o", str(tmp_path / "p.toml")])
    assert plain.exit_code == 0 and not load(tmp_path / "p.toml").auth.curve


def test_client_tables_are_checked_and_need_client_keys() -> None:
    key = keys.generate().public
    raw = raw_config()
    raw["client"] = [{"name": "billing", "key": key, "publish": ["orders.*"]}]
    grant = parse(raw).grants[key]
    assert grant.may_publish("orders.eu") and not grant.may_consume("orders.eu")
    assert key in parse(raw).auth.client_keys  # a listed key is admitted
    raw["client"][0]["publish"] = "orders.*"
    with pytest.raises(ConfigError, match=r"'client\[0\].publish' must be a list of glob"):
        parse(raw)
    raw = raw_config(client_auth="none")
    raw["client"] = [{"key": key}]
    with pytest.raises(ConfigError, match=r"\[\[client\]\] tables need cluster.client_auth"):
        parse(raw)


def test_tokens_are_hashes_and_a_client_table_may_name_tokens_and_no_key() -> None:
    from relay.auth.tokens import new_token, token_hash

    token = new_token()
    raw = raw_config(client_tokens=[token_hash(token)])
    assert parse(raw).auth.client_tokens == (token_hash(token),)
    raw["client"] = [{"name": "web", "tokens": [token_hash("t2")], "consume": ["orders.*"]}]
    config = parse(raw)
    grant = config.token_grants[token_hash("t2")]
    assert grant.name == "web" and grant.key == "" and not config.grants
    assert grant.may_consume("orders.eu") and "token" in grant.refusal("read", "x")
    for bad, why in (
        ({"client_tokens": [token]}, r"'cluster.client_tokens\[0\]' must be the 64 lower-case"),
        ({"client_tokens": "abc"}, "'cluster.client_tokens' must be a list"),
    ):
        with pytest.raises(ConfigError, match=why):
            parse(raw_config(**bad))
    raw = raw_config()
    raw["client"] = [{"name": "a", "tokens": [token_hash("t")]}, {"tokens": [token_hash("t")]}]
    with pytest.raises(ConfigError, match=r"'client\[1\].tokens' hash is listed twice"):
        parse(raw)
    raw["client"] = [{"name": "a"}]
    with pytest.raises(ConfigError, match=r"'client\[0\].key' must be"):
        parse(raw)


def test_relay_keys_token_writes_an_owner_only_token_and_prints_its_hash(tmp_path: Path) -> None:
    from relay.auth.tokens import token_hash

    out = tmp_path / "web.token"
    made = CliRunner().invoke(main, ["keys", "token", "--out", str(out)])
    assert made.exit_code == 0, made.output
    token = out.read_text().strip()
    assert f'"{token_hash(token)}"' in made.output
    assert os.stat(out).st_mode & 0o077 == 0
    again = CliRunner().invoke(main, ["keys", "token", "--out", str(out)])
    assert again.exit_code != 0 and "exists" in again.output


def test_cluster_init_writes_a_client_token_its_hash_and_http_ports(tmp_path: Path) -> None:
    from relay.auth.tokens import token_hash

    made = CliRunner().invoke(
        main,
        ["cluster", "init", "--nodes", "3", "--base-port", "7100", "-o", str(tmp_path / "c.toml")],
    )
    assert made.exit_code == 0, made.output
    config = load(tmp_path / "c.toml")
    token = (config.keys_dir() / "client.token").read_text().strip()
    assert config.auth.client_tokens == (token_hash(token),)
    assert [n.http_port for n in config.nodes] == [7501, 7502, 7503]
