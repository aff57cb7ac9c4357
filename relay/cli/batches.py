"""``relay batch status``: whether a fan-out batch is complete for a consumer group."""

from __future__ import annotations

from contextlib import closing

import click

from relay.cli.options import Target, cluster_target


@click.group("batch")
def batch_group() -> None:
    """Fan-out batches: one id, many items, complete once a group acked them all."""


@batch_group.command("status")
@cluster_target
@click.argument("batch")
@click.option("--group", required=True, help="The consumer group whose acks count.")
def batch_status(target: Target, batch: str, group: str) -> None:
    """Print BATCH's state for GROUP: complete, or open/closed with acked of count."""
    from relay import RelayError
    from relay.client.batches import status
    from relay.client.fetcher import Fetcher

    try:
        order, pair = target.addresses(), target.identity()
        with closing(Fetcher(batch, order, pair=pair)) as fetcher:
            found = status(fetcher, group)
    except (RelayError, TimeoutError) as exc:
        raise click.ClickException(str(exc)) from None
    state = "complete" if found.complete else "closed" if found.closed else "open"
    click.echo(f"{state} {found.acked}/{found.count}")
    if not found.complete:
        raise SystemExit(1)
