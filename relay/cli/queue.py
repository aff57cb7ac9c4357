"""``relay queue``: work groups from the shell: work jobs, describe a group, peek at its next
ready jobs, list groups, set a group's settings, send dead jobs back."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from relay.cli.durations import duration_ms
from relay.cli.options import Target, cluster_target

if TYPE_CHECKING:
    from relay.client.worker import Job

STREAM = click.option("--stream", required=True, help="The job stream.")
GROUP = click.option("--group", required=True, help="The work group.")


@click.group("queue")
def queue_group() -> None:
    """Work groups: a stream's transactions claimed and settled as jobs."""


def _worker(target: Target, stream: str, group: str, node: int | None = None) -> Any:
    from relay import Worker

    target.addresses(node)
    return Worker(stream, group, **target.client_args, node=node)


@queue_group.command("work")
@cluster_target
@STREAM
@GROUP
@click.option("--count", default=1, show_default=True, type=click.IntRange(1, 1000))
@click.option("--lease", default="30s", show_default=True, help="How long the jobs are leased.")
@click.option("--wait", default="0", show_default=True, help="How long to wait for a ready job.")
@click.option("--nak-delay", help="Nak each job (ready again after this) instead of acking it.")
@click.option("--no-settle", is_flag=True, help="Leave the leases to run out (a worker that dies).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
@click.option("--node", "node_id", type=int, help="The node to ask first.")
def queue_work(
    target: Target,
    stream: str,
    group: str,
    count: int,
    lease: str,
    wait: str,
    nak_delay: str | None,
    no_settle: bool,
    as_json: bool,
    node_id: int | None,
) -> None:
    """Claim up to --count ready jobs, print each, then ack it (or nak it, or leave it)."""
    from relay import RelayError

    lease_ms, wait_ms = duration_ms(lease, "--lease"), duration_ms(wait, "--wait")
    delay = duration_ms(nak_delay, "--nak-delay") if nak_delay is not None else None
    try:
        with _worker(target, stream, group, node_id) as worker:
            jobs = worker.claim(count, wait_ms, lease_ms)
            for job in jobs:
                click.echo(_job_line(job, as_json))
            if not jobs:
                when = worker.next_ready_ms
                later = f"; the next job is ready at {when} (unix ms)" if when else ""
                click.echo(f"nothing to work on{later}", err=True)
            elif delay is not None:
                worker.nak(jobs, delay)
            elif not no_settle:
                worker.ack(jobs)
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None


def _job_line(job: Job, as_json: bool) -> str:
    if not as_json:
        return job.payload.decode(errors="replace")
    return json.dumps(
        {
            "seq": job.seq,
            "priority": job.priority,
            "not_before": job.not_before,
            "key": job.key.decode(errors="replace") if job.key is not None else None,
            "delivery_count": job.delivery,
            "payload": job.payload.decode(errors="replace"),
        }
    )


@queue_group.command("describe")
@cluster_target
@STREAM
@GROUP
@click.option("--json", "as_json", is_flag=True)
@click.option("--node", "node_id", type=int, help="The node to ask first.")
def queue_describe(
    target: Target, stream: str, group: str, as_json: bool, node_id: int | None
) -> None:
    """The group's jobs: ready, delayed, claimed, dead, the oldest ready one's age, per
    priority."""
    import time

    from relay import RelayError

    try:
        with _worker(target, stream, group, node_id) as worker:
            info = worker.info()
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    oldest = info.get("oldest_ready_ms") or 0
    info["oldest_ready_age_s"] = round(time.time() - oldest / 1000, 3) if oldest else 0
    if as_json:
        click.echo(json.dumps(info, sort_keys=True))
        return
    if not info:
        raise click.ClickException(f"no node has seen work group {group!r} on {stream!r}")
    for name in ("ready", "delayed", "claimed", "acked", "dead", "replaced", "expired"):
        click.echo(f"{name}\t{info.get(name)}")
    click.echo(f"oldest_ready_age_s\t{info['oldest_ready_age_s']}")
    for priority, (ready, delayed) in sorted(
        info.get("per_priority", {}).items(), key=lambda p: int(p[0])
    ):
        click.echo(f"priority {priority}\tready {ready}\tdelayed {delayed}")


@queue_group.command("peek")
@cluster_target
@STREAM
@GROUP
@click.option("--count", default=10, show_default=True, type=click.IntRange(1, 100))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per job.")
@click.option("--node", "node_id", type=int, help="The node to ask.")
def queue_peek(
    target: Target, stream: str, group: str, count: int, as_json: bool, node_id: int | None
) -> None:
    """The next --count ready jobs in claim order, without claiming them."""
    from relay import RelayError

    try:
        with _worker(target, stream, group, node_id) as worker:
            jobs = worker.peek(count)
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    if not jobs:
        click.echo("no ready job", err=True)
    for job in jobs:
        payload = job.payload.decode(errors="replace") if job.payload is not None else None
        if not as_json:
            key = job.key.decode(errors="replace") if job.key is not None else "-"
            click.echo(f"{job.seq}\t{job.priority}\t{key}\t{payload}")
            continue
        line = {
            "seq": job.seq,
            "priority": job.priority,
            "not_before": job.not_before,
            "key": job.key.decode(errors="replace") if job.key is not None else None,
            "payload": payload,
        }
        click.echo(json.dumps(line))


@queue_group.command("ls")
@cluster_target
def queue_ls(target: Target) -> None:
    """Every work group the nodes that answer hold, with its stream."""
    from relay.queue.ops import parse_queue_stream

    names: set[str] = set()
    for status in target.statuses().values():
        names |= {s.name for s in status.streams} if status else set()
    for stream, group in sorted(found for name in names if (found := parse_queue_stream(name))):
        click.echo(f"{group}\t{stream}")


@queue_group.command("configure")
@cluster_target
@STREAM
@GROUP
@click.option("--lease", help="The lease a claim gets by default (30s).")
@click.option("--max-deliveries", type=click.IntRange(1, 1000), help="Then the job dies (5).")
@click.option(
    "--coalesce/--no-coalesce", default=None, help="A new job for a waiting resource replaces it."
)
@click.option("--exclusive/--no-exclusive", default=None, help="One claimed job per resource.")
@click.option(
    "--start", type=click.Choice(["earliest", "latest"]), help="Where a new group starts."
)
def queue_configure(
    target: Target,
    stream: str,
    group: str,
    lease: str | None,
    max_deliveries: int | None,
    coalesce: bool | None,
    exclusive: bool | None,
    start: str | None,
) -> None:
    """Set the group's settings (those not given take their defaults)."""
    from relay import RelayError

    lease_ms = duration_ms(lease, "--lease") if lease is not None else None
    try:
        with _worker(target, stream, group) as worker:
            info = worker.configure(lease_ms, max_deliveries, coalesce, exclusive, start)
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        json.dumps({k: info[k] for k in ("lease_ms", "max_deliveries", "coalesce", "exclusive")})
    )


@queue_group.command("retry-dead")
@cluster_target
@STREAM
@GROUP
def queue_retry_dead(target: Target, stream: str, group: str) -> None:
    """Publish the group's dead jobs (from <stream>.dead) to the stream again, as new jobs;
    the position is kept as the consumer group retry.<group> of the dead-letter stream."""
    from relay import Consumer, Producer, RelayError

    sent = 0
    dead_stream = f"{stream}.dead"
    try:
        with (
            Consumer(
                dead_stream, **target.client_args, group=f"retry.{group}", commit_interval_ms=0
            ) as dead,
            Producer(**target.client_args) as producer,
        ):
            while True:
                letters = dead.poll(timeout_s=1.0)
                if not letters:
                    break
                for tx in letters:
                    headers = dict(tx.headers)
                    if headers.get("relay-dead-group") != group.encode():
                        continue
                    kept = [(n, v) for n, v in tx.headers if not n.startswith("relay-dead-")]
                    producer.send(stream, tx.payload, key=tx.key, headers=kept)
                    sent += 1
                producer.flush()
                dead.commit()
    except RelayError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{sent} dead jobs published to {stream} again", err=sys.stderr.isatty())
