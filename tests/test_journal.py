"""The producer's journal: real files in a temporary directory, and a real producer process
killed with SIGKILL in the middle of a pipelined run, started again on its journal."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay import Consumer
from relay.client.journal import COMPACT_BYTES_MIN, Entry, Journal, JournalError
from relay.errors import JournalFullError
from relay.runtime.local_cluster import LocalCluster


def entry(msg_id: int, size: int = 10) -> Entry:
    return Entry(msg_id, "orders", bytes(size), b"k" if msg_id % 2 else None, (("h", b"v"),))


def test_what_is_not_acknowledged_survives_a_restart_with_its_id_and_numbering(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "j", "billing")
    for i in range(1, 6):
        journal.add(entry(i))
    journal.sync()
    journal.acked([1, 3, 99])  # an id it never held is ignored
    journal.close()
    again = Journal(tmp_path / "j", None)
    assert again.producer_id == "billing" and again.next_msg_id == 6
    assert list(again.pending) == [2, 4, 5] and again.pending[5] == entry(5)
    again.close()
    with pytest.raises(JournalError, match="belongs to producer 'billing'"):
        Journal(tmp_path / "j", "payroll")


def test_a_torn_tail_ends_the_journal_and_compaction_keeps_the_numbering(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", "p")
    journal.add(entry(1))
    journal.add(entry(2))
    journal.close()
    path = tmp_path / "j" / "journal.log"
    path.write_bytes(path.read_bytes()[:-3])  # the last append cut short by a crash
    torn = Journal(tmp_path / "j", None)
    assert list(torn.pending) == [1] and torn.next_msg_id == 2  # 2 never fully reached disk
    big = COMPACT_BYTES_MIN // 1000 + 10
    for i in range(2, 2 + big):
        torn.add(entry(i, 1000))
    torn.acked(list(range(1, 2 + big)))
    assert path.stat().st_size < 1000  # rewritten: only the header is left
    torn.close()
    compacted = Journal(tmp_path / "j", None)
    assert not compacted.pending and compacted.next_msg_id == 2 + big
    compacted.close()


def test_a_resent_id_replaces_its_entry_and_a_journal_has_one_producer(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j", "p")
    for _ in range(3):
        journal.add(entry(7, 1000))  # the natural retry of a message that timed out
    assert list(journal.pending) == [7] and 1000 < journal.pending_bytes < 1200
    with pytest.raises(JournalError, match="in use by another producer"):
        Journal(tmp_path / "j", "p")
    journal.acked([7])
    assert journal.pending_bytes == 0
    journal.close()
    again = Journal(tmp_path / "j", None)
    assert not again.pending and again.pending_bytes == 0 and again.next_msg_id == 8
    again.close()


def test_a_full_journal_raises_when_asked_to(tmp_path: Path) -> None:
    from relay import Producer

    producer = Producer(
        nodes=["127.0.0.1:1"],
        journal=tmp_path / "j",
        journal_bytes_max=500,
        journal_full="raise",
        batch_max=1000,
    )
    try:
        producer.send("orders", bytes(300))
        with pytest.raises(JournalFullError, match="journal_bytes_max 500"):
            producer.send("orders", bytes(300))
    finally:
        producer.close()
    again = Journal(tmp_path / "j", None)
    assert list(again.pending) == [1]  # nothing was dropped, nothing sent
    again.close()


PRODUCER = """
import sys
from relay import Producer
config, journal, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with Producer(config=config, journal=journal, window=4, batch_max=50) as producer:
    print("recovered", len(producer.recovered), flush=True)
    for i in range(first, last):  # ids from the input's position: a message sent again after
        producer.send("orders", str(i).encode(), msg_id=i + 1)  # a crash is a retry
        print("sent", i, flush=True)
    producer.flush()
    assert not any(f.failed() for f in producer.recovered)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_producer_killed_mid_run_resends_from_its_journal_exactly_once(tmp_path: Path) -> None:
    total = 20_000
    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        script = tmp_path / "producer.py"
        script.write_text(PRODUCER)
        journal = tmp_path / "journal"
        args = [sys.executable, str(script), str(cluster.config_path), str(journal)]
        first = subprocess.Popen([*args, "0", str(total)], stdout=subprocess.PIPE, text=True)
        try:
            assert first.stdout is not None
            sent = -1
            for line in first.stdout:  # kill it once it is well into the run
                if line.startswith("sent"):
                    sent = int(line.split()[1])
                    if sent >= total // 2:
                        break
            os.kill(first.pid, signal.SIGKILL)
            first.wait(10)
            for line in first.stdout:  # what it printed before it died; a line the kill
                if line.startswith("sent") and line.endswith("\n"):  # cut is not counted
                    sent = int(line.split()[1])
        finally:
            if first.poll() is None:
                first.kill()
        assert 0 < sent < total - 1, "the producer was not killed mid-run"
        second = subprocess.run(
            [*args, str(sent + 1), str(total)], capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 0, second.stderr
        resent = int(second.stdout.split()[1])
        assert resent > 0, "a pipelined producer killed mid-run had nothing unacknowledged"
        deadline = time.monotonic() + 30
        payloads: list[bytes] = []
        with Consumer("orders", config=cluster.config_path) as consumer:
            while len(payloads) < total and time.monotonic() < deadline:
                payloads += [t.payload for t in consumer.poll(1.0)]
            payloads += [t.payload for t in consumer.poll(1.0)]  # nothing more may follow
        assert sorted(int(p) for p in payloads) == list(range(total))  # each exactly once


@pytest.mark.slow
def test_a_reused_message_id_is_refused_as_a_conflict_never_answered_with_the_old_seq(
    tmp_path: Path,
) -> None:
    from relay import Producer, RelayError

    with LocalCluster(tmp_path / "c", 3) as cluster:
        cluster.start()
        cluster.wait_serving()
        with Producer(config=cluster.config_path, producer_id="billing") as first:
            old = first.publish("orders", b"invoice 1", key="eu", msg_id=1)
        with Producer(config=cluster.config_path, producer_id="billing", node=2) as restarted:
            with pytest.raises(RelayError) as info:  # message id 1 again, other content
                restarted.publish("orders", b"invoice 2", key="eu", msg_id=1)
            assert restarted.publish("orders", b"invoice 1", key="eu", msg_id=1).seq == old.seq
            assert info.value.code == "conflict" and str(old.seq) in info.value.message  # a retry:
            with pytest.raises(RelayError, match="conflict"):
                restarted.publish("orders", b"invoice 1", key="us", msg_id=1)  # another key
        with Consumer("orders", config=cluster.config_path) as consumer:
            assert [t.payload for t in consumer.poll(2.0)] == [b"invoice 1"]
