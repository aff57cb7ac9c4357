"""What every ``relay`` command that reads the cluster file or reaches its nodes shares."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from relay.config import ConfigError, load

CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The cluster config file (TOML).",
)


@dataclass(frozen=True, slots=True)
class Target:
    """The cluster a client command talks to: a config file, or node addresses
    (``--servers`` or ``RELAY_SERVERS``, like kcat's ``-b`` and nats' ``--server``)."""

    config: str | None
    servers: list[str] | None
    client_key: str | None = None  # a .key_secret file; default: the config's client key

    @property
    def client_args(self) -> dict[str, Any]:
        """``config``, ``nodes`` and ``client_key`` as ``Producer`` and ``Consumer`` take them."""
        return {"config": self.config, "nodes": self.servers, "client_key": self.client_key}

    def addresses(self, node: int | None = None) -> Any:
        """The nodes to try, in order (``list[NodeAddress]``); ``node`` first."""
        from relay.client.directory import resolve

        try:
            return resolve(self.config, self.servers, node)
        except (ValueError, ConfigError) as exc:
            raise click.ClickException(str(exc)) from None

    def statuses(self, timeout_ms: int = 1000) -> dict[Any, Any]:
        """Each node's status, or None where it did not answer (``NodeAddress`` ->
        ``NodeStatus | None``), asked of all nodes at once."""
        from relay.client.status import statuses

        return statuses(self.addresses(), self.identity(), timeout_ms)

    def identity(self) -> Any:
        """Who this client is to the nodes (``KeyPair``)."""
        return client_identity(self.config, self.client_key)


CONFIG_FILE = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="The cluster config file (TOML).",
)


def cluster_target(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config`` and ``--servers`` to a client command and hand it a ``Target``."""

    @CONFIG_FILE
    @click.option(
        "--servers",
        envvar="RELAY_SERVERS",
        help="Node client addresses instead of --config: host:port or KEY@host:port, "
        "comma-separated (default: $RELAY_SERVERS).",
    )
    @click.option(
        "--client-key",
        envvar="RELAY_CLIENT_KEY",
        type=click.Path(dir_okay=False),
        help='This client\'s .key_secret file, for a cluster with client_auth = "keys" '
        "(default: $RELAY_CLIENT_KEY, else the config's keys_dir/client.key_secret).",
    )
    @functools.wraps(command)
    def with_target(
        *args: Any, config_path: str | None, servers: str | None, client_key: str | None, **kw: Any
    ) -> Any:
        return command(*args, target=target_of(config_path, servers, client_key), **kw)

    return with_target


def target_of(
    config_path: str | None, servers: str | None, client_key: str | None = None
) -> Target:
    """``--config`` wins over ``--servers``, so a file named on the command line is never
    overridden by the environment."""
    if config_path is not None:
        load_config(config_path)
        return Target(config_path, None, client_key)
    found = [s.strip() for s in (servers or "").split(",") if s.strip()]
    if not found:
        raise click.UsageError("give --config FILE, or --servers host:port,... (or RELAY_SERVERS)")
    from relay.client.directory import parse_address

    for text in found:
        try:
            parse_address(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--servers") from None
    return Target(None, found, client_key)


def client_identity(path: str | None, client_key: str | None = None) -> Any:
    """The client key pair: ``client_key``, else the cluster file's (``KeyPair``)."""
    from relay.auth.keys import KeyFileError
    from relay.client.directory import identity

    try:
        return identity(path, client_key)
    except (ConfigError, KeyFileError) as exc:
        raise click.ClickException(str(exc)) from None


def load_config(path: str) -> Any:
    try:
        return load(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
