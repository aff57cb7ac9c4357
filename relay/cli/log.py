"""``relay log``: a node's logs on disk, readable while the node is down."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import click

from relay.cli.options import CONFIG, load_config


@click.group("log")
def log_group() -> None:
    """Inspect the segment files of a node's streams (read only)."""


def _nodes(config_path: str, node_id: int | None) -> list[tuple[int, Path]]:
    config = load_config(config_path)
    ids = [n.id for n in config.nodes] if node_id is None else [config.node(node_id).id]
    return [(i, config.data_dir(i)) for i in ids]


def _when(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@log_group.command("ls")
@CONFIG
@click.option("--node", "node_id", type=int, help="Only this node (default: every node).")
@click.option("--stream", help="Only this stream.")
def log_ls(config_path: str, node_id: int | None, stream: str | None) -> None:
    """Segments with their seq and time ranges and sizes."""
    from relay.storage.inspect import segments, streams

    click.echo(
        f"{'node':>4}  {'stream':<20} {'segment':<8} {'first seq':>20} {'last seq':>20}  "
        f"{'first time':<29} {'last time':<29} {'txs':>8} {'bytes':>11}"
    )
    for nid, data_dir in _nodes(config_path, node_id):
        for name, directory in streams(data_dir):
            if stream is not None and name != stream:
                continue
            for s in segments(directory):
                kind = "sealed" if s.sealed else "open"
                click.echo(
                    f"{nid:>4}  {name:<20} {kind:<8} {s.first_seq:>20} {s.last_seq:>20}  "
                    f"{_when(s.first_ms):<29} {_when(s.last_ms):<29} {s.records:>8} {s.size:>11}"
                )


@log_group.command("show")
@CONFIG
@click.option("--node", "node_id", type=int, required=True)
@click.option("--stream", required=True)
@click.option("--from", "start", type=int, default=0, help="First seq (inclusive).")
@click.option("--to", "end", type=int, default=0, help="Last seq (inclusive; 0: the end).")
def log_show(config_path: str, node_id: int, stream: str, start: int, end: int) -> None:
    """A range of records, one JSON object per line."""
    from relay.core.flake import seq_unix_ms
    from relay.storage.inspect import records, streams
    from relay.storage.records import CorruptRecord

    ((_, data_dir),) = _nodes(config_path, node_id)
    directory = dict(streams(data_dir)).get(stream)
    if directory is None:
        raise click.ClickException(f"node {node_id} holds no log of stream {stream!r}")
    try:
        for tx, digest in records(directory, max(0, start - 1), end or (1 << 63)):
            row = {
                "seq": tx.seq,
                "origin": tx.origin,
                "epoch": tx.epoch,
                "timestamp": _when(seq_unix_ms(tx.seq)),
                "producer_id": tx.producer_id,
                "msg_id": tx.msg_id,
                "key": None if tx.key is None else tx.key.decode("utf-8", "backslashreplace"),
                "headers": [[n, v.decode("utf-8", "backslashreplace")] for n, v in tx.headers],
                "payload": tx.payload.decode("utf-8", "backslashreplace"),
                "digest": digest.hex(),
            }
            click.echo(json.dumps(row))
    except CorruptRecord as exc:
        raise click.ClickException(f"corrupt record: {exc}") from None


@log_group.command("verify")
@CONFIG
@click.option("--node", "node_id", type=int, required=True)
def log_verify(config_path: str, node_id: int) -> None:
    """Re-fold every segment's chain; exit 1 naming the first corrupt record's file and offset."""
    from relay.storage.inspect import streams, verify

    ((_, data_dir),) = _nodes(config_path, node_id)
    bad = 0
    for name, directory in streams(data_dir):
        checked, problem = verify(directory, name)
        if problem is None:
            click.echo(f"{name}: {checked} records ok")
        else:
            bad += 1
            click.echo(f"{name}: {checked} records ok, then {problem}", err=True)
    if bad:
        raise SystemExit(1)
