"""``relay cluster``: init, up, down and status of every node of a config file."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from relay.cli.options import CONFIG_FILE, client_identity, load_config, target_of

if TYPE_CHECKING:
    from relay.client.directory import NodeAddress
    from relay.core.status import NodeStatus


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
    folder = Path(output).parent if output else Path.cwd()
    text = _config_text(count, host, base_port, folder, keys, None)
    if output:
        Path(output).write_text(text)
        click.echo(f"wrote {output}")
    else:
        click.echo(text, nl=False)


def _config_text(
    count: int, host: str, base_port: int, folder: Path, keys: bool, run_dir: str | None
) -> str:
    """A config for ``count`` nodes whose keys (if ``keys``) are written under ``folder``."""
    from relay.auth.keys import KeyFileError, write_cluster
    from relay.runtime.templates import cluster_toml

    name = f"local{count}"
    keys_dir = f"keys/{name}"
    made = None
    if keys:
        try:
            made = write_cluster(folder / keys_dir, list(range(1, count + 1)))
        except (KeyFileError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"keys in {folder / keys_dir} (secret keys: owner-only files)", err=True)
    return cluster_toml(count, host, base_port, name, made, keys_dir, run_dir)


def default_config(count: int) -> Path:
    """Where ``relay cluster up --nodes N`` keeps the config it writes: its run dir."""
    return Path(".relay") / f"local{count}" / "cluster.toml"


def _config_of(config_path: str | None, count: int | None, base_port: int | None = None) -> str:
    """``--config``, else the file of ``--nodes N`` (written first if ``base_port`` is given
    and it does not exist)."""
    if config_path is not None:
        return config_path
    if count is None:
        raise click.UsageError("give --config FILE or --nodes N")
    path = default_config(count)
    if base_port is not None and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_config_text(count, "127.0.0.1", base_port, path.parent, True, "."))
        click.echo(f"wrote {path}", err=True)
    elif not path.exists():
        raise click.ClickException(f"{path} does not exist: start it with --nodes {count}")
    return str(path)


NODES = click.option(
    "--nodes",
    "count",
    type=click.IntRange(3, 99),
    help="Instead of --config: the local cluster of N nodes that `relay cluster up --nodes N` "
    "writes to .relay/localN/cluster.toml.",
)


@cluster.command("up")
@CONFIG_FILE
@NODES
@click.option(
    "--timeout",
    "timeout_s",
    default=20.0,
    show_default=True,
    help="Seconds to wait for every node to answer.",
)
@click.option(
    "--base-port",
    type=click.IntRange(1024, 65000),
    help="With --nodes, for a new file: node i gets mesh port base+i, client base+100+i, "
    "metrics base+200+i.  [default: 7100, and 300 more per node past 3]",
)
def cluster_up(
    config_path: str | None, count: int | None, base_port: int | None, timeout_s: float
) -> None:
    """Start every node of the file (or of a new local cluster of --nodes N) in the
    background."""
    from relay.runtime import launcher

    if count is not None and base_port is None:
        base_port = 7100 + 300 * (count - 3)  # 3 and 5 nodes can run side by side
    config_path = _config_of(config_path, count, base_port)
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
    click.echo(f"cluster {config.name!r} is up: {len(config.nodes)} nodes (config {config_path})")


@cluster.command("down")
@CONFIG_FILE
@NODES
def cluster_down(config_path: str | None, count: int | None) -> None:
    """Stop every node of the file (SIGTERM, then SIGKILL after 5 s)."""
    from relay.runtime import launcher

    config = load_config(_config_of(config_path, count))
    for proc in launcher.processes(config):
        if launcher.stop_node(proc):
            click.echo(f"node {proc.spec.id} stopped")
        else:
            click.echo(f"node {proc.spec.id} was not running")


@cluster.command("status")
@CONFIG_FILE
@NODES
@click.option("--servers", envvar="RELAY_SERVERS", help="Node client addresses (see consume).")
@click.option(
    "--client-key",
    envvar="RELAY_CLIENT_KEY",
    type=click.Path(dir_okay=False),
    help="This client's .key_secret file (see consume).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the raw status of every node.")
@click.option("--watch", is_flag=True, help="Show it again every --interval until Ctrl-C.")
@click.option(
    "--interval", "interval_s", default=2.0, show_default=True, type=click.FloatRange(min=0.1)
)
def cluster_status(
    config_path: str | None,
    count: int | None,
    servers: str | None,
    client_key: str | None,
    as_json: bool,
    watch: bool,
    interval_s: float,
) -> None:
    """Show each node's health: state, streams, last verified seq, digest, lag."""
    if config_path is None and count is not None:
        config_path = _config_of(None, count)
    target = target_of(config_path, servers, client_key)
    while True:
        statuses = target.statuses()
        if watch and sys.stdout.isatty():
            click.clear()
        if as_json:
            raw = {_label(a, v): v.to_wire() if v else None for a, v in statuses.items()}
            click.echo(json.dumps(raw, indent=2))
        else:
            _print_status(statuses)
        if not watch:
            break
        try:
            time.sleep(interval_s)
        except KeyboardInterrupt:
            return
    if all(v is None for v in statuses.values()):
        sys.exit(1)


def _label(address: NodeAddress, status: NodeStatus | None) -> str:
    """A node's id where known, else its address."""
    node = status.node if status else address.node_id
    return str(node) if node is not None else f"{address.host}:{address.port}"


def _print_status(statuses: dict[NodeAddress, NodeStatus | None]) -> None:
    click.echo(
        f"{'node':<5} {'state':<10} {'stream':<20} {'verified seq':>20} {'digest':<16} {'lag':>6}"
    )
    for address, status in statuses.items():
        node = _label(address, status)
        if status is None:
            click.echo(f"{node:<5} {'down':<10} {'-':<20} {'-':>20} {'-':<16} {'-':>6}")
            continue
        if status.storage:
            click.echo(f"{node:<5} storage: {status.storage} (acknowledging nothing)", err=True)
        if not status.streams:
            click.echo(f"{node:<5} {status.state:<10} {'-':<20} {'-':>20} {'-':<16} {'-':>6}")
        for s in status.streams:
            serving = status.state == "serving"
            state = "recovering" if s.recovering and serving else status.state  # --recover
            click.echo(
                f"{node:<5} {state:<10} {s.name:<20} "
                f"{s.verified_seq:>20} {s.digest[:16]:<16} {s.unverified_txs:>6}"
            )
