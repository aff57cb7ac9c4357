"""A consumer's chain is anchored by a second replica: a node that serves a rewritten history
whose digests chain consistently (from genesis on) is caught before anything is yielded.

The forger is a real ZeroMQ server speaking the client protocol beside a real 3-node cluster:
it answers every fetch with the stream's real seqs and a payload of its own, chained from
genesis, and every span with its own digests."""

import threading
from pathlib import Path
from typing import Any

import pytest
import zmq

from relay import Consumer, Producer
from relay.client.consumer import Transaction
from relay.client.directory import resolve
from relay.core.digest import genesis
from relay.core.events import ReadResult, SpanResult
from relay.core.messages import Tx, fold_tx
from relay.errors import DigestMismatchError
from relay.runtime.local_cluster import LocalCluster, free_ports
from relay.wire.client import FetchFrame, SpanFrame, decode_request
from relay.wire.replies import encode_span, encode_txs

pytestmark = pytest.mark.slow


class Forger:
    """Serves ``txs`` with every payload replaced and the digests folded again from genesis."""

    def __init__(self, stream: str, txs: list[Tx], port: int) -> None:
        self.stream = stream
        chain, self.txs, self.digests = genesis(stream), [], []
        for tx in txs:
            forged = tx._replace(payload=b"forged " + tx.payload)
            chain = fold_tx(chain, forged)
            self.txs.append(forged)
            self.digests.append(chain)
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.bind(f"tcp://127.0.0.1:{port}")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        head = self.txs[-1].seq
        while not self.stop.is_set():
            if not self.socket.poll(50):
                continue
            peer, body = self.socket.recv_multipart()
            request = decode_request(body)
            if isinstance(request, FetchFrame):
                held = [i for i, tx in enumerate(self.txs) if tx.seq > request.after_seq]
                held = held[: max(1, request.limit)]
                prev = self.digests[held[0] - 1] if held and held[0] else genesis(self.stream)
                result = ReadResult(
                    self.stream,
                    tuple(self.txs[i] for i in held),
                    tuple(self.digests[i] for i in held),
                    prev,
                    head,
                    self.txs[0].seq,
                    False,
                )
                self.socket.send_multipart([peer, encode_txs(request.req_id, result)])
            elif isinstance(request, SpanFrame):
                inside = [
                    i
                    for i, tx in enumerate(self.txs)
                    if request.after_seq < tx.seq <= (request.upto_seq or head)
                ]
                bounds = (
                    ((self.txs[inside[-1]].seq, self.digests[inside[-1]], len(inside)),)
                    if inside
                    else ()
                )
                span = SpanResult(self.stream, bounds, head, self.txs[0].seq, False)
                self.socket.send_multipart([peer, encode_span(request.req_id, span)])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.socket.close(0)
        self.context.term()


def publish_20(cluster: LocalCluster) -> list[Transaction]:
    """20 messages in "orders", as an honest consumer reads them."""
    with Producer(config=cluster.config_path) as producer:
        for i in range(20):
            producer.send("orders", b"order %d" % i)
        producer.flush()
    with Consumer("orders", config=cluster.config_path) as honest:
        return honest.take(20, timeout_s=10)


def as_txs(read: list[Transaction]) -> list[Tx]:
    return [
        Tx(t.seq, 0, t.origin, 0, t.producer_id, t.msg_id, t.payload, t.key, t.headers)
        for t in read
    ]


def test_a_node_that_rewrites_history_consistently_is_caught_by_a_second_replica(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        real = publish_20(cluster)
        port = free_ports(1)[0]
        forger = Forger("orders", as_txs(real), port)
        try:
            real_nodes = [a.text for a in resolve(cluster.config_path)]
            alone = Consumer("orders", nodes=[f"127.0.0.1:{port}"], reply_timeout_s=1.0)
            with alone:  # with nobody to compare against, the forged chain holds together
                assert alone.take(20, timeout_s=10)[0].payload == b"forged order 0"
            key = cluster.config.keys_dir() / "client.key_secret"  # the cluster lists this key
            watched = Consumer("orders", nodes=[f"127.0.0.1:{port}", *real_nodes], client_key=key)
            with watched, pytest.raises(DigestMismatchError, match="disagree at seq"):
                watched.take(20, timeout_s=10)
        finally:
            forger.close()
        with Consumer("orders", config=cluster.config_path, node=2) as confirmed:
            assert [t.payload for t in confirmed.take(20, timeout_s=10)] == [
                t.payload for t in real
            ]


@pytest.mark.spark
def test_spark_plans_only_what_a_second_replica_holds(tmp_path: Path, spark: Any) -> None:
    """Spark's planner and its first partition read from the first listed node, and checked
    the chain against that node's own digests: a consistent rewrite passed."""
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        port = free_ports(1)[0]
        forger = Forger("orders", as_txs(publish_20(cluster)), port)
        try:
            nodes = ",".join([f"127.0.0.1:{port}", *(a.text for a in resolve(cluster.config_path))])
            key = str(cluster.config.keys_dir() / "client.key_secret")
            reader = spark.read.format("relay").option("stream", "orders")
            reader = reader.option("nodes", nodes).option("clientKey", key)
            with pytest.raises(Exception, match="disagree at seq"):
                reader.load().collect()
        finally:
            forger.close()
