"""What every ``relay`` command that reads the cluster file shares."""

from __future__ import annotations

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


def client_identity(path: str) -> Any:
    """The client key pair for the cluster file at ``path`` (``KeyPair``)."""
    from relay.auth.keys import KeyFileError
    from relay.client.directory import identity

    try:
        return identity(path)
    except (ConfigError, KeyFileError) as exc:
        raise click.ClickException(str(exc)) from None


def load_config(path: str) -> Any:
    try:
        return load(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
