"""Work groups on a real cluster through the public surfaces (issue 33): jobs claimed in
priority order, a nak and a lease that runs out bring a job back with its delivery count, a
rejected job dies, settlements of a lost delivery are stale, and a client cannot write into a
control stream."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from waits import until

from relay import Consumer, Producer, RelayError, Worker
from relay.client.worker import Job
from relay.queue.jobs import job_headers
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


def test_a_work_group_hands_out_jobs_by_priority_and_takes_them_back(
    fresh_cluster3: LocalCluster,
) -> None:
    cluster = fresh_cluster3
    priorities = [128, 5, 128, 0, 5, 200]
    with Producer(config=cluster.config_path) as producer:
        seqs = [
            producer.publish("jobs", b"job%d" % i, headers=job_headers(p, None)).seq
            for i, p in enumerate(priorities)
        ]
    by_order = [s for _, s in sorted(zip(priorities, seqs, strict=True))]
    with Worker("jobs", "g", config=cluster.config_path, node=2, member="w1") as worker:
        jobs = worker.claim(count=10)
        assert [j.seq for j in jobs] == by_order
        assert [j.priority for j in jobs] == sorted(priorities)
        assert all(j.delivery == 1 for j in jobs) and jobs[0].payload == b"job3"
        assert worker.ack(jobs[:3]) == ["settled"] * 3
        assert worker.ack(jobs[:1]) == ["stale"]  # settled twice: the second changes nothing
        assert worker.nak(jobs[3:4]) == ["settled"]
        assert worker.reject(jobs[4:5]) == ["settled"]
        again = worker.claim(count=10)
        assert [(j.seq, j.delivery) for j in again] == [(jobs[3].seq, 2)]
        assert worker.claim(count=1) == []  # the last one is held (jobs[5])
    with Worker("jobs", "g", config=cluster.config_path, node=3, member="w2") as other:
        assert other.ack(jobs[5:6]) == ["stale"]  # not its delivery
        # jobs[5]'s lease (30 s) still runs; again[0] is held by w1 too: nothing ready
        assert other.claim(count=5, wait_ms=300) == []
    with Worker("jobs", "g", config=cluster.config_path, node=1) as reader:  # folded there too
        info = until(reader.info, lambda i: i.get("acked") == 3, timeout_s=10)
    assert (info["acked"], info["dead"], info["claimed"], info["ready"]) == (3, 1, 2, 0)


def test_a_lease_that_runs_out_makes_the_job_ready_again(fresh_cluster3: LocalCluster) -> None:
    cluster = fresh_cluster3
    with Producer(config=cluster.config_path) as producer:
        seq = producer.publish("work", b"slow job").seq
    with Worker("work", "g", config=cluster.config_path, member="dies") as dying:
        [held] = dying.claim(lease_ms=500)
    assert held.seq == seq
    with Worker("work", "g", config=cluster.config_path, member="next") as worker:
        found = until(lambda: worker.claim(wait_ms=500), bool, timeout_s=15)
        assert [(j.seq, j.delivery) for j in found] == [(seq, 2)]
        assert dying_ack_is_stale(cluster, held.seq)
        assert worker.ack(found) == ["settled"]


def dying_ack_is_stale(cluster: LocalCluster, seq: int) -> bool:
    with Worker("work", "g", config=cluster.config_path, member="dies") as late:
        job = late.claim(count=1, wait_ms=0)
        assert job == []
        gone = Job(seq, 128, 0, None, 1, 500, b"", (), time.monotonic())
        return late.ack([gone]) == ["stale"]


def test_a_client_cannot_write_into_a_control_stream(fresh_cluster3: LocalCluster) -> None:
    with (
        Producer(config=fresh_cluster3.config_path) as producer,
        pytest.raises(RelayError, match="control stream"),
    ):
        producer.publish("jobs.__queue.g", b"a forged claim")


def test_dead_jobs_go_to_the_dead_letter_stream_with_their_history(
    fresh_cluster3: LocalCluster,
) -> None:
    cluster = fresh_cluster3
    with Worker("mail", "senders", config=cluster.config_path, member="w") as worker:
        assert worker.configure(max_deliveries=2)["max_deliveries"] == 2
        with Producer(config=cluster.config_path) as producer:
            first = producer.publish("mail", b"bounce", key="a@example.com").seq
            second = producer.publish("mail", b"retry", key="b@example.com").seq
        jobs = worker.claim(count=2)
        assert worker.reject([j for j in jobs if j.seq == first]) == ["settled"]
        for delivery in (1, 2):
            [job] = [j for j in jobs if j.seq == second] if delivery == 1 else worker.claim()
            assert job.delivery == delivery
            assert worker.nak([job]) == ["settled"]
        with Consumer("mail.dead", config=cluster.config_path) as dead:
            letters = dead.take(2, timeout_s=15)
        info = until(worker.info, lambda i: i["dead_not_moved"] == 0, timeout_s=10)
    assert info["dead"] == 2 and info["ready"] == 0
    headers = [dict(tx.headers) for tx in letters]
    assert [tx.payload for tx in letters] == [b"bounce", b"retry"]
    assert [tx.key for tx in letters] == [b"a@example.com", b"b@example.com"]
    assert [h["relay-dead-seq"] for h in headers] == [str(first).encode(), str(second).encode()]
    assert headers[0]["relay-dead-reason"] == b"rejected"
    assert headers[1]["relay-dead-deliveries"] == b"2"
    assert b'"w", 2' in headers[1]["relay-dead-history"]


def test_coalescing_runs_the_newest_job_of_a_resource_once_and_one_at_a_time(
    fresh_cluster3: LocalCluster,
) -> None:
    cluster = fresh_cluster3
    with Worker("pages", "render", config=cluster.config_path, member="w") as worker:
        worker.configure(coalesce=True, exclusive=True)
        with Producer(config=cluster.config_path) as producer:
            for version in (1, 2, 3):
                producer.publish("pages", b"home v%d" % version, key="/home")
            producer.publish("pages", b"about v1", key="/about")
            jobs = worker.claim(count=10)
            assert [j.payload for j in jobs] == [b"home v3", b"about v1"]
            producer.publish("pages", b"home v4", key="/home")  # /home is being rendered
        assert worker.claim(count=10, wait_ms=300) == []  # one job per resource at a time
        worker.ack(jobs)
        [latest] = worker.claim(count=10, wait_ms=2000)
        assert latest.payload == b"home v4"
        assert worker.info()["replaced"] == 2


def test_a_node_folds_at_most_queue_groups_max_groups_and_retention_keeps_control_streams(
    tmp_path: Path,
) -> None:
    overrides: dict[str, int | str] = {"queue_groups_max": 1, "segment_bytes": 4096}
    with LocalCluster(tmp_path / "c", 3, overrides=overrides) as cluster:
        text = cluster.config_path.read_text().replace(
            "segment_ms =", "retention_bytes = 20000\nsegment_ms ="
        )
        cluster.config_path.write_text(text)
        cluster.start()
        cluster.wait_serving()
        cfg = cluster.config_path
        with Producer(config=cfg) as producer:
            for i in range(400):
                producer.send("held", b"job %d" % i)
            producer.flush()
        with Worker("held", "a", config=cfg, member="w") as worker:
            for _ in range(400):  # one claim and one ack each: 800 operations, about 60 KiB
                assert worker.ack(worker.claim(1, wait_ms=2000)) == ["settled"]
        with Worker("held", "b", config=cfg, timeout_s=2.0) as other:
            with pytest.raises(RelayError) as info:
                other.claim(1)
            assert "busy: this node folds 1 work groups" in str(info.value), info.value
        trimmed = until(
            lambda: cluster.log(1),
            lambda text: "retention: held now starts after seq" in text,
            timeout_s=30,
        )
        assert "retention: held.__queue.a" not in trimmed
        cluster.stop(2)  # it folds the group again from its whole control stream
        cluster.start(2)
        cluster.wait_serving()
        with Worker("held", "a", config=cfg, node=2) as worker:
            info_2 = until(worker.info, lambda i: i.get("acked") == 400, timeout_s=30)
        assert info_2["ready"] == 0 and info_2["claimed"] == 0


def test_renew_holds_a_job_past_its_lease_a_nak_delays_it_and_run_settles_by_result(
    fresh_cluster3: LocalCluster,
) -> None:
    cfg = fresh_cluster3.config_path
    with Producer(config=cfg) as producer:
        producer.publish("tasks", b"long")
    with Worker("tasks", "g", config=cfg, member="w", lease_ms=1000) as worker:
        [job] = worker.claim()
        for _ in range(3):  # 1.5 s in all: past the lease, renewed before it ran out each time
            time.sleep(0.5)  # not a wait: the work that outlasts the lease, renewed
            assert worker.renew([job]) == ["settled"]
        with Worker("tasks", "g", config=cfg, member="other") as other:
            assert other.claim(wait_ms=300) == []  # still held
        assert worker.nak([job], delay_ms=1500) == ["settled"]
        naked = time.monotonic()
        assert worker.claim() == [] and worker.next_ready_ms > 0
        [again] = until(lambda: worker.claim(wait_ms=500), bool, timeout_s=15)
        assert time.monotonic() - naked >= 1.4 and (again.seq, again.delivery) == (job.seq, 2)
        assert worker.ack([again]) == ["settled"]
        with Producer(config=cfg) as producer:
            producer.publish("tasks", b"fine")
            producer.publish("tasks", b"fails once")
        seen: list[tuple[bytes, int]] = []

        def work(j: Job) -> None:
            seen.append((j.payload, j.delivery))
            if j.payload == b"fails once" and j.delivery == 1:
                raise ValueError("the first try fails")

        runs = worker.run(work, count=2, wait_ms=1000)
        settled = [next(runs) for _ in range(3)]  # the failed one comes back at once (a nak)
        assert seen == [(b"fine", 1), (b"fails once", 1), (b"fails once", 2)]
        assert [j.payload for j in settled] == [b"fine", b"fails once", b"fails once"]
        info = until(worker.info, lambda i: i.get("acked") == 3, timeout_s=10)
        assert (info["ready"], info["claimed"], info["delayed"]) == (0, 0, 0)
