"""``relay stream ls`` and ``relay stream info``: what the nodes hold, as ``nats stream``
shows it. Every node that answers is asked; a stream's figures are its replicas' own."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from relay.cli.options import Target, cluster_target
from relay.client.stream_views import held_by_node, seq_time, stream_json

if TYPE_CHECKING:
    from relay.core.status import NodeStatus


@click.group("stream")
def stream_group() -> None:
    """Streams: list them, or show one stream on every node."""


@stream_group.command("ls")
@cluster_target
@click.option("--all", "show_all", is_flag=True, help="Also group and batch streams.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per stream.")
def stream_ls(target: Target, show_all: bool, as_json: bool) -> None:
    """Every stream the answering nodes hold: replicas, txs, bytes, verified head."""
    held = held_by_node(_answering(target))
    names = sorted(n for n in held if show_all or "__" not in n)
    if not as_json:
        click.echo(f"{'stream':<32} {'replicas':<10} {'txs':>10} {'bytes':>12} {'last':<24}")
    for name in names:
        copies = held[name]
        best = max(copies.values(), key=lambda s: s.verified_seq)
        txs = max(s.log_txs for s in copies.values())
        size = max(s.log_bytes for s in copies.values())
        replicas = ",".join(str(r) for r in best.replicas)
        if as_json:
            row = {"stream": name, "replicas": list(best.replicas), "txs": txs, "bytes": size}
            click.echo(json.dumps({**row, "last_seq": str(best.verified_seq)}))
        else:
            last = seq_time(best.verified_seq)
            click.echo(f"{name:<32} {replicas:<10} {txs:>10} {size:>12} {last:<24}")


@stream_group.command("info")
@cluster_target
@click.argument("stream")
@click.option("--json", "as_json", is_flag=True, help="The settings and every node's figures.")
def stream_info(target: Target, stream: str, as_json: bool) -> None:
    """STREAM's settings in force (its [[stream]] block's, or the defaults), and its replicas,
    transactions, bytes, first and last seq and time, and the verified head on each node."""
    from relay.client.status import stream_settings
    from relay.errors import RelayError

    try:
        settings = stream_settings(target.addresses(), stream, target.identity())
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    copies = held_by_node(_answering(target)).get(stream, {})
    if as_json:
        nodes = {str(n): stream_json(s) for n, s in sorted(copies.items())}
        click.echo(json.dumps({"settings": settings, "nodes": nodes}, indent=2))
        return
    click.echo(f"stream:        {stream}")
    _echo_settings(settings)
    if not copies:
        raise click.ClickException(
            f"no node that answered holds a stream {stream!r} (the settings above are the ones "
            "it would take)"
        )
    best = max(copies.values(), key=lambda s: s.verified_seq)
    firsts = [s.log_first_seq for s in copies.values() if s.log_first_seq]
    click.echo(f"replicas:      {', '.join(str(r) for r in best.replicas)}")
    click.echo(f"transactions:  {max(s.log_txs for s in copies.values())}")
    click.echo(f"bytes:         {max(s.log_bytes for s in copies.values())}")
    if firsts:
        click.echo(f"first:         seq {min(firsts)} at {seq_time(min(firsts))}")
    click.echo(f"last verified: seq {best.verified_seq} at {seq_time(best.verified_seq)}")
    click.echo("")
    click.echo(f"{'node':<5} {'verified seq':>20} {'head seq':>20} {'unverified':>10} {'txs':>10}")
    for node, s in sorted(copies.items()):
        click.echo(
            f"{node:<5} {s.verified_seq:>20} {s.head_seq:>20} {s.unverified_txs:>10} "
            f"{s.log_txs:>10}"
        )


def _echo_settings(settings: dict[str, Any]) -> None:
    """The settings in force, one per line, by their keys in the cluster file (0: no bound)."""
    pattern = settings.get("pattern") or "(none: the [cluster] defaults)"
    click.echo(f"block:         {pattern}")
    for key, value in settings.items():
        if key in ("stream", "pattern", "schema"):
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        click.echo(f"  {key + ':':<21} {shown}")
    if settings.get("schema"):
        click.echo(f"  {'schema:':<21} {settings['schema']}")
    click.echo("")


def _answering(target: Target) -> list[NodeStatus]:
    found = [s for s in target.statuses().values() if s is not None]
    if not found:
        raise click.ClickException("no node answered")
    return found
