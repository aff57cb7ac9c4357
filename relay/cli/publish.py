"""``relay publish``: messages from arguments, a file, or standard input as it arrives.

How this works: standard input is read from its descriptor as bytes arrive (not to its end),
each complete line is sent at once, and acks are printed in send order as they come back, so
``tail -f app.log | relay publish --stream logs`` publishes each line as it is written. The
producer keeps its usual window of requests in flight, so a fast input is still batched.
"""

from __future__ import annotations

import os
import select
import sys
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from relay.cli.options import Target, cluster_target

if TYPE_CHECKING:
    from relay.client.futures import PublishFuture
    from relay.client.producer import Producer

READ_BYTES = 1 << 16
POLL_S = 0.005  # how often acks are taken in while standard input is quiet
LINE_BYTES_MAX = 16 << 20  # a longer line or --file is an error (payload_bytes_max is at most this)


@click.command()
@cluster_target
@click.option("--stream", required=True)
@click.option("--node", "node_id", type=int, help="The node to publish to first.")
@click.option("--timeout", "timeout_s", default=30.0, show_default=True)
@click.option("--key", help="The key of every message (UTF-8).")
@click.option(
    "-H", "--header", "headers", multiple=True, help="A header NAME:VALUE; repeat for more."
)
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False, exists=True),
    help="Publish this file's bytes as one message.",
)
@click.argument("messages", nargs=-1)
@click.option(
    "--priority",
    type=click.IntRange(0, 255),
    help="A job's priority for work groups (0 first; 128 when absent).",
)
@click.option(
    "--at",
    "not_before",
    help="A job's not-before time for work groups: +DURATION (+10m, +30s, +500ms), an "
    "ISO-8601 time, or unix ms.",
)
@click.option(
    "--journal",
    type=click.Path(file_okay=False),
    help="A directory that keeps each message until it is acknowledged; publishing again "
    "with it first resends what a crash left unacknowledged.",
)
def publish(
    target: Target,
    stream: str,
    node_id: int | None,
    timeout_s: float,
    key: str | None,
    headers: tuple[str, ...],
    path: str | None,
    journal: str | None,
    messages: tuple[str, ...],
    priority: int | None,
    not_before: str | None,
) -> None:
    """Publish MESSAGES, a --file, or one message per line of standard input as each line
    arrives; print each seq and digest."""
    from relay import Producer, RelayError
    from relay.cli.durations import point_in_time
    from relay.client.journal import JournalError
    from relay.queue.jobs import job_headers

    pairs: list[tuple[str, str | bytes]] = [_header(h) for h in headers]
    at_ms = point_in_time(not_before, "--at") if not_before is not None else None
    pairs += job_headers(priority, at_ms)
    if path is not None and messages:
        raise click.UsageError("give MESSAGES or --file, not both")
    pending: deque[tuple[bytes, PublishFuture]] = deque()
    if path is not None:
        if Path(path).stat().st_size > LINE_BYTES_MAX:
            raise click.BadParameter(
                f"{path} is over {LINE_BYTES_MAX} bytes, more than a message may hold",
                param_hint="--file",
            )
        payloads: Iterator[bytes | None] = iter([Path(path).read_bytes()])
    elif messages:
        payloads = (m.encode() for m in messages)
    else:
        payloads = _lines(sys.stdin.buffer, lambda: bool(pending))
    sent = failed = 0
    target.addresses(node_id)  # a --node the target does not have is a usage error
    try:
        with Producer(
            **target.client_args, node=node_id, timeout_s=timeout_s, journal=journal
        ) as producer:
            if producer.recovered:
                click.echo(
                    f"resending {len(producer.recovered)} messages from the journal", err=True
                )
            sent += len(producer.recovered)
            for payload in payloads:
                if payload is not None:
                    future = producer.send(stream, payload, key=key, headers=pairs)
                    pending.append((payload, future))
                    sent += 1
                failed += _answered(producer, pending, wait_ms=0)
            producer.flush()
            failed += _answered(producer, pending, wait_ms=0)
            failed += sum(future.failed() for future in producer.recovered)
    except (RelayError, JournalError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if failed:
        raise click.ClickException(f"{failed} of {sent} messages were not acknowledged")


def _answered(producer: Producer, pending: deque[tuple[bytes, PublishFuture]], wait_ms: int) -> int:
    """Print the acks at the front of ``pending`` that are in; how many failed."""
    from relay import RelayError

    producer.poll(wait_ms)
    failed = 0
    while pending and pending[0][1].done():
        payload, future = pending.popleft()
        try:
            ack = future.result()
        except RelayError as exc:
            failed += 1
            click.echo(f"error {exc.code}: {exc.message} ({payload[:40]!r})", err=True)
            continue
        click.echo(f"{ack.seq} {ack.digest.hex()[:16]}")
    return failed


def _lines(stream: object, waiting: Callable[[], bool]) -> Iterator[bytes | None]:
    """Lines of standard input without their newline, each as soon as it is complete, and
    None every ``POLL_S`` while ``waiting()`` says acks are due, so they are taken in and
    printed while the input is quiet. Input with no descriptor (a test's buffer) is read
    whole."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        data: bytes = stream.read()  # type: ignore[attr-defined]
        lines = data.split(b"\n")
        yield from lines[:-1] if not lines[-1] else lines
        return
    held: list[bytes] = []  # the line so far, in the chunks it came in
    size = 0
    while True:
        readable, _, _ = select.select([fd], [], [], POLL_S if waiting() else None)
        if not readable:
            yield None
            continue
        chunk = os.read(fd, READ_BYTES)
        if not chunk:
            break
        if b"\n" not in chunk:  # only a line's end is worth a split: a long line is not
            held.append(chunk)  # re-split for every chunk that adds to it
            size += len(chunk)
            if size > LINE_BYTES_MAX:
                raise click.ClickException(
                    f"a line of standard input is over {LINE_BYTES_MAX} bytes"
                )
            continue
        first, *complete = chunk.split(b"\n")
        yield b"".join([*held, first])
        *complete, last = complete
        yield from complete
        held, size = [last], len(last)
    if size:
        yield b"".join(held)


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name:
        raise click.BadParameter(f"{text!r} is not NAME:VALUE", param_hint="-H")
    return name, value
