"""The security keys of ``[cluster]`` and a node's ``public_key``: checked, never trusted.

``security = "curve"`` (the default) encrypts and authenticates every socket with CurveZMQ:
each node lists its public key in the shared file and keeps its secret key in
``<keys_dir>/node-<id>.key_secret``. ``client_auth = "keys"`` admits only the clients whose
public keys ``client_keys`` lists; the admin port admits only ``admin_keys``.
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


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class AuthSettings:
    security: str = "curve"
    keys_dir: str = "keys"  # relative to the config file
    client_auth: str = "none"
    client_keys: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = ()

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
    settings = AuthSettings(
        security=cluster.get("security", defaults.security),
        keys_dir=keys_dir,
        client_auth=cluster.get("client_auth", defaults.client_auth),
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
