"""The security keys of ``[cluster]`` and a node's ``public_key``: checked, never trusted.

``security = "curve"`` (the default) encrypts and authenticates every socket with CurveZMQ:
each node lists its public key in the shared file and keeps its secret key in
``<keys_dir>/node-<id>.key_secret``. ``client_auth = "keys"`` admits only the clients whose
public keys ``client_keys`` lists, and the HTTP API only the bearer tokens whose hashes
``client_tokens`` lists (``relay.auth.tokens``); the admin port admits only ``admin_keys``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SECURITY_MODES = ("curve", "none")
CLIENT_AUTH_MODES = ("none", "keys")
KEY_CHARS = 40  # a 32-byte key in Z85
Z85_ALPHABET = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
ALLOWLIST_MAX = 10_000
HEX = frozenset("0123456789abcdef")
TOKENS_MAX = 10_000


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class AuthSettings:
    security: str = "curve"
    keys_dir: str = "keys"  # relative to the config file
    client_auth: str = "none"
    client_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()
    client_tokens: tuple[str, ...] = ()  # hashes of bearer tokens for HTTP that may do everything

    @property
    def curve(self) -> bool:
        return self.security == "curve"


KEYS = frozenset(AuthSettings.__dataclass_fields__)


def is_public_key(value: object) -> bool:
    return isinstance(value, str) and len(value) == KEY_CHARS and set(value) <= Z85_ALPHABET


def public_key(where: str, key: str, value: object) -> str:
    """``value`` if it is a Z85 public key; ``SettingsError`` naming ``key`` if not."""
    if not is_public_key(value):
        raise SettingsError(
            f"{where}: '{key}' must be a {KEY_CHARS}-character Z85 public key "
            f"(as `relay keys gen` prints), got {value!r:.60}"
        )
    assert isinstance(value, str)
    return value


def is_token_hash(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= HEX


def token_hashes(where: str, key: str, value: object) -> tuple[str, ...]:
    """``value`` if it is a list of token hashes; ``SettingsError`` naming ``key`` if not."""
    if not isinstance(value, list) or len(value) > TOKENS_MAX:
        raise SettingsError(f"{where}: '{key}' must be a list of at most {TOKENS_MAX} token hashes")
    for i, item in enumerate(value):
        if not is_token_hash(item):
            raise SettingsError(
                f"{where}: '{key}[{i}]' must be the 64 lower-case hex digits of a token's "
                f"SHA-256 (`relay keys token` makes a token and prints it), got {item!r:.60}"
            )
    return tuple(value)


def parse(where: str, cluster: dict[str, Any]) -> AuthSettings:
    """The security settings among ``[cluster]``'s keys; ``SettingsError`` names a bad one."""
    defaults = AuthSettings()
    for key, modes in (("security", SECURITY_MODES), ("client_auth", CLIENT_AUTH_MODES)):
        value = cluster.get(key, getattr(defaults, key))
        if value not in modes:
            raise SettingsError(
                f"{where}: 'cluster.{key}' must be one of {', '.join(modes)}, got {value!r:.60}"
            )
    keys_dir = cluster.get("keys_dir", defaults.keys_dir)
    if type(keys_dir) is not str or not keys_dir:
        raise SettingsError(f"{where}: 'cluster.keys_dir' must be a non-empty string")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("client_keys", "admin_keys"):
        value = cluster.get(key, [])
        if not isinstance(value, list) or len(value) > ALLOWLIST_MAX:
            raise SettingsError(
                f"{where}: 'cluster.{key}' must be a list of at most {ALLOWLIST_MAX} public keys"
            )
        lists[key] = tuple(public_key(where, f"cluster.{key}[{i}]", k) for i, k in enumerate(value))
    tokens = token_hashes(where, "cluster.client_tokens", cluster.get("client_tokens", []))
    settings = AuthSettings(
        security=cluster.get("security", defaults.security),
        keys_dir=keys_dir,
        client_auth=cluster.get("client_auth", defaults.client_auth),
        client_tokens=tokens,
        **lists,
    )
    if settings.client_auth == "keys" and not settings.curve:
        raise SettingsError(
            f'{where}: \'cluster.client_auth\' = "keys" needs cluster.security = "curve"'
        )
    if settings.client_auth == "keys" and not settings.client_keys:
        raise SettingsError(
            f"{where}: 'cluster.client_auth' = \"keys\" admits only 'cluster.client_keys', "
            "which is empty: list the public keys of your clients (`relay keys gen`)"
        )
    return settings
