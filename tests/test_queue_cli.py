"""``relay publish --priority/--at`` and ``relay queue`` as a shell user drives them: jobs by
priority, a delayed job, ``peek``, a worker that leaves its lease to run out, a job that dies
into the dead-letter stream and is sent back with ``retry-dead``, and the queue's gauges on
``/metrics``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.request import urlopen

import pytest
from prometheus_client.parser import text_string_to_metric_families
from relay_cli import relay
from waits import until

from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


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
    ok(cluster, "publish", "--stream", "jobs", "--at", "+15s", "delayed")  # slow machines too
    [first] = work(cluster, "jobs")
    assert (first["payload"], first["priority"], first["key"]) == ("urgent", 1, "a.example")
    assert first["delivery_count"] == 1
    info = describe(cluster, "jobs")
    assert (info["ready"], info["delayed"], info["acked"]) == (1, 1, 1)
    assert [j["payload"] for j in work(cluster, "jobs")] == ["later"]  # the delayed one waits
    empty = relay(cluster, "queue", "work", "--stream", "jobs", "--group", "g")
    assert empty.returncode == 0 and "nothing to work on; the next job is ready at" in empty.stderr
    [delayed] = until(lambda: work(cluster, "jobs", "--wait", "5s"), bool, timeout_s=40)
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


def queue_samples(cluster: LocalCluster, node_id: int) -> dict[tuple[str, str], float]:
    """(metric, state or outcome) -> value for group g of stream "peeked" on one node."""
    port = cluster.config.node(node_id).metrics_port
    text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("relay_queue") and s.labels.get("stream") == "peeked":
                found[(s.name, s.labels.get("state") or s.labels.get("outcome") or "")] = s.value
    return found


def test_peek_lists_the_next_jobs_in_claim_order_and_the_gauges_count_them(
    fresh_cluster3: LocalCluster,
) -> None:
    cluster = fresh_cluster3
    for priority, payload in (("9", "c"), ("1", "a"), ("5", "b"), ("5", "b2")):
        ok(cluster, "publish", "--stream", "peeked", "--priority", priority, payload)
    ok(cluster, "publish", "--stream", "peeked", "--at", "+1h", "--key", "r", "much later")
    ok(cluster, "queue", "configure", "--stream", "peeked", "--group", "g")  # takes them in
    empty = relay(cluster, "queue", "peek", "--stream", "peeked", "--group", "g")
    assert empty.returncode == 0 and "no ready job" in empty.stderr  # nothing taken in yet
    [claimed] = work(cluster, "peeked", "--no-settle")  # a claim takes every job in
    assert claimed["payload"] == "a"
    out = ok(cluster, "queue", "peek", "--stream", "peeked", "--group", "g", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["payload"], r["priority"]) for r in rows] == [("b", 5), ("b2", 5), ("c", 9)]
    out = ok(cluster, "queue", "peek", "--stream", "peeked", "--group", "g", "--count", "1")
    assert out.split("\t")[1:] == ["5", "-", "b\n"]
    [again] = work(cluster, "peeked")
    assert again["payload"] == "b"  # peeking claimed nothing
    wanted = {
        ("relay_queue_jobs", "ready"): 2.0,
        ("relay_queue_jobs", "delayed"): 1.0,
        ("relay_queue_jobs", "claimed"): 1.0,
        ("relay_queue_outcomes", "acked"): 1.0,
    }
    for node_id in (1, 2, 3):  # every replica folds the group and reports it
        got = until(
            lambda n=node_id: queue_samples(cluster, n),
            lambda g: all(g.get(k) == v for k, v in wanted.items()),
            timeout_s=15,
        )
        assert got[("relay_queue_oldest_ready_seconds", "")] > 0


def test_the_main_jobs_work_queue_demo_runs_as_shown(
    fresh_cluster3: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    sys.path.insert(0, scripts)
    try:
        import demo_queue
    finally:
        sys.path.remove(scripts)
    demo_queue.show(str(fresh_cluster3.config_path))  # it asserts what it shows
    out = capsys.readouterr().out
    assert "relay-dead-reason=not acknowledged in 2 deliveries" in out
    assert '"payload": "send the reminder"' in out
