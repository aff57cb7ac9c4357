"""The ``relay`` command line."""

from __future__ import annotations

import json
import logging
import sys

import click

from relay.cli.batches import batch_group
from relay.cli.cluster import cluster
from relay.cli.consume import consume
from relay.cli.groups import groups_group
from relay.cli.keys import keys_group
from relay.cli.log import log_group
from relay.cli.options import CONFIG, Target, cluster_target, load_config
from relay.cli.publish import publish
from relay.cli.queue import queue_group
from relay.cli.streams import stream_group
from relay.config import ConfigError


@click.group()
def main() -> None:
    """relay: a quorum-replicated relay cluster."""


main.add_command(cluster)
main.add_command(publish)
main.add_command(consume)
main.add_command(log_group)
main.add_command(groups_group)
main.add_command(batch_group)
main.add_command(keys_group)
main.add_command(stream_group)
main.add_command(queue_group)


# --- node and cluster ----------------------------------------------------------------------


@main.command()
@CONFIG
@click.option("--id", "node_id", required=True, type=int, help="Which [[node]] of the file.")
@click.option("--clock-offset-ms", default=0, type=int, help="Skew this node's clock (testing).")
@click.option("--admin-port", type=int, help="Enable fault injection on this port (testing).")
@click.option("--admin-host", default="127.0.0.1", show_default=True, help="Where it listens.")
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING"]))
@click.option(
    "--trace",
    type=click.Path(dir_okay=False),
    help="Record the loop's turns (timings, inputs, effects); written here at exit.",
)
@click.option(
    "--recover",
    is_flag=True,
    help="This node's disk was replaced or lost: in each stream it votes no further than "
    "its peers verified and counts in no cut until the stream has caught up from them. Pass "
    "it on every start until no stream is recovering.",
)
def node(
    config_path: str,
    node_id: int,
    clock_offset_ms: int,
    admin_port: int | None,
    admin_host: str,
    log_level: str,
    trace: str | None,
    recover: bool,
) -> None:
    """Run one node in the foreground until SIGTERM or Ctrl-C."""
    from pathlib import Path

    from relay.runtime.node import NodeRuntime, StartupError
    from relay.runtime.turn_trace import TurnTrace

    logging.basicConfig(
        level=log_level, format=f"%(asctime)s node{node_id} %(levelname)s %(message)s"
    )
    config = load_config(config_path)
    try:
        runtime = NodeRuntime(
            config,
            node_id,
            clock_offset_ms=clock_offset_ms,
            admin_port=admin_port,
            admin_host=admin_host,
            trace=TurnTrace(Path(trace)) if trace else None,
            recover=recover,
        )
    except (StartupError, ConfigError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    runtime.run()


# --- tools ---------------------------------------------------------------------------------


@main.command()
@click.option(
    "--admin", "address", required=True, help="host:port (or KEY@host:port) of an --admin-port."
)
@click.option("--config", "config_path", help="The cluster file: the node's key and keys_dir.")
@click.option("--node", "node_id", type=int, help="The node's id in --config (for its key).")
@click.option(
    "--admin-key",
    type=click.Path(dir_okay=False),
    help="An admitted admin .key_secret (default: admin.key_secret in the config's keys_dir).",
)
@click.option("--loss-in", type=float, help="Fraction of incoming mesh frames to drop.")
@click.option("--loss-out", type=float, help="Fraction of outgoing mesh frames to drop.")
@click.option("--block-from", help="Comma-separated node ids whose frames to drop (a cut).")
@click.option("--delay-ms", type=int, help="Hold every incoming mesh frame this long.")
@click.option("--clock-offset-ms", type=int, help="Shift the node's clock by this much.")
@click.option("--clear", is_flag=True, help="Remove every fault (the clock offset stays).")
@click.option(
    "--tamper",
    metavar="STREAM[:SEQ]",
    help="Corrupt the payload the node holds at SEQ (default: its last verified tx), keeping "
    "the digest, to check that readers notice.",
)
def fault(
    address: str,
    config_path: str | None,
    node_id: int | None,
    admin_key: str | None,
    loss_in: float | None,
    loss_out: float | None,
    block_from: str | None,
    delay_ms: int | None,
    clock_offset_ms: int | None,
    clear: bool,
    tamper: str | None,
) -> None:
    """Inject faults into a node started with --admin-port; prints its fault status."""
    from relay.runtime.admin import admin_target

    try:
        address, call = admin_target(address, config_path, node_id, admin_key)
    except (ValueError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None

    settings: dict[str, object] = {}
    for key, value in (
        ("loss_in", loss_in),
        ("loss_out", loss_out),
        ("delay_ms", delay_ms),
        ("clock_offset_ms", clock_offset_ms),
    ):
        if value is not None:
            settings[key] = value
    if block_from is not None:
        settings["block_from"] = [int(n) for n in block_from.split(",") if n.strip()]
    try:
        if clear:
            call("clear", None)
        if tamper is not None:
            stream, _, seq = tamper.partition(":")
            if seq and not seq.isdigit():
                raise click.BadParameter(
                    f"{tamper!r} is not STREAM or STREAM:SEQ", param_hint="--tamper"
                )
            done = call("tamper", {"stream": stream, "seq": int(seq or 0)})
            if not done["ok"]:
                raise click.ClickException(done["error"])
        reply = call("set", settings) if settings else call("status", None)
    except TimeoutError as exc:
        raise click.ClickException(str(exc)) from None
    if not reply["ok"]:
        raise click.ClickException(reply["error"])
    click.echo(json.dumps(reply["faults"]))


@main.command()
@click.option("--seed", type=int, help="Replay one seed.")
@click.option("--seeds", type=int, default=0, help="Run this many seeds from --first.")
@click.option("--first", type=int, default=0, show_default=True)
@click.option("--nodes", type=click.Choice(["3", "5", "both"]), default="both", show_default=True)
@click.option(
    "--delivery/--no-delivery",
    default=None,
    help="Every seed runs a fan-out batch and a consumer group, or none (else half of them do).",
)
@click.option(
    "--work/--no-work",
    default=None,
    help="Every seed runs a work group, or none (else 30% of them draw one).",
)
@click.option(
    "--compacted/--no-compacted",
    default=None,
    help="Every seed has a compacted stream, or none (else 30% of them draw one).",
)
@click.option(
    "--third-lose-power/--no-third-lose-power",
    default=True,
    show_default=True,
    help="A third of all runs lose power on every node at once; --no-third-lose-power draws "
    "a seed as before 2026-11-30 (a third of the fsync=always runs), to replay one found then.",
)
@click.option(
    "--partitions",
    is_flag=True,
    help="Every run's faults cut nodes off: crashes, isolations, pauses and stops, and up to "
    "twelve one-way cuts beside them (no power loss, no disk errors).",
)
def sim(
    seed: int | None,
    seeds: int,
    first: int,
    nodes: str,
    delivery: bool | None,
    work: bool | None,
    compacted: bool | None,
    third_lose_power: bool,
    partitions: bool,
) -> None:
    """Run the deterministic simulator: one seed, or a campaign of many."""
    from relay.sim.campaign import CampaignSummary, run_campaign

    sizes = (3, 5) if nodes == "both" else (int(nodes),)
    chosen = range(seed, seed + 1) if seed is not None else range(first, first + (seeds or 100))
    if seed is None:  # what simulated nodes log (torn tails cut, refused writes) is for replays
        logging.getLogger("relay").setLevel(logging.CRITICAL)
    total = len(chosen) * len(sizes)
    tty = sys.stderr.isatty()
    shown = [0.0]

    def progress(summary: CampaignSummary) -> None:
        """On a terminal, one line kept current; elsewhere, a line every 10 s."""
        if tty:
            click.echo(f"\r{summary.runs}/{total}: {summary.line()}", nl=False, err=True)
        elif summary.seconds - shown[0] >= 10:
            shown[0] = summary.seconds
            click.echo(f"{summary.runs}/{total}: {summary.line()}", err=True)

    summary = run_campaign(
        chosen,
        sizes,
        echo=click.echo,
        progress=progress,
        delivery=delivery,
        work=work,
        compacted=compacted,
        third_lose_power=third_lose_power,
        partitions=partitions,
    )
    if tty:
        click.echo(err=True)
    click.echo(summary.line())
    if summary.failures:
        sys.exit(1)


@main.command(context_settings={"ignore_unknown_options": False})
@cluster_target
@click.option("--stream", default="bench", show_default=True)
@click.option("--count", default=100_000, show_default=True, help="Transactions to publish.")
@click.option("--size", default=100, show_default=True, help="Payload bytes.")
@click.option(
    "--window", type=click.IntRange(min=1), help="Requests in flight (default: the Producer's)."
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    help="Messages per request (default: the Producer's).",
)
@click.option("--rate", type=float, help="Target tx/s (open loop); default: as fast as acked.")
@click.option("--node", "node_id", type=int, help="The node to publish to.")
@click.option(
    "--producers",
    default=1,
    type=click.IntRange(1, 64),
    show_default=True,
    help="Producer processes; each sends its share of --count (and of --rate).",
)
@click.option(
    "--consumers",
    default=0,
    type=click.IntRange(0, 64),
    show_default=True,
    help="Consumer processes that read every message: end-to-end latency.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def bench(
    target: Target,
    stream: str,
    count: int,
    size: int,
    window: int | None,
    batch: int | None,
    rate: float | None,
    node_id: int | None,
    producers: int,
    consumers: int,
    as_json: bool,
) -> None:
    """Load generator: publish COUNT transactions and report throughput and latency (with
    --rate, from each message's due time: no coordinated omission)."""
    from relay.bench import BenchError, BenchSettings, run_bench
    from relay.client.producer import BATCH_MAX, WINDOW

    settings = BenchSettings(
        target.config,
        target.servers,
        stream,
        count,
        size,
        WINDOW if window is None else window,
        BATCH_MAX if batch is None else batch,
        rate,
        node_id,
        producers,
        consumers,
    )
    try:
        report = run_bench(settings, progress=not as_json)
    except BenchError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.text())
