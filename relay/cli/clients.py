"""``relay publish`` and ``relay consume``."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import click

from relay.cli.options import CONFIG, load_config


@click.command()
@CONFIG
@click.option("--stream", required=True)
@click.option("--node", "node_id", type=int, help="The node to publish to first.")
@click.option("--timeout", "timeout_s", default=30.0, show_default=True)
@click.option("--key", help="The key of every message (UTF-8).")
@click.option(
    "-H", "--header", "headers", multiple=True, help="A header NAME:VALUE; repeat for more."
)
@click.argument("messages", nargs=-1)
@click.option(
    "--journal",
    type=click.Path(file_okay=False),
    help="A directory that keeps each message until it is acknowledged; publishing again "
    "with it first resends what a crash left unacknowledged.",
)
def publish(
    config_path: str,
    stream: str,
    node_id: int | None,
    timeout_s: float,
    key: str | None,
    headers: tuple[str, ...],
    journal: str | None,
    messages: tuple[str, ...],
) -> None:
    """Publish MESSAGES (or one per line of standard input); print each seq."""
    from relay import Producer, RelayError

    load_config(config_path)
    pairs = [_header(h) for h in headers]
    lines = list(messages) if messages else [line.rstrip("\n") for line in sys.stdin]
    failed = 0
    with Producer(
        config=config_path, node=node_id, timeout_s=timeout_s, journal=journal
    ) as producer:
        if producer.recovered:
            click.echo(f"resending {len(producer.recovered)} messages from the journal", err=True)
        futures = [producer.send(stream, line.encode(), key=key, headers=pairs) for line in lines]
        producer.flush()
        for future in producer.recovered:
            if future.failed():
                failed += 1
        for line, future in zip(lines, futures, strict=True):
            try:
                ack = future.result()
            except RelayError as exc:
                failed += 1
                click.echo(f"error {exc.code}: {exc.message} ({line[:40]!r})", err=True)
                continue
            click.echo(f"{ack.seq} {ack.digest.hex()[:16]}")
    if failed:
        raise click.ClickException(f"{failed} of {len(lines)} messages were not acknowledged")


@click.command()
@CONFIG
@click.option("--stream", required=True)
@click.option("--node", "node_id", type=int, help="The node to read from first.")
@click.option(
    "--from",
    "start",
    default="earliest",
    show_default=True,
    help="earliest, latest, a seq, or a time (ISO 8601, e.g. 2026-11-22T10:00:00Z) to start at.",
)
@click.option("--since", help="Start this long ago: 30s, 10m, 2h, 1d (like kcat -o s@).")
@click.option("--count", type=int, help="Stop after this many transactions.")
@click.option("--idle-exit", type=float, help="Stop after this many seconds without a tx.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per transaction.")
@click.option(
    "--group",
    help="Resume after this consumer group's committed position (--from applies when it has "
    "none) and commit what was printed every 5 s and at exit.",
)
def consume(
    config_path: str,
    stream: str,
    node_id: int | None,
    start: str,
    since: str | None,
    count: int | None,
    idle_exit: float | None,
    as_json: bool,
    group: str | None,
) -> None:
    """Print a stream's verified transactions, following redirects and failing over."""
    from relay import Consumer, RelayError

    load_config(config_path)
    begin = _start_of(start, since)
    seen = 0
    try:
        with Consumer(
            stream, config=config_path, node=node_id, start=begin, group=group
        ) as consumer:
            while count is None or seen < count:
                batch = consumer.poll(
                    timeout_s=idle_exit, max_txs=None if count is None else count - seen
                )
                if not batch and idle_exit is not None:
                    break
                for tx in batch:
                    seen += 1
                    if as_json:
                        click.echo(
                            json.dumps(
                                {
                                    "stream": tx.stream,
                                    "seq": tx.seq,
                                    "origin": tx.origin,
                                    "timestamp_ms": tx.timestamp_ms,
                                    "digest": tx.digest.hex(),
                                    "key": None if tx.key is None else _text(tx.key),
                                    "headers": [[n, _text(v)] for n, v in tx.headers],
                                    "payload": _text(tx.payload),
                                }
                            )
                        )
                    else:
                        click.echo(f"{tx.seq} {tx.payload.decode('utf-8', 'backslashreplace')}")
    except RelayError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    except KeyboardInterrupt:
        pass


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not NAME:VALUE", param_hint="-H")
    return name, value


def _text(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def _start_of(start: str, since: str | None) -> str | int | datetime:
    """Where ``relay consume`` begins: ``--since`` wins over ``--from``."""
    if since is not None:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(since[-1:])
        if unit is None or not since[:-1].isdigit():
            raise click.BadParameter(
                "use a number and s, m, h or d, e.g. 10m", param_hint="--since"
            )
        return datetime.now(UTC) - timedelta(seconds=int(since[:-1]) * unit)
    if start in ("earliest", "latest"):
        return start
    if start.isdigit():
        return int(start)
    try:
        when = datetime.fromisoformat(start)
    except ValueError:
        raise click.BadParameter(
            "use earliest, latest, a seq or an ISO 8601 time", param_hint="--from"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
