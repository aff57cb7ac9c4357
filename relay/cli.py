"""The ``relay`` command line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from relay.config import ConfigError, load

CONFIG = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The cluster config file (TOML).",
)


def _load(path: str) -> Any:
    try:
        return load(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def main() -> None:
    """relay: a quorum-replicated relay cluster."""


# --- node and cluster ----------------------------------------------------------------------


@main.command()
@CONFIG
@click.option("--id", "node_id", required=True, type=int, help="Which [[node]] of the file.")
@click.option("--clock-offset-ms", default=0, type=int, help="Skew this node's clock (testing).")
@click.option("--admin-port", type=int, help="Enable fault injection on this port (testing).")
@click.option("--log-level", default="INFO", type=click.Choice(["DEBUG", "INFO", "WARNING"]))
def node(
    config_path: str, node_id: int, clock_offset_ms: int, admin_port: int | None, log_level: str
) -> None:
    """Run one node in the foreground until SIGTERM or Ctrl-C."""
    from relay.runtime.node import NodeRuntime, StartupError

    logging.basicConfig(
        level=log_level, format=f"%(asctime)s node{node_id} %(levelname)s %(message)s"
    )
    config = _load(config_path)
    try:
        runtime = NodeRuntime(
            config, node_id, clock_offset_ms=clock_offset_ms, admin_port=admin_port
        )
    except (StartupError, ConfigError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    runtime.run()


@main.group()
def cluster() -> None:
    """Manage every node of a config file on this machine."""


@cluster.command("init")
@click.option("--nodes", "count", default=3, type=click.IntRange(3, 99), show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--base-port",
    default=7100,
    type=int,
    show_default=True,
    help="Node i gets mesh port base+i, client base+100+i, metrics base+200+i.",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write here, not stdout.")
def cluster_init(count: int, host: str, base_port: int, output: str | None) -> None:
    """Write a cluster config: 3 nodes replicate everything; 5 or more partition the
    streams into two groups (orders.* and payments.*, each on three nodes) and the rest
    everywhere, so redirects can be seen."""
    from relay.runtime.templates import cluster_toml

    text = cluster_toml(count, host, base_port)
    if output:
        Path(output).write_text(text)
        click.echo(f"wrote {output}")
    else:
        click.echo(text, nl=False)


@cluster.command("up")
@CONFIG
@click.option(
    "--timeout",
    "timeout_s",
    default=20.0,
    show_default=True,
    help="Seconds to wait for every node to answer.",
)
def cluster_up(config_path: str, timeout_s: float) -> None:
    """Start every node of the file in the background."""
    from relay.runtime import launcher

    config = _load(config_path)
    failed = []
    for proc in launcher.processes(config):
        pid = proc.pid()
        if pid is not None:
            click.echo(f"node {proc.spec.id} already running (pid {pid})")
            continue
        pid = launcher.start_node(config, proc)
        click.echo(f"node {proc.spec.id} started (pid {pid}, log {proc.log_file})")
    for proc in launcher.processes(config):
        pid = proc.pid()
        if pid is None or not launcher.wait_until_answering(proc.spec, pid, timeout_s):
            failed.append(proc)
    if failed:
        for proc in failed:
            tail = (
                proc.log_file.read_text().strip().splitlines()[-5:]
                if proc.log_file.exists()
                else []
            )
            click.echo(f"node {proc.spec.id} did not come up; its log ends:", err=True)
            for line in tail:
                click.echo(f"  {line}", err=True)
        raise click.ClickException(
            f"{len(failed)} node(s) failed to start; see above, then run `relay cluster down`"
        )
    click.echo(f"cluster {config.name!r} is up: {len(config.nodes)} nodes")


@cluster.command("down")
@CONFIG
def cluster_down(config_path: str) -> None:
    """Stop every node of the file (SIGTERM, then SIGKILL after 5 s)."""
    from relay.runtime import launcher

    config = _load(config_path)
    for proc in launcher.processes(config):
        if launcher.stop_node(proc):
            click.echo(f"node {proc.spec.id} stopped")
        else:
            click.echo(f"node {proc.spec.id} was not running")


@cluster.command("status")
@CONFIG
@click.option("--json", "as_json", is_flag=True, help="Print the raw status of every node.")
def cluster_status(config_path: str, as_json: bool) -> None:
    """Show each node's health: state, streams, last verified seq, digest, lag."""
    from relay.runtime import launcher

    config = _load(config_path)
    statuses = {spec.id: launcher.query_status(spec) for spec in config.nodes}
    if as_json:
        raw = {str(k): v.to_wire() if v else None for k, v in statuses.items()}
        click.echo(json.dumps(raw, indent=2))
        return
    click.echo(
        f"{'node':<5} {'state':<10} {'stream':<20} {'verified seq':>20} {'digest':<16} {'lag':>6}"
    )
    down = 0
    for node_id, status in statuses.items():
        if status is None:
            down += 1
            click.echo(f"{node_id:<5} {'down':<10} {'-':<20} {'-':>20} {'-':<16} {'-':>6}")
            continue
        if not status.streams:
            click.echo(f"{node_id:<5} {status.state:<10} {'-':<20} {'-':>20} {'-':<16} {'-':>6}")
        for s in status.streams:
            click.echo(
                f"{node_id:<5} {status.state:<10} {s.name:<20} "
                f"{s.verified_seq:>20} {s.digest[:16]:<16} {s.unverified_txs:>6}"
            )
    if down == len(statuses):
        sys.exit(1)


# --- clients -------------------------------------------------------------------------------


@main.command()
@CONFIG
@click.option("--stream", required=True)
@click.option("--node", "node_id", type=int, help="The node to publish to first.")
@click.option("--timeout", "timeout_s", default=30.0, show_default=True)
@click.argument("messages", nargs=-1)
def publish(
    config_path: str, stream: str, node_id: int | None, timeout_s: float, messages: tuple[str, ...]
) -> None:
    """Publish MESSAGES (or one per line of standard input); print each seq."""
    from relay import Producer, RelayError

    _load(config_path)
    lines = list(messages) if messages else [line.rstrip("\n") for line in sys.stdin]
    failed = 0
    with Producer(config=config_path, node=node_id, timeout_s=timeout_s) as producer:
        futures = [producer.send(stream, line.encode()) for line in lines]
        producer.flush()
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


@main.command()
@CONFIG
@click.option("--stream", required=True)
@click.option("--node", "node_id", type=int, help="The node to read from first.")
@click.option(
    "--from",
    "start",
    default="earliest",
    show_default=True,
    help="earliest, latest, or a seq to start at.",
)
@click.option("--count", type=int, help="Stop after this many transactions.")
@click.option("--idle-exit", type=float, help="Stop after this many seconds without a tx.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per transaction.")
def consume(
    config_path: str,
    stream: str,
    node_id: int | None,
    start: str,
    count: int | None,
    idle_exit: float | None,
    as_json: bool,
) -> None:
    """Print a stream's verified transactions, following redirects and failing over."""
    from relay import Consumer, RelayError

    _load(config_path)
    begin: str | int = start
    if start not in ("earliest", "latest"):
        if not start.isdigit():
            raise click.BadParameter("use earliest, latest or a seq", param_hint="--from")
        begin = int(start)
    seen = 0
    try:
        with Consumer(stream, config=config_path, node=node_id, start=begin) as consumer:
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
                                    "payload": tx.payload.decode("utf-8", "backslashreplace"),
                                }
                            )
                        )
                    else:
                        click.echo(f"{tx.seq} {tx.payload.decode('utf-8', 'backslashreplace')}")
    except RelayError as exc:
        raise click.ClickException(f"{exc.code}: {exc.message}") from None
    except KeyboardInterrupt:
        pass


# --- tools ---------------------------------------------------------------------------------


@main.command()
@click.option("--admin", "address", required=True, help="host:port of a node's --admin-port.")
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
    loss_in: float | None,
    loss_out: float | None,
    block_from: str | None,
    delay_ms: int | None,
    clock_offset_ms: int | None,
    clear: bool,
    tamper: str | None,
) -> None:
    """Inject faults into a node started with --admin-port; prints its fault status."""
    from relay.runtime.admin import admin_call

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
            admin_call(address, "clear")
        if tamper is not None:
            stream, _, seq = tamper.partition(":")
            if seq and not seq.isdigit():
                raise click.BadParameter(
                    f"{tamper!r} is not STREAM or STREAM:SEQ", param_hint="--tamper"
                )
            done = admin_call(address, "tamper", {"stream": stream, "seq": int(seq or 0)})
            if not done["ok"]:
                raise click.ClickException(done["error"])
        reply = admin_call(address, "set", settings) if settings else admin_call(address, "status")
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
def sim(seed: int | None, seeds: int, first: int, nodes: str) -> None:
    """Run the deterministic simulator: one seed, or a campaign of many."""
    from relay.sim.campaign import CampaignSummary, run_campaign

    sizes = (3, 5) if nodes == "both" else (int(nodes),)
    chosen = range(seed, seed + 1) if seed is not None else range(first, first + (seeds or 100))
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

    summary = run_campaign(chosen, sizes, echo=click.echo, progress=progress)
    if tty:
        click.echo(err=True)
    click.echo(summary.line())
    if summary.failures:
        sys.exit(1)


@main.command(context_settings={"ignore_unknown_options": False})
@CONFIG
@click.option("--stream", default="bench", show_default=True)
@click.option("--count", default=100_000, show_default=True, help="Transactions to publish.")
@click.option("--size", default=100, show_default=True, help="Payload bytes.")
@click.option("--window", default=16, show_default=True, help="Requests in flight.")
@click.option("--batch", default=256, show_default=True, help="Messages per request.")
@click.option("--rate", type=float, help="Target tx/s (open loop); default: as fast as acked.")
@click.option("--node", "node_id", type=int, help="The node to publish to.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def bench(
    config_path: str,
    stream: str,
    count: int,
    size: int,
    window: int,
    batch: int,
    rate: float | None,
    node_id: int | None,
    as_json: bool,
) -> None:
    """Load generator: publish COUNT transactions and report throughput and latency."""
    from relay.bench import BenchSettings, run_bench

    _load(config_path)
    settings = BenchSettings(config_path, stream, count, size, window, batch, rate, node_id)
    report = run_bench(settings, progress=not as_json)
    click.echo(json.dumps(report.as_dict(), indent=2) if as_json else report.text())
