"""Reads by dense index on a running cluster: every transaction carries its index (0 for a
stream's first, as a Kafka offset), a consumer starts at an index or at the last N in one
request, stops after N entries or at a time, reads an index below the memory ring from the
log, after a restart and on a compacted stream (whose indexes have gaps), and
``relay consume --from-index / --last`` do the same from the command line."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from relay_cli import relay
from test_compaction_real import BLOCKS
from waits import until

from relay import Consumer, Index, Producer
from relay.core.flake import seq_unix_ms
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def indexed3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("indexed")
    overrides = {"buffer_txs_max": 100, "dedup_window_ms": 1000}  # older reads: from the logs
    with LocalCluster(folder, nodes=3, overrides=overrides, streams=BLOCKS) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


def publish(
    cluster: LocalCluster, stream: str, count: int, key_of: int = 0, first: int = 0
) -> list[int]:
    """``count`` payloads ``b"m<i>"`` from ``first`` on (keyed ``k<i % key_of>`` if
    ``key_of``); their seqs."""
    with Producer(config=cluster.config_path, window=8, batch_max=50) as producer:
        futures = [
            producer.send(stream, b"m%d" % i, key=b"k%d" % (i % key_of) if key_of else None)
            for i in range(first, first + count)
        ]
        producer.flush()
        return [f.result().seq for f in futures]


def read(cluster: LocalCluster, stream: str, **kw: object) -> list[tuple[int, bytes, int]]:
    with Consumer(stream, config=cluster.config_path, **kw) as consumer:  # type: ignore[arg-type]
        got = []
        deadline = time.monotonic() + 30
        while not consumer.ended and time.monotonic() < deadline:
            got += consumer.poll(0.5)
            if consumer.at_end() and "stop_after" not in kw and "until" not in kw:
                break
        return [(t.index, t.payload, t.seq) for t in got]


def test_a_consumer_starts_at_an_index_or_the_last_n_and_stops_after_n_or_at_a_time(
    indexed3: LocalCluster,
) -> None:
    seqs = publish(indexed3, "plain", 300)  # the memory rings hold the last 100 or so
    time.sleep(0.05)  # the next are stamped later: a time between the two
    seqs += publish(indexed3, "plain", 200, first=300)
    everything = read(indexed3, "plain")
    assert [(i, p) for i, p, _ in everything] == [(i, b"m%d" % i) for i in range(500)]
    for start in (0, 7, 250, 499):  # below the ring (from the log) and in it
        got = read(indexed3, "plain", start=Index(start), stop_after=3)
        assert got == everything[start : start + 3]
    assert read(indexed3, "plain", start=Index(-4)) == everything[-4:]
    assert read(indexed3, "plain", start=Index(-1000)) == everything  # more than it holds
    cut = datetime.fromtimestamp(seq_unix_ms(everything[300][2]) / 1000, UTC)  # a seq's time
    assert read(indexed3, "plain", until=cut) == everything[:300]
    assert seqs == [seq for _, _, seq in everything]


def test_indexes_survive_a_restart_and_come_from_every_replica(indexed3: LocalCluster) -> None:
    publish(indexed3, "restarted", 300)
    indexed3.stop(2)
    indexed3.start(2)
    indexed3.wait_serving([2])
    for node in (1, 2, 3):
        got = read(indexed3, "restarted", node=node, start=Index(42), stop_after=2)
        assert got[:2] and [(i, p) for i, p, _ in got] == [(42, b"m42"), (43, b"m43")], node


def test_a_compacted_stream_keeps_each_records_index(indexed3: LocalCluster) -> None:
    publish(indexed3, "kv.a", 600, key_of=10)
    # keys of their own: the updates above end up in sealed segments, below the memory rings
    publish(indexed3, "kv.a", 300, key_of=1000, first=600)
    newest = list(range(590, 600))  # each of the 10 keys' newest update

    def early(g: list[tuple[int, bytes, int]]) -> list[int]:
        return [i for i, _, _ in g if i < 600]

    got = until(lambda: read(indexed3, "kv.a"), lambda g: early(g) == newest, timeout_s=60)
    assert early(got) == newest, f"not compacted within 60 s: {early(got)[:20]}"
    assert all(b"m%d" % i == p for i, p, _ in got)  # each record keeps its own index
    assert [i for i, _, _ in got if i >= 600] == list(range(600, 900))
    assert [i for i, _, _ in got] == sorted({i for i, _, _ in got})
    # an index the compaction dropped: the reading starts at the next one kept
    first_gap = next(i for n, (i, _, _) in enumerate(got) if i != n)
    assert read(indexed3, "kv.a", start=Index(first_gap - 1), stop_after=1)[0][0] >= first_gap


def test_relay_consume_reads_from_an_index_and_the_last_n(indexed3: LocalCluster) -> None:
    publish(indexed3, "cli", 30)

    def consume(*args: str) -> list[str]:
        done = relay(indexed3, "consume", "--stream", "cli", *args, "--format", "%i %v\\n")
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    assert consume("--from-index", "10", "--count", "3") == ["10 m10", "11 m11", "12 m12"]
    assert consume("--last", "2", "-e") == ["28 m28", "29 m29"]
