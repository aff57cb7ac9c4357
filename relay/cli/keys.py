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
    click.echo(f'metrics_token_sha256 = "{_new_token_file(Path(out))}"')


@keys_group.command("token")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where to write the token (owner-only), e.g. keys/alice.token.",
)
def keys_token(out: str) -> None:
    """Make a bearer token for the HTTP API and print its hash, for cluster.client_tokens (it
    may do everything) or a [[client]] table's tokens (what that table allows)."""
    token_sha256 = _new_token_file(Path(out))
    click.echo(f'"{token_sha256}"')
    click.echo(
        f"add it to [cluster] client_tokens, or to a [[client]] table's tokens; send the "
        f"token in {out} as 'Authorization: Bearer <token>'",
        err=True,
    )


def _new_token_file(path: Path) -> str:
    """Write a new token to ``path`` and return its hash."""
    from relay.auth import tokens

    token = tokens.new_token()
    try:
        tokens.write(path, token)
    except tokens.TokenFileError as exc:
        raise click.ClickException(str(exc)) from None
    return tokens.token_hash(token)
