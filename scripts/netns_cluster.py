"""A multi-host relay cluster on one machine: each node in a network namespace of its own,
with its own address on a bridge (as root; needs iproute2 and nftables).

    scripts/netns_cluster.sh up --nodes 3 --dir /tmp/mh    # prints the config file to use
    relay publish --config /tmp/mh/cluster.toml --stream orders hello
    scripts/netns_cluster.sh down --dir /tmp/mh             # stops the nodes, removes it all
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from relay.config import load
from relay.runtime.launcher import wait_until_answering
from relay.runtime.local_cluster import write_config
from relay.runtime.netns import NetnsLayout, NetnsUnavailable

STATE = "netns.json"


def up(count: int, folder: Path) -> None:
    if (folder / STATE).exists():
        sys.exit(f"{folder / STATE} exists: run `down --dir {folder}` first")
    folder.mkdir(parents=True, exist_ok=True)
    ids = list(range(1, count + 1))
    layout = NetnsLayout.new(ids)
    path = write_config(folder, count, None, {i: layout.address(i) for i in ids})
    layout.create()
    pids: dict[int, int] = {}
    (folder / STATE).write_text(json.dumps({"layout": asdict(layout), "pids": pids}))
    config = load(path)
    for spec in config.nodes:
        with (folder / f"node-{spec.id}.log").open("ab") as log:
            node = ["node", "--config", str(path), "--id", str(spec.id)]
            proc = subprocess.Popen(
                [*layout.exec_prefix(spec.id), sys.executable, "-m", "relay", *node],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        pids[spec.id] = proc.pid
        (folder / STATE).write_text(json.dumps({"layout": asdict(layout), "pids": pids}))
    for spec in config.nodes:
        if not wait_until_answering(spec, pids[spec.id], 30):
            print(f"node {spec.id} did not answer; see {folder}/node-{spec.id}.log")
    for spec in config.nodes:
        print(f"node {spec.id}: namespace {layout.namespace(spec.id)}, {spec.client_address}")
    print(f"config: {path}")


def down(folder: Path) -> None:
    state = json.loads((folder / STATE).read_text())
    for pid in state["pids"].values():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for pid in state["pids"].values():
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    layout = state["layout"]
    NetnsLayout(layout["tag"], layout["subnet"], tuple(layout["node_ids"])).remove()
    (folder / STATE).unlink()
    print(f"stopped {len(state['pids'])} nodes and removed their namespaces")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    try:
        up(args.nodes, args.dir) if args.action == "up" else down(args.dir)
    except NetnsUnavailable as exc:
        sys.exit(f"netns: {exc}")


if __name__ == "__main__":
    main()
