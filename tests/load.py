"""A workload for tests on real clusters: producers publishing until told to stop."""

from __future__ import annotations

import threading

from waits import until

from relay import Producer
from relay.client.producer import Ack
from relay.runtime.local_cluster import LocalCluster


class Load:
    """Producers on every node, publishing until stopped; every ack they got."""

    def __init__(self, cluster: LocalCluster, streams: list[str]) -> None:
        self.acks: list[Ack] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._run, args=(cluster, spec.id, s))
            for spec in cluster.config.nodes
            for s in streams
        ]
        for t in self.threads:
            t.start()

    def _run(self, cluster: LocalCluster, node_id: int, stream: str) -> None:
        try:
            with Producer(
                config=cluster.config_path, node=node_id, timeout_s=60, window=2, batch_max=8
            ) as producer:
                i = 0
                while not self.stop.is_set():
                    futures = [
                        producer.send(stream, f"{node_id}:{i + k}".encode()) for k in range(8)
                    ]
                    i += 8
                    producer.flush()
                    with self.lock:
                        self.acks.extend(f.result() for f in futures)
        except BaseException as exc:
            self.errors.append(exc)

    def finish(self) -> list[Ack]:
        self.stop.set()
        for t in self.threads:
            t.join(120)
        assert not any(t.is_alive() for t in self.threads)
        assert not self.errors, self.errors
        return self.acks

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        acks = until(lambda: len(self.acks), lambda n: n >= count or bool(self.errors), timeout_s)
        assert not self.errors, self.errors
        assert acks >= count, f"only {acks} acks after {timeout_s} s"
