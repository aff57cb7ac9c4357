"""What each client key may do, as Kafka's ACLs and NATS' permissions say it: ``[[client]]``
tables in the cluster file, one per key, with glob patterns of the streams the key may publish
to (``publish``) and read (``consume``). A consumer group's commits and a batch's acks are
publishes to the group's and the batch's streams (``orders.__group.*``, ``orders.__batch.*``),
so ``publish`` also says which groups and batches a key may change. Publishing is also how a
stream is made: a key creates only the streams its ``publish`` patterns allow.

A table's ``tokens`` (hashes of bearer tokens, ``relay.auth.tokens``) get the same permissions
on the HTTP API; a table may name tokens and no key. A listed key is admitted (it needs no line
in ``client_keys``); a key admitted through ``client_keys``, or a token through
``client_tokens``, without a table of its own may do everything. Tables need
``client_auth = "keys"``: without it a node cannot tell its clients apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from relay.auth.settings import SettingsError, public_key, token_hashes

GRANTS_MAX = 10_000
PATTERNS_MAX = 1000
KEYS = {"key", "tokens", "name", "publish", "consume"}


@dataclass(frozen=True, slots=True)
class Grant:
    key: str  # the client's public key (Z85); "" for a client of the HTTP API only
    name: str  # how refusals name it
    publish: tuple[str, ...]
    consume: tuple[str, ...]
    tokens: tuple[str, ...] = ()  # hashes of its bearer tokens for the HTTP API

    def may_publish(self, stream: str) -> bool:
        return any(fnmatchcase(stream, p) for p in self.publish)

    def may_consume(self, stream: str) -> bool:
        return any(fnmatchcase(stream, p) for p in self.consume)

    @property
    def who(self) -> str:
        return f"key {self.key}" if self.key else "token"

    def refusal(self, verb: str, stream: str) -> str:
        patterns = self.publish if verb == "publish to" else self.consume
        return (
            f"client {self.name} ({self.who}) may not {verb} stream {stream!r}: its "
            f"[[client]] table allows {list(patterns) or 'nothing'}"
        )


@dataclass(frozen=True, slots=True)
class Grants:
    by_key: dict[str, Grant]  # the tables that name a key
    by_token: dict[str, Grant]  # token hash -> its table


def parse(where: str, tables: object) -> Grants:
    """The ``[[client]]`` tables by key and by token hash; ``SettingsError`` naming the first
    bad one."""
    if tables is None:
        return Grants({}, {})
    if not isinstance(tables, list) or len(tables) > GRANTS_MAX:
        raise SettingsError(f"{where}: 'client' must be at most {GRANTS_MAX} [[client]] tables")
    found: dict[str, Grant] = {}
    by_token: dict[str, Grant] = {}
    for i, table in enumerate(tables):
        label = f"client[{i}]"
        if not isinstance(table, dict):
            raise SettingsError(f"{where}: '{label}' must be a table")
        unknown = set(table) - KEYS
        if unknown:
            raise SettingsError(
                f"{where}: unknown key '{label}.{sorted(unknown)[0]}'; known: {sorted(KEYS)}"
            )
        tokens = token_hashes(where, f"{label}.tokens", table.get("tokens", []))
        key = (
            ""
            if "key" not in table and tokens
            else public_key(where, f"{label}.key", table.get("key"))
        )
        name = table.get("name", f"client[{i}]")
        if type(name) is not str or not name:
            raise SettingsError(f"{where}: '{label}.name' must be a non-empty string")
        lists = {
            verb: _patterns(where, f"{label}.{verb}", table.get(verb, []))
            for verb in ("publish", "consume")
        }
        if key in found:
            raise SettingsError(f"{where}: '{label}.key' is listed by another [[client]] too")
        grant = Grant(key, name, lists["publish"], lists["consume"], tokens)
        if key:
            found[key] = grant
        for token in tokens:
            if token in by_token:
                raise SettingsError(f"{where}: a '{label}.tokens' hash is listed twice")
            by_token[token] = grant
    return Grants(found, by_token)


def _patterns(where: str, label: str, value: Any) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or len(value) > PATTERNS_MAX
        or not all(isinstance(p, str) and p for p in value)
    ):
        raise SettingsError(
            f"{where}: '{label}' must be a list of glob patterns such as [\"orders.*\"], "
            f"got {value!r:.60}"
        )
    return tuple(value)
