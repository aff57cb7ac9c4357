"""``relay publish --priority/--at`` and ``relay queue`` as a shell user drives them: jobs by
priority, a delayed job, a worker that leaves its lease to run out, a job that dies into the
dead-letter stream and is sent back with ``retry-dead``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from waits import until

from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


def relay(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "relay", *args, "--config", str(cluster.config_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def ok(cluster: LocalCluster, *args: str) -> str:
    done = relay(cluster, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def work(cluster: LocalCluster, stream: str, *args: str) -> list[dict[str, object]]:
    out = ok(cluster, "queue", "work", "--stream", stream, "--group", "g", "--json", *args)
    return [json.loads(line) for line in out.splitlines()]


def describe(cluster: LocalCluster, stream: str) -> dict[str, int]:
    out = ok(cluster, "queue", "describe", "--stream", stream, "--group", "g", "--json")
    info: dict[str, int] = json.loads(out)
    return info


def test_jobs_by_priority_and_a_delayed_job_from_the_shell(fresh_cluster3: LocalCluster) -> None:
    cluster = fresh_cluster3
    ok(cluster, "publish", "--stream", "jobs", "--priority", "200", "later")
    ok(cluster, "publish", "--stream", "jobs", "--priority", "1", "--key", "a.example", "urgent")
    ok(cluster, "publish", "--stream", "jobs", "--at", "+3s", "delayed")
    [first] = work(cluster, "jobs")
    assert (first["payload"], first["priority"], first["key"]) == ("urgent", 1, "a.example")
    assert first["delivery_count"] == 1
    info = describe(cluster, "jobs")
    assert (info["ready"], info["delayed"], info["acked"]) == (1, 1, 1)
    assert [j["payload"] for j in work(cluster, "jobs")] == ["later"]  # the delayed one waits
    empty = relay(cluster, "queue", "work", "--stream", "jobs", "--group", "g")
    assert empty.returncode == 0 and "nothing to work on; the next job is ready at" in empty.stderr
    [delayed] = until(lambda: work(cluster, "jobs", "--wait", "1s"), bool, timeout_s=15)
    assert delayed["payload"] == "delayed" and delayed["not_before"] > 0
    assert "g\tjobs" in ok(cluster, "queue", "ls")


def test_a_job_whose_workers_die_goes_dead_and_comes_back_with_retry_dead(
    fresh_cluster3: LocalCluster,
) -> None:
    cluster = fresh_cluster3
    ok(cluster, "queue", "configure", "--stream", "tasks", "--group", "g", "--max-deliveries", "2")
    ok(cluster, "publish", "--stream", "tasks", "flaky")
    [job] = work(cluster, "tasks", "--no-settle", "--lease", "500ms")  # a worker that dies
    assert job["delivery_count"] == 1
    [again] = until(
        lambda: work(cluster, "tasks", "--no-settle", "--lease", "500ms", "--wait", "1s"),
        bool,
        timeout_s=15,
    )
    assert (again["seq"], again["delivery_count"]) == (job["seq"], 2)
    info = until(
        lambda: describe(cluster, "tasks"),
        lambda i: i["dead"] == 1 and i["dead_not_moved"] == 0,
        timeout_s=20,
    )
    assert info["ready"] == 0 and info["claimed"] == 0
    ok(cluster, "queue", "retry-dead", "--stream", "tasks", "--group", "g")
    [back] = until(lambda: work(cluster, "tasks", "--wait", "1s"), bool, timeout_s=15)
    assert (back["payload"], back["delivery_count"]) == ("flaky", 1) and back["seq"] != job["seq"]
