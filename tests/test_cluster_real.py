"""Real node processes on 127.0.0.1, driven through the public client and the CLI."""

import signal
import subprocess
import sys
import threading
import time
import tracemalloc

import msgpack
import pytest
import zmq
from test_bounds_real import dealer
from test_security_real import metric
from waits import until

from relay import Consumer, Producer, RelayError
from relay.client.directory import resolve
from relay.client.fetcher import Fetcher
from relay.client.producer import Ack
from relay.core.dedup import incarnation_start
from relay.runtime.local_cluster import LocalCluster
from relay.wire.client import publish_request
from relay.wire.replies import AckRow, AcksReply, Reply, decode_reply

pytestmark = pytest.mark.slow


def produce_everywhere(cluster: LocalCluster, streams: list[str], per_node: int) -> list[Ack]:
    """One producer thread per node and stream, all at once; every ack."""
    acks: list[Ack] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def run(node_id: int, stream: str) -> None:
        try:
            with Producer(config=cluster.config_path, node=node_id, window=4, batch_max=16) as p:
                futures = [p.send(stream, f"{node_id}:{i}".encode()) for i in range(per_node)]
                p.flush()
                got = [f.result() for f in futures]
            with lock:
                acks.extend(got)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [
        threading.Thread(target=run, args=(spec.id, s))
        for spec in cluster.config.nodes
        for s in streams
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)
    return acks


def read_all(
    cluster: LocalCluster, stream: str, node_id: int, count: int
) -> list[tuple[int, bytes]]:
    with Consumer(stream, config=cluster.config_path, node=node_id) as consumer:
        txs = consumer.take(count, timeout_s=30)
    return [(tx.seq, tx.digest) for tx in txs]


def check_agreement(
    cluster: LocalCluster, acks: list[Ack], streams: list[str], nodes: dict[str, list[int]]
) -> None:
    for stream in streams:
        acked = {a.seq: a.digest for a in acks if a.stream == stream}
        views = [read_all(cluster, stream, n, len(acked)) for n in nodes[stream]]
        for view in views:
            assert view == views[0]  # same seqs, same order, same digests on every node
        assert dict(views[0]) == acked  # every acknowledged seq, with its acked digest
        seqs = [s for s, _ in views[0]]
        assert seqs == sorted(set(seqs))


def test_producers_on_every_node_consumers_on_every_node_agree(cluster3: LocalCluster) -> None:
    streams = ["orders", "payments", "clicks"]
    acks = produce_everywhere(cluster3, streams, per_node=150)
    assert len(acks) == 3 * 3 * 150
    check_agreement(cluster3, acks, streams, {s: [1, 2, 3] for s in streams})


def test_five_nodes_partitioned_streams_and_redirects(cluster5: LocalCluster) -> None:
    streams = ["orders.eu", "payments.eu", "events.web"]
    acks = produce_everywhere(cluster5, streams, per_node=60)  # nodes 4, 5 redirect orders.*
    assert len(acks) == 5 * 3 * 60
    check_agreement(
        cluster5,
        acks,
        streams,
        {"orders.eu": [1, 2, 3], "payments.eu": [3, 4, 5], "events.web": [1, 2, 3, 4, 5]},
    )
    # a consumer that asks node 5 for orders.eu is redirected to a replica and served
    with Consumer("orders.eu", config=cluster5.config_path, node=5) as consumer:
        assert len(consumer.take(10, timeout_s=20)) == 10
        assert consumer.node is not None and consumer.node.node_id in (1, 2, 3)


def test_a_stream_no_node_replicates_gets_a_clear_error(cluster5: LocalCluster) -> None:
    with Producer(config=cluster5.config_path) as producer, pytest.raises(RelayError) as info:
        producer.publish("misc", b"x")
    assert info.value.code == "no_replicas"
    assert "misc" in info.value.message


def test_answered_futures_no_longer_hold_their_messages(cluster3: LocalCluster) -> None:
    """A caller may keep every future it sent: once answered, a future keeps its answer, not
    the message (500 payloads of 10 KB: 5 MB if they stayed)."""
    with Producer(config=cluster3.config_path) as producer:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            futures = [producer.send("orders.kept", b"x" * 10_000) for _ in range(500)]
            producer.flush()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert all(f.done() and not f.failed() for f in futures)
    assert held < 1_000_000, f"{held} bytes held after every publish was answered"


def test_a_wait_of_less_than_a_millisecond_waits_and_takes_answers(cluster3: LocalCluster) -> None:
    """ZeroMQ's poll counts whole milliseconds: a producer's poll of a fraction of one still
    waits about that long when nothing comes (not zero, not a whole millisecond), and an
    answer arriving meanwhile is taken in (``relay bench`` stamps open-loop acks so)."""
    with Producer(config=cluster3.config_path, window=1, batch_max=1) as producer:
        producer.publish("orders.subms", b"connected")
        waits = []
        for _ in range(25):
            started = time.perf_counter()
            producer.poll(0.6)
            waits.append(time.perf_counter() - started)
        waits.sort()
        assert 0.0003 <= waits[len(waits) // 2] < 0.02, waits
        future = producer.send("orders.subms", b"answered")
        deadline = time.monotonic() + 10
        while not future.done() and time.monotonic() < deadline:
            producer.poll(0.6)
        assert future.done() and not future.failed()


def test_a_burst_within_the_share_gets_every_answer(cluster3: LocalCluster) -> None:
    """Found by the benchmark: a producer with 48 requests in flight lost answers (a turn that
    answered dozens of requests at once overflowed the connection's queue of 64) and waited
    out its request timeout for each. 200 requests, within the share of 256, sent at once."""
    sock = dealer(cluster3, 1)
    answered: dict[int, Reply] = {}
    dropped = metric(cluster3, 1, "relay_errors_total", kind="reply_undeliverable")
    try:
        for req_id in range(1, 201):
            sock.send(publish_request(req_id, "orders.burst", "burst", [[req_id, b"x", None, []]]))
        deadline = time.monotonic() + 30
        while len(answered) < 200 and time.monotonic() < deadline:
            if sock.poll(200):
                reply = decode_reply(sock.recv())
                answered[reply.req_id] = reply
    finally:
        sock.close()
    assert sorted(answered) == list(range(1, 201))
    for reply in answered.values():
        assert isinstance(reply, AcksReply) and isinstance(reply.rows[0], AckRow), reply
    assert metric(cluster3, 1, "relay_errors_total", kind="reply_undeliverable") == dropped


def test_a_producer_restarted_under_its_fixed_id_publishes_at_once(cluster3: LocalCluster) -> None:
    """It numbered from 1 again without a journal, and every message was a conflict."""
    first = []
    for incarnation in range(2):
        with Producer(config=cluster3.config_path, producer_id="billing-1") as producer:
            futures = [producer.send("restarts", b"%d-%d" % (incarnation, i)) for i in range(5)]
            producer.flush()
            first.append([f.result().seq for f in futures])
    assert len(set(first[0] + first[1])) == 10
    with Consumer("restarts", config=cluster3.config_path) as consumer:
        payloads = [tx.payload for tx in consumer.take(10, timeout_s=10)]
    assert payloads == [b"%d-%d" % (n, i) for n in range(2) for i in range(5)]


def test_a_second_live_producer_with_the_same_id_fences_the_first(cluster3: LocalCluster) -> None:
    """Both published side by side under one id; now the older one is refused, clearly, and
    its retries of what the stream holds are still answered."""
    with Producer(config=cluster3.config_path, producer_id="billing-2") as old:
        kept = old.send("fences", b"old-1")
        old.flush()
        passed = until(  # a later millisecond: a newer incarnation
            lambda: incarnation_start(int(time.time() * 1000)),
            lambda first_id: first_id > kept.msg_id,
            timeout_s=1,
        )
        assert passed > kept.msg_id, "the wall clock did not move on"
        with Producer(config=cluster3.config_path, producer_id="billing-2") as new:
            assert new.publish("fences", b"new-1").seq > kept.result().seq
            refused = old.send("fences", b"old-2")
            old.flush()
            with pytest.raises(RelayError) as caught:
                refused.result()
            assert caught.value.code == "fenced"
            assert "in use by a newer producer" in caught.value.message
            retry = old.send("fences", b"old-1", msg_id=kept.msg_id)
            old.flush()
            assert retry.result().seq == kept.result().seq
            assert new.publish("fences", b"new-2").seq > 0
    with Consumer("fences", config=cluster3.config_path) as consumer:
        payloads = [tx.payload for tx in consumer.take(3, timeout_s=10)]
    assert payloads == [b"old-1", b"new-1", b"new-2"]


def test_messages_with_large_headers_are_split_into_requests_that_fit(
    cluster3: LocalCluster,
) -> None:
    """Requests were cut by payload bytes alone: 60 small payloads with 200 KB headers each
    went as one 12 MB request, which a node drops with its connection, again and again."""
    with Producer(config=cluster3.config_path, timeout_s=15) as producer:
        futures = [
            producer.send("headers.large", b"%d" % i, headers={"blob": bytes(200_000)})
            for i in range(60)
        ]
        producer.flush()
        assert all(f.result().seq > 0 for f in futures)


def test_a_message_too_large_for_a_request_fails_at_once(cluster3: LocalCluster) -> None:
    """A 9 MB message retried for 30 s and ended in "connection lost": a node drops a request
    over request_bytes_max with its connection, before anything can answer it."""
    spec = cluster3.config.node(1)
    servers = [f"{spec.public_key}@{spec.host}:{spec.client_port}"]
    cases = [
        ({"config": cluster3.config_path}, "message too large: 9000000 bytes", "limit 1048576"),
        (
            {"nodes": servers, "client_key": cluster3.config.keys_dir() / "client.key_secret"},
            "request too large: a message of 9000000 bytes",
            "limit 8388608",
        ),
    ]
    for where, what, limit in cases:
        with Producer(**where, timeout_s=30) as producer:  # type: ignore[arg-type]
            started = time.monotonic()
            with pytest.raises(RelayError) as refused:
                producer.publish("orders", b"x" * 9_000_000)
            assert time.monotonic() - started < 5  # no retries: it took 30 s and failed
            assert what in str(refused.value) and limit in str(refused.value)
            assert producer.publish("orders", b"small").seq > 0


def test_a_malformed_frame_gets_an_error_and_the_node_keeps_serving(cluster3: LocalCluster) -> None:
    spec = cluster3.config.node(2)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    cluster3.secure(sock, 2)
    sock.connect(spec.client_address)
    try:
        for junk in (b"\xc1\xc1junk", msgpack.packb([1, "pub", 7, "s"]), msgpack.packb({"a": 1})):
            sock.send(junk)
            assert sock.poll(5000), "no answer to a malformed frame"
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert reply[1] == "error" and reply[3] == "bad_request"
        sock.send_multipart([b"two", b"frames"])
        assert sock.poll(5000)
        assert msgpack.unpackb(sock.recv(), raw=False)[3] == "bad_request"
    finally:
        sock.close()
    with Producer(config=cluster3.config_path, node=2) as producer:
        assert producer.publish("after-junk", b"ok").seq > 0


def test_the_cli_publishes_consumes_and_shows_status(cluster3: LocalCluster) -> None:
    cfg = str(cluster3.config_path)

    def relay(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = relay("publish", "--config", cfg, "--stream", "cli", "--node", "3", "one", "two")
    assert out.returncode == 0, out.stderr
    seqs = [int(line.split()[0]) for line in out.stdout.splitlines()]
    keyed = ("--key", "k1", "-H", "trace:t-9", "-H", "trace:", "-H", "kind:a:b")
    out = relay("publish", "--config", cfg, "--stream", "cli", *keyed, stdin="three\nfour\n")
    assert out.returncode == 0, out.stderr
    seqs += [int(line.split()[0]) for line in out.stdout.splitlines()]
    out = relay(
        "consume", "--config", cfg, "--stream", "cli", "--node", "1", "--count", "4", "--json"
    )
    assert out.returncode == 0, out.stderr
    import json

    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [int(r["seq"]) for r in rows] == seqs  # strings: flake seqs are above 2^53
    assert [r["payload"] for r in rows] == ["one", "two", "three", "four"]
    assert [r.get("key") for r in rows] == [None, None, "k1", "k1"]
    assert rows[0]["headers"] == []
    assert rows[3]["headers"] == [
        {"name": "trace", "value": "t-9"},
        {"name": "trace", "value": ""},
        {"name": "kind", "value": "a:b"},
    ]
    since = relay("consume", "--config", cfg, "--stream", "cli", "--since", "1h", "--count", "4")
    assert [int(line.split()[0]) for line in since.stdout.splitlines()] == seqs
    later = relay(
        "consume",
        "--config",
        cfg,
        "--stream",
        "cli",
        "--from",
        "2999-01-01T00:00:00Z",
        "--idle-exit",
        "0.5",
    )
    assert later.returncode == 0 and later.stdout == ""
    out = relay("consume", "--config", cfg, "--stream", "cli", "--since", "ten")
    assert out.returncode != 0 and "--since" in out.stderr
    out = relay("publish", "--config", cfg, "--stream", "cli", "-H", "novalue", "x")
    assert out.returncode != 0 and "NAME:VALUE" in out.stderr
    out = relay("cluster", "status", "--config", cfg)
    assert out.returncode == 0 and "serving" in out.stdout and "cli" in out.stdout
    out = relay("publish", "--config", cfg, "--stream", "bad stream", "x")
    assert out.returncode != 0 and "bad_request" in out.stderr


def test_with_one_node_stopped_publishes_still_succeed_and_fail_over(
    fresh_cluster3: LocalCluster,
) -> None:
    cluster = fresh_cluster3
    with Producer(config=cluster.config_path, node=1) as producer:
        before = [producer.publish("s", f"before{i}".encode()) for i in range(20)]
    cluster.stop(1, signal.SIGKILL)
    after = []
    for node_id in (2, 3, 1):  # node 1 is down: its producer must fail over by itself
        with Producer(config=cluster.config_path, node=node_id, timeout_s=30) as producer:
            after += [producer.publish("s", f"after{node_id}-{i}".encode()) for i in range(20)]
    acked = {a.seq: a.digest for a in before + after}
    for node_id in (2, 3):
        view = read_all(cluster, "s", node_id, len(acked))
        assert dict(view) == acked


def test_span_cuts_a_range_at_the_digests_consumers_see(cluster3: LocalCluster) -> None:
    with Producer(config=cluster3.config_path) as producer:
        futures = [producer.send("orders.span", b"%d" % i) for i in range(1000)]
        producer.flush()
    seqs = sorted(f.result().seq for f in futures)
    with Consumer("orders.span", config=cluster3.config_path) as consumer:
        digest_at = {tx.seq: tx.digest for tx in consumer.take(1000, timeout_s=30)}
    fetcher = Fetcher(
        "orders.span", resolve(config=cluster3.config_path), pair=cluster3.client_pair
    )
    try:
        whole = fetcher.span(0, 0, 0, 3)
        assert whole is not None and not whole.lost
        assert [count for _, _, count in whole.bounds] == [333, 333, 334]
        assert all(digest_at[seq] == digest for seq, digest, _ in whole.bounds)
        assert whole.bounds[-1][0] == seqs[-1] == whole.verified_seq
        assert whole.earliest_seq == seqs[0]

        capped = fetcher.span(seqs[99], 0, 10, 1)
        assert capped is not None and capped.bounds == ((seqs[109], digest_at[seqs[109]], 10),)

        bounded = fetcher.span(seqs[99], seqs[499], 0, 4)
        assert bounded is not None and sum(c for _, _, c in bounded.bounds) == 400
        assert bounded.bounds[-1][0] == seqs[499]

        past_the_end = fetcher.span(seqs[-1], 0, 0, 2)
        assert past_the_end is not None and past_the_end.bounds == ()
        with pytest.raises(RelayError, match="parts must be at least 1"):
            fetcher.span(0, 0, 0, 0)
    finally:
        fetcher.close()
