"""``relay consume``: print a stream's verified transactions (kcat -C, nats sub)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import click

from relay.cli.formats import FormatError, formatter
from relay.cli.options import Target, cluster_target

if TYPE_CHECKING:
    from relay.client.consumer import Start

SKEW_MS = 1000  # how far a node's clock may trail this one's, for --to in the past
FORMAT_HELP = (
    "raw (the payload's bytes, nothing added), json, base64, or a template as kcat's -f: "
    "%s seq, %v value, %k key, %h headers, %t stream, %T timestamp ms, %o origin, %d digest, "
    "%S size, %% a percent; \\n and \\t escapes.  [default: '%s %v\\n']"
)


@click.command()
@cluster_target
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
@click.option(
    "--from-index",
    type=click.IntRange(min=0),
    help="Start at the entry of this dense index (0: the stream's first, as a Kafka offset).",
)
@click.option(
    "--last", type=click.IntRange(min=1), help="Start at the last N verified txs (one request)."
)
@click.option("--to", "end", help="Stop after this seq or time (ISO 8601): kcat -o e@.")
@click.option("--count", type=int, help="Stop after this many transactions.")
@click.option("-e", "--exit-at-end", is_flag=True, help="Stop at the verified head (like kcat -e).")
@click.option("--idle-exit", type=float, help="Stop after this many seconds without a tx.")
@click.option("--format", "fmt", help=FORMAT_HELP)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option(
    "--seq-numbers",
    is_flag=True,
    help="In JSON, write seqs as numbers even above 2^53 (JavaScript and jq round those).",
)
@click.option(
    "--group",
    help="Resume after this consumer group's committed position (--from applies when it has "
    "none) and commit what was printed every 5 s and at exit.",
)
@click.option(
    "--compacted-view",
    is_flag=True,
    help="Print the stream as a table: the newest transaction of each live key (a tombstone "
    "deletes its key) from the earliest up to the verified head, in seq order, and stop.",
)
def consume(
    target: Target,
    stream: str,
    node_id: int | None,
    start: str,
    since: str | None,
    from_index: int | None,
    last: int | None,
    end: str | None,
    count: int | None,
    exit_at_end: bool,
    idle_exit: float | None,
    fmt: str | None,
    as_json: bool,
    seq_numbers: bool,
    group: str | None,
    compacted_view: bool,
) -> None:
    """Print a stream's verified transactions, following redirects and failing over."""
    from relay import Consumer, RelayError
    from relay.client.table import newest_by_key

    try:
        write = formatter("json" if as_json else fmt or "%s %v\\n", seq_numbers)
    except FormatError as exc:
        raise click.BadParameter(str(exc), param_hint="--format") from None
    stop_after = None if end is None else parse_point(end, "--to")
    out = sys.stdout.buffer
    stops = exit_at_end or stop_after is not None or idle_exit is not None
    seen = 0
    target.addresses(node_id)  # a --node the target does not have is a usage error
    try:
        if compacted_view:
            with Consumer(stream, **target.client_args, node=node_id, start="earliest") as c:
                for tx in newest_by_key(c):
                    out.write(write(tx))
            out.flush()
            return
        begin = _start_of(start, since, last, from_index)
        with Consumer(stream, **target.client_args, node=node_id, start=begin, group=group) as c:
            quiet_since = time.monotonic()
            while count is None or seen < count:
                limit = None if count is None else count - seen
                batch = c.poll(timeout_s=0.5 if stops else None, max_txs=limit)
                for tx in batch:
                    if stop_after is not None and _past(tx.seq, stop_after):
                        return
                    seen += 1
                    out.write(write(tx))
                    c.processed(tx)  # printed: a group commits through it, however we stop
                out.flush()
                if batch:
                    quiet_since = time.monotonic()
                at_end = c.at_end()
                if at_end and exit_at_end:
                    return
                if at_end and stop_after is not None and _done_with(c.position, stop_after):
                    return  # everything up to --to is verified and printed
                if idle_exit is not None and time.monotonic() - quiet_since >= idle_exit:
                    return
    except (RelayError, TimeoutError, ValueError) as exc:
        code = getattr(exc, "code", "timeout")
        raise click.ClickException(f"{code}: {getattr(exc, 'message', exc)}") from None
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # | head: the reader has what it wanted
        sys.stderr.close()


def _done_with(position: int, point: int | datetime) -> bool:
    """At the verified head: is nothing more to come up to ``--to``? Either the head is at or
    past it, or it lies in the past (new txs are stamped now; a second of skew allowed)."""
    from relay.core.flake import seq_unix_ms

    ms = int(point.timestamp() * 1000) if isinstance(point, datetime) else seq_unix_ms(point)
    return position == point or _past(position, point) or ms < time.time() * 1000 - SKEW_MS


def _past(seq: int, point: int | datetime) -> bool:
    """Is ``seq`` after ``--to``'s seq or time?"""
    from relay.core.flake import seq_unix_ms

    if isinstance(point, datetime):
        return seq_unix_ms(seq) > int(point.timestamp() * 1000)
    return seq > point


def _start_of(start: str, since: str | None, last: int | None, from_index: int | None) -> Start:
    """Where reading begins: ``--last`` wins over ``--from-index``, then ``--since``, then
    ``--from``."""
    from relay.client.consumer import Index

    if last is not None:
        return Index(-last)
    if from_index is not None:
        return Index(from_index)
    if since is not None:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(since[-1:])
        if unit is None or not since[:-1].isdigit():
            raise click.BadParameter(
                "use a number and s, m, h or d, e.g. 10m", param_hint="--since"
            )
        seconds = int(since[:-1]) * unit
        if seconds > 100 * 365 * 86400:
            raise click.BadParameter("at most 100 years back", param_hint="--since")
        return datetime.now(UTC) - timedelta(seconds=seconds)
    if start in ("earliest", "latest"):
        return start
    return parse_point(start, "--from")


def parse_point(text: str, option: str) -> int | datetime:
    """A seq or an ISO 8601 time (UTC unless it says otherwise)."""
    from relay.core.flake import SEQ_MAX

    if text.isdigit():
        if int(text) > SEQ_MAX:
            raise click.BadParameter(f"a seq is at most {SEQ_MAX}", param_hint=option)
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        allowed = "earliest, latest, " if option == "--from" else ""
        raise click.BadParameter(
            f"use {allowed}a seq or an ISO 8601 time", param_hint=option
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)
