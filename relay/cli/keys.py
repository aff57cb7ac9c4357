"""``relay keys``: make CURVE key pairs for nodes, clients and operators."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("keys")
def keys_group() -> None:
    """CURVE key pairs: the public half goes into the cluster file, the secret half stays on
    the machine that uses it."""


@keys_group.command("gen")
@click.option(
    "--dir",
    "folder",
    default="keys",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where to write NAME.key (public) and NAME.key_secret (owner-only).",
)
@click.option(
    "--name",
    required=True,
    help="node-<id> for a node, client for the cluster's clients, admin for an operator.",
)
def keys_gen(folder: str, name: str) -> None:
    """Make a key pair and print its public key (for public_key, client_keys or admin_keys)."""
    from relay.auth import keys

    if not name or "/" in name or name.startswith("."):
        raise click.BadParameter(f"{name!r} is not a plain file name", param_hint="--name")
    try:
        pair = keys.write(Path(folder), name)
    except keys.KeyFileError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(pair.public)
