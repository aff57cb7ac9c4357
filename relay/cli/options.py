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


def load_config(path: str) -> Any:
    try:
        return load(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
