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


@keys_group.command("metrics-token")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where to write the token (owner-only), for Prometheus' credentials_file.",
)
def keys_metrics_token(out: str) -> None:
    """Make a bearer token for /metrics and print the metrics_token_sha256 line for
    [cluster]."""
    import os
    import secrets

    from relay.runtime.metrics_server import token_hash

    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise click.ClickException(f"{out}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")
    click.echo(f'metrics_token_sha256 = "{token_hash(token)}"')
