"""The work-queue part of the main job, from the shell as a user types it: jobs by priority, a
delayed job, a worker killed with SIGKILL whose job comes back to another worker, and a job
that dies into the dead-letter stream. ``scripts/demo.py`` runs it on its cluster; alone
(``python scripts/demo_queue.py``) it starts a cluster of its own and stops it at the end."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relay.runtime.local_cluster import write_config

STREAM, GROUP = "tasks", "billing"
WORKER = """
import sys, time
from relay import Worker
with Worker({stream!r}, {group!r}, config={cfg!r}, member="doomed", lease_ms=2000) as w:
    [job] = w.claim(1, wait_ms=15000)
    print(job.seq, job.payload.decode(), flush=True)
    time.sleep(600)  # killed with SIGKILL while it holds the job
"""


def relay(cfg: str, *args: str, quiet: bool = False) -> str:
    if not quiet:
        print(f"$ relay {shlex.join(args)}", flush=True)
    done = subprocess.run(
        [sys.executable, "-m", "relay", *args, "--config", cfg],
        check=True,
        capture_output=True,
        text=True,
    )
    if not quiet:
        print(done.stdout + done.stderr, end="", flush=True)
    return done.stdout


def work(cfg: str, *args: str) -> list[dict[str, object]]:
    out = relay(cfg, "queue", "work", "--stream", STREAM, "--group", GROUP, "--json", *args)
    return [json.loads(line) for line in out.splitlines()]


def show(cfg: str) -> None:
    print("\nwork queue: a stream's transactions worked as jobs by the group 'billing'", flush=True)
    relay(cfg, "queue", "configure", "--stream", STREAM, "--group", GROUP, "--max-deliveries", "2")
    relay(cfg, "publish", "--stream", STREAM, "--priority", "200", "send the newsletter")
    relay(cfg, "publish", "--stream", STREAM, "--priority", "1", "--key", "acct-7", "charge acct-7")
    relay(cfg, "publish", "--stream", STREAM, "--at", "+15s", "send the reminder")
    relay(cfg, "publish", "--stream", STREAM, "--priority", "0", "resize image 42")
    print("\nthe most urgent ready jobs first; the delayed one waits:", flush=True)
    # a lease long enough for the next command to start on a loaded machine (a `relay`
    # process takes about a second there), short enough that the worker below sees it end
    # well before the delayed job is due
    first = work(cfg, "--count", "1", "--no-settle", "--lease", "3s")
    assert first[0]["payload"] == "resize image 42", first
    print("(left unsettled: its lease of 3 s runs out and it comes back)")
    rest = work(cfg, "--count", "5")
    assert [j["payload"] for j in rest] == ["charge acct-7", "send the newsletter"], rest
    relay(cfg, "queue", "describe", "--stream", STREAM, "--group", GROUP)

    print("\na worker claims the image job again and is killed with SIGKILL:", flush=True)
    source = WORKER.format(stream=STREAM, group=GROUP, cfg=cfg)
    worker = subprocess.Popen([sys.executable, "-c", source], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        claimed = worker.stdout.readline().split(" ", 1)
        print(f"worker {worker.pid} holds job {claimed[0]}: {claimed[1].strip()}")
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    print(f"$ kill -9 {worker.pid}")
    print("\nits lease runs out; the job was delivered twice (max 2), so it dies:", flush=True)
    wait_for_dead_letter(cfg)
    relay(cfg, "consume", "--stream", f"{STREAM}.dead", "-e", "--format", "%v %h\\n")
    print("\nthe delayed job is ready once its time comes:", flush=True)
    [reminder] = work(cfg, "--wait", "20s")
    assert reminder["payload"] == "send the reminder", reminder
    relay(cfg, "queue", "describe", "--stream", STREAM, "--group", GROUP)


def wait_for_dead_letter(cfg: str) -> None:
    """Until the group counts one dead job and moved it into the dead-letter stream."""
    args = ("queue", "describe", "--stream", STREAM, "--group", GROUP, "--json")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        info = json.loads(relay(cfg, *args, quiet=True))
        if info.get("dead") == 1 and info.get("dead_not_moved") == 0:
            return
        time.sleep(0.5)
    raise SystemExit("the killed worker's job did not reach the dead-letter stream in 30 s")


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="relay-queue-demo-"))
    cfg = str(write_config(folder, 3))
    relay(cfg, "cluster", "up")
    try:
        show(cfg)
    finally:
        relay(cfg, "cluster", "down")


if __name__ == "__main__":
    main()
