"""``relay cluster``: init, up, down and status of every node of a config file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from relay.cli.options import CONFIG, client_identity, load_config


@click.group()
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
@click.option(
    "--keys/--no-keys",
    default=True,
    show_default=True,
    help='Make CURVE keys (in keys/<name> beside the file) or write security = "none".',
)
def cluster_init(count: int, host: str, base_port: int, output: str | None, keys: bool) -> None:
    """Write a cluster config: 3 nodes replicate everything; 5 or more partition the
    streams into two groups (orders.* and payments.*, each on three nodes) and the rest
    everywhere, so redirects can be seen. Every node, the clients and the operator get a
    CURVE key pair; only public keys go into the file."""
    from relay.auth.keys import KeyFileError, write_cluster
    from relay.runtime.templates import cluster_toml

    name = f"local{count}"
    keys_dir = f"keys/{name}"
    made = None
    if keys:
        folder = Path(output).parent if output else Path.cwd()
        try:
            made = write_cluster(folder / keys_dir, list(range(1, count + 1)))
        except (KeyFileError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"keys in {folder / keys_dir} (secret keys: owner-only files)", err=True)
    text = cluster_toml(count, host, base_port, name, made, keys_dir)
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

    config = load_config(config_path)
    failed = []
    for proc in launcher.processes(config):
        pid = proc.pid()
        if pid is not None:
            click.echo(f"node {proc.spec.id} already running (pid {pid})")
            continue
        pid = launcher.start_node(config, proc)
        click.echo(f"node {proc.spec.id} started (pid {pid}, log {proc.log_file})")
    pair = client_identity(config_path)
    for proc in launcher.processes(config):
        pid = proc.pid()
        if pid is None or not launcher.wait_until_answering(proc.spec, pid, timeout_s, pair):
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

    config = load_config(config_path)
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

    config = load_config(config_path)
    pair = client_identity(config_path)
    statuses = {spec.id: launcher.query_status(spec, pair=pair) for spec in config.nodes}
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
        if status.storage:
            click.echo(f"{node_id:<5} storage: {status.storage} (acknowledging nothing)", err=True)
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
