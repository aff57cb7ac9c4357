"""``relay groups``: consumer groups' committed positions, their lag, and resetting them."""

from __future__ import annotations

import time
from contextlib import closing
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from relay.cli.options import Target, cluster_target

if TYPE_CHECKING:
    from relay.client.fetcher import Fetcher
    from relay.wire.replies import SpanReply


@click.group("groups")
def groups_group() -> None:
    """Consumer groups (like kafka-consumer-groups): list, describe, reset."""


@groups_group.command("ls")
@cluster_target
def groups_ls(target: Target) -> None:
    """Every group with a committed position, and the streams it has one in."""
    found: dict[str, list[str]] = {}
    for stream, group in _group_streams(target):
        found.setdefault(group, []).append(stream)
    for group in sorted(found):
        click.echo(f"{group}\t{','.join(sorted(found[group]))}")


@groups_group.command("describe")
@cluster_target
@click.argument("group")
def groups_describe(target: Target, group: str) -> None:
    """Per stream: committed seq, verified head, lag in transactions and in seconds."""
    from relay import RelayError
    from relay.client.fetcher import Fetcher
    from relay.client.groups import group_stream, read_committed
    from relay.core.flake import seq_unix_ms

    streams = sorted(s for s, g in _group_streams(target) if g == group)
    if not streams:
        raise click.ClickException(f"no group {group!r} has committed anything")
    click.echo("stream\tcommitted\tverified_head\tlag_txs\tlag_s\tcommitted_at")
    for stream in streams:
        order, pair = target.addresses(), target.identity()
        with closing(Fetcher(group_stream(stream, group), order, pair=pair)) as commits:
            try:
                committed = read_committed(commits, 10.0)
            except (RelayError, TimeoutError) as exc:
                click.echo(f"{stream}\t{exc}")
                continue
        if committed is None:
            continue
        with closing(Fetcher(stream, order, pair=pair)) as data:
            spanned = _span(data, committed.seq)
        counted = [b for b in spanned.bounds if b[2]]
        head = max(spanned.verified_seq, committed.seq)
        lag_txs = counted[-1][2] if counted else 0
        lag_s = (seq_unix_ms(head) - seq_unix_ms(committed.seq)) / 1000 if committed.seq else 0
        at = datetime.fromtimestamp(seq_unix_ms(committed.at_seq) / 1000, UTC).isoformat()
        click.echo(f"{stream}\t{committed.seq}\t{head}\t{lag_txs}\t{lag_s:.3f}\t{at}")


@groups_group.command("reset")
@cluster_target
@click.argument("group")
@click.option("--stream", required=True)
@click.option("--to", "point", required=True, help="earliest, latest, a seq, or an ISO 8601 time.")
def groups_reset(target: Target, group: str, stream: str, point: str) -> None:
    """Move GROUP's committed position in STREAM (its consumers should be stopped)."""
    from relay import Producer, RelayError
    from relay.cli.consume import parse_point
    from relay.client.fetcher import Fetcher
    from relay.client.groups import commit_payload, group_stream
    from relay.core.flake import make_seq

    with closing(Fetcher(stream, target.addresses(), pair=target.identity())) as data:
        verified = _span(data, 0).verified_seq
        begin = point if point in ("earliest", "latest") else parse_point(point, "--to")
        if begin == "earliest":
            after = max(0, _span(data, 0).earliest_seq - 1)
        elif begin == "latest":
            after = verified
        elif isinstance(begin, int):
            after = max(0, begin - 1)  # a seq to start at, inclusive
        else:
            assert isinstance(begin, datetime)
            after = max(0, make_seq(int(begin.timestamp() * 1000), 0, 0) - 1)
        after = min(after, verified)  # past the verified head the digest is not settled yet
        reply = None
        deadline = time.monotonic() + 10
        while reply is None and time.monotonic() < deadline:
            reply = data.fetch(after, 1, 0)
        if reply is None:
            raise click.ClickException(f"no node answered for {stream!r}")
    try:
        with Producer(**target.client_args) as producer:
            payload = commit_payload(stream, after, reply.prev_digest)
            producer.publish(group_stream(stream, group), payload, key=stream)
    except RelayError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    click.echo(f"{group} {stream}: consumers resume after seq {after}")


def _group_streams(target: Target) -> list[tuple[str, str]]:
    """(stream, group) of every group stream the nodes that answer hold."""
    from relay.client.groups import parse_group_stream

    names: set[str] = set()
    for status in target.statuses().values():
        names |= {s.name for s in status.streams} if status else set()
    return [found for name in names if (found := parse_group_stream(name))]


def _span(fetcher: Fetcher, after: int) -> SpanReply:
    """The verified txs after ``after`` as one part, asked until a node answers."""
    try:
        return fetcher.span_within(after, 0, 0, 1, 10.0)
    except TimeoutError as exc:
        raise click.ClickException(str(exc)) from None
