"""``python -m chaos run ...`` (or ``chaos/run``) and ``python -m chaos check DIR``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from chaos import checker, report, runner, schedule
from relay.runtime import netns


@click.group()
def main() -> None:
    """Chaos runs against a local relay cluster."""


@main.command()
@click.option("--nodes", type=click.Choice(["3", "5"]), default="3", show_default=True)
@click.option(
    "--duration", type=float, default=60.0, show_default=True, help="Seconds of workload."
)
@click.option(
    "--faults",
    "kinds",
    default="kill,pause,partition,loss,clock",
    show_default=True,
    help=f"Comma-separated fault kinds from {', '.join(schedule.KINDS)} (crash-all, every "
    "node killed at once, and corrupt, a flipped byte in one node's sealed log, are opt-in).",
)
@click.option("--seed", type=int, default=1, show_default=True, help="Draws the fault schedule.")
@click.option(
    "--rate", type=float, default=300.0, show_default=True, help="Publishes per second, in all."
)
@click.option(
    "--out", type=click.Path(path_type=Path), help="History folder (default chaos-runs/...)."
)
@click.option(
    "--net",
    type=click.Choice(["local", "netns"]),
    default="local",
    show_default=True,
    help="local: nodes on 127.0.0.1, partitions and loss by the nodes' admin hooks; netns: "
    "each node in a network namespace of its own (root), partitions and loss by nftables.",
)
@click.option(
    "--workload",
    type=click.Choice(["stream", "queue", "compacted"]),
    default="stream",
    show_default=True,
    help="stream: producers and consumers on three streams; queue: producers of jobs and "
    "worker processes of a work group, some killed with SIGKILL; compacted: updates of 50 "
    "keys, some tombstones, on a compacted stream.",
)
@click.option(
    "--fsync",
    type=click.Choice(["always", "interval", "never"]),
    default="always",
    show_default=True,
    help="The cluster's fsync: always syncs before a vote; interval and never leave writes to "
    "the kernel (a SIGKILL, even of every node, keeps what the processes wrote).",
)
def run(
    nodes: str,
    duration: float,
    kinds: str,
    seed: int,
    rate: float,
    out: Path | None,
    net: str,
    workload: str,
    fsync: str,
) -> None:
    """Run a workload against a fresh cluster while injecting faults; check the history."""
    try:
        fault_kinds = schedule.parse_kinds(kinds)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--faults") from None
    if duration < 15:
        raise click.BadParameter(
            "at least 15 s (faults start after 3 s and stop 5 s before the end)",
            param_hint="--duration",
        )
    faults = schedule.draw(seed, int(nodes), duration, fault_kinds)
    out = out or Path("chaos-runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-n{nodes}-seed{seed}"
    if out.exists() and any(out.iterdir()):  # an old run's logs would be restored and checked
        raise click.BadParameter(
            f"{out} is not empty (an earlier run's history and node logs); choose another "
            "folder or remove it",
            param_hint="--out",
        )
    if net == "netns" and netns.unavailable():
        raise click.BadParameter(netns.unavailable(), param_hint="--net")
    click.echo(
        f"chaos run: {nodes} nodes, {duration:.0f} s, seed {seed}, {rate:.0f} tx/s, "
        f"network {net}, fsync {fsync} -> {out}"
    )
    for fault in faults:
        click.echo(f"  {fault.start_s:6.1f}-{fault.end_s:6.1f} s  {fault.label()}")
    settings = {
        "nodes": int(nodes),
        "duration_s": duration,
        "faults": list(fault_kinds),
        "seed": seed,
        "rate": rate,
        "net": net,
        "workload": workload,
        "fsync": fsync,
    }
    try:
        runner.run(
            out,
            int(nodes),
            duration,
            faults,
            rate,
            settings,
            say=click.echo,
            net=net,
            workload_kind=workload,
        )
    except KeyboardInterrupt:
        click.echo("interrupted: every node was stopped; the history so far is in " + str(out))
        sys.exit(130)
    sys.exit(0 if finish(out) else 1)


@main.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False, path_type=Path))
def check(folder: Path) -> None:
    """Check a run's history folder again (and redraw its report)."""
    sys.exit(0 if finish(folder) else 1)


def finish(folder: Path) -> bool:
    analysis = checker.check(folder)
    text = report.write(folder, analysis)
    click.echo(text)
    click.echo(f"\nreport: {folder / 'report.txt'}, {folder / 'report.png'}")
    return analysis.ok


if __name__ == "__main__":
    main()
