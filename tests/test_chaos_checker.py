"""The chaos checker over small hand-written histories, one per kind of violation, the report
it writes (text and a matplotlib PNG), the fault schedule it reads, and the nemesis's crash-all
and corrupt faults (the byte flip on a segment file written by relay's own storage code)."""

from __future__ import annotations

import json
import random
import signal
import struct
import zlib
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from chaos import checker, report, schedule
from chaos.__main__ import main
from chaos.nemesis import Nemesis, flip_byte, sealed_segments
from relay.core.digest import genesis
from relay.core.events import Persist
from relay.core.flake import make_seq
from relay.core.messages import Tx, fold_tx
from relay.storage.inspect import verify
from relay.storage.records import read_frame
from relay.storage.recovery import Window, open_log
from relay.storage.settings import StorageSettings
from relay.storage.store import dir_name
from relay.storage.stream_log import StreamLog

S = "orders.chaos"
T0 = 1_790_000_000_000  # wall ms of the records written to real segment files


def tx(seq: int, msg_id: int, producer: str = "p1") -> list[Any]:
    return [seq, f"d{seq}", producer, msg_id, f"{producer}:{msg_id}"]


def ok(seq: int, msg_id: int, t0: float, t1: float, node: int = 1) -> dict[str, Any]:
    return {
        "stream": S, "producer": "p1", "msg_id": msg_id, "payload": f"p1:{msg_id}", "node": node,
        "t0": t0, "t1": t1, "outcome": "ok", "seq": seq, "digest": f"d{seq}", "acked_by": node,
    }  # fmt: skip


def delivered(consumer: str, seq: int, t: float = 1.0) -> dict[str, Any]:
    return {"consumer": consumer, "stream": S, "node": 1, "t": t, "seq": seq, "digest": f"d{seq}"}


TIMELINE = [tx(10, 1), tx(20, 2), tx(30, 3)]


def history(folder: Path, **files: list[dict[str, Any]]) -> Path:
    """A run folder: the clean history below, with ``files`` replacing whole files."""
    clean: dict[str, list[dict[str, Any]]] = {
        "ops": [ok(10, 1, 0.1, 0.2), ok(20, 2, 1.0, 1.1), ok(30, 3, 2.0, 2.5)],
        "deliveries": [delivered(f"{S}@{c}", s) for c in (1, 2) for s in (10, 20, 30)],
        "states": [{"node": n, "t": 0.0, "state": "serving"} for n in (1, 2, 3)],
        "faults": [],
        "final": [
            *({"stream": S, "node": n, "verified_seq": 30, "digest": "d30"} for n in (1, 2, 3)),
            {"stream": S, "node": 1, "verified_seq": 30, "digest": "d30", "timeline": TIMELINE},
        ],
    }
    clean.update(files)
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in clean.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in lines))
    settings = {"nodes": 3, "duration_s": 4, "faults": ["kill"], "seed": 1, "rate": 3}
    (folder / "run.json").write_text(json.dumps(settings))
    return folder


def failures(folder: Path) -> dict[str, list[str]]:
    return {v.name: v.violations for v in checker.check(folder).verdicts if not v.ok}


def test_a_clean_history_passes_every_check(tmp_path: Path) -> None:
    analysis = checker.check(history(tmp_path))
    assert analysis.ok
    assert analysis.counts["attempted"] == analysis.counts["acknowledged"] == 3
    assert analysis.counts["lost"] == 0
    assert "every invariant held" in checker.render(analysis)


def test_an_acknowledged_tx_missing_from_the_timeline_is_lost(tmp_path: Path) -> None:
    ops = [ok(10, 1, 0.1, 0.2), ok(20, 2, 1.0, 1.1), ok(25, 9, 1.5, 1.6), ok(30, 3, 2.0, 2.5)]
    found = failures(history(tmp_path, ops=ops))
    assert list(found) == ["acknowledged-not-lost"]
    assert "seq 25" in found["acknowledged-not-lost"][0]
    assert checker.check(tmp_path).counts["lost"] == 1


def test_an_acknowledged_seq_holding_another_payload_is_a_violation(tmp_path: Path) -> None:
    final = [
        {"stream": S, "node": n, "verified_seq": 30, "digest": "d30"} for n in (1, 2, 3)
    ] + [{"stream": S, "node": 1, "verified_seq": 30, "digest": "d30",
          "timeline": [tx(10, 1), tx(20, 7), tx(30, 3)]}]  # fmt: skip
    assert "holds" in failures(history(tmp_path, final=final))["acknowledged-not-lost"][0]


def test_a_tx_delivered_twice_to_one_consumer_is_a_violation(tmp_path: Path) -> None:
    deliveries = [delivered(f"{S}@1", s) for s in (10, 20, 20, 30)]
    found = failures(history(tmp_path, deliveries=deliveries))
    assert "twice" in found["no-double-delivery"][0]


def test_a_consumer_that_skipped_or_reordered_breaks_the_one_order(tmp_path: Path) -> None:
    skipped = [delivered(f"{S}@1", s) for s in (10, 30)]
    assert (
        "the timeline has seq 20"
        in failures(history(tmp_path / "a", deliveries=skipped))["one-order"][0]
    )
    reordered = [delivered(f"{S}@1", s) for s in (20, 10, 30)]
    assert "one-order" in failures(history(tmp_path / "b", deliveries=reordered))
    stopped = [delivered(f"{S}@1", 10), {"consumer": f"{S}@1", "stream": S, "t": 2, "error": "x"}]
    assert "stopped" in failures(history(tmp_path / "c", deliveries=stopped))["one-order"][0]


def test_replicas_ending_at_different_digests_disagree(tmp_path: Path) -> None:
    final = [
        {"stream": S, "node": 1, "verified_seq": 30, "digest": "d30"},
        {"stream": S, "node": 2, "verified_seq": 30, "digest": "other"},
        {"stream": S, "node": 1, "verified_seq": 30, "digest": "d30", "timeline": TIMELINE},
    ]
    assert "disagree" in failures(history(tmp_path, final=final))["replicas-agree"][0]


def test_an_ack_from_a_node_seen_fenced_throughout_the_request_is_a_violation(
    tmp_path: Path,
) -> None:
    states = [
        {"node": 2, "asked": 0.0, "t": 0.0, "state": "serving"},
        {"node": 2, "asked": 0.89, "t": 0.9, "state": "fenced"},
        {"node": 2, "asked": 2.0, "t": 2.01, "state": "fenced"},
        {"node": 2, "asked": 2.94, "t": 2.95, "state": "fenced"},
        {"node": 2, "asked": 3.0, "t": 3.01, "state": "serving"},
        {"node": 2, "asked": 4.0, "t": 4.01, "state": "fenced"},
    ]
    ops = [
        ok(10, 1, 0.1, 0.2, node=2),  # before the fence
        ok(20, 2, 1.0, 1.1, node=2),  # inside it: a violation
        ok(30, 3, 2.9, 3.1, node=2),  # answered after the last fenced sighting: not provable
        ok(40, 4, 4.05, 4.2, node=2),  # one sighting only, before the request: not provable
    ]
    timeline = [*TIMELINE, tx(40, 4)]
    final = [{"stream": S, "node": 1, "verified_seq": 40, "digest": "d40", "timeline": timeline}]
    deliveries = [delivered(f"{S}@1", s) for s in (10, 20, 30, 40)]
    found = failures(history(tmp_path, ops=ops, states=states, final=final, deliveries=deliveries))
    assert list(found) == ["no-ack-while-fenced"]
    assert len(found["no-ack-while-fenced"]) == 1 and "seq 20" in found["no-ack-while-fenced"][0]


def test_a_timed_out_publish_in_the_timeline_twice_is_a_violation(tmp_path: Path) -> None:
    timeline = [tx(10, 1), tx(20, 2), tx(25, 2), tx(30, 3)]
    unknown = {**ok(0, 2, 1.0, 11.0), "outcome": "unknown", "error": "timeout"}
    del unknown["seq"]
    ops = [ok(10, 1, 0.1, 0.2), unknown, ok(30, 3, 2.0, 2.5)]
    final = [{"stream": S, "node": 1, "verified_seq": 30, "digest": "d30", "timeline": timeline}]
    deliveries = [delivered(f"{S}@1", s) for s in (10, 20, 25, 30)]
    found = failures(history(tmp_path, ops=ops, final=final, deliveries=deliveries))
    assert list(found) == ["unknown-at-most-once"]
    assert checker.check(tmp_path).counts["unknown"] == 1


def test_each_fault_gets_its_worst_latency_and_longest_gap(tmp_path: Path) -> None:
    fault = {"kind": "kill", "start_s": 1.0, "end_s": 2.0, "nodes": [2], "detail": {}}
    faults = [{"event": "start", "t": 1.0, **fault}, {"event": "end", "t": 2.0, **fault}]
    ops = [ok(10, 1, 0.1, 0.2), ok(20, 2, 0.9, 1.8), ok(30, 3, 2.5, 2.6)]
    analysis = checker.check(history(tmp_path, ops=ops, faults=faults))
    (impact,) = analysis.impacts
    assert impact.worst_latency_s == pytest.approx(0.9)
    assert impact.longest_gap_s == pytest.approx(1.6)  # no ack from 0.2 s to 1.8 s


def png_chunks(data: bytes) -> dict[bytes, list[bytes]]:
    """The chunks of a PNG file by type, each checked against its CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks: dict[bytes, list[bytes]] = {}
    at = 8
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        body = data[at + 8 : at + 8 + size]
        (crc,) = struct.unpack(">I", data[at + 8 + size : at + 12 + size])
        assert crc == zlib.crc32(kind + body)
        chunks.setdefault(kind, []).append(body)
        at += 12 + size
    kinds = list(chunks)
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND"
    return chunks


def test_the_report_writes_text_and_a_png_drawn_by_matplotlib(tmp_path: Path) -> None:
    folder = history(tmp_path)
    text = report.write(folder, checker.check(folder))
    assert "3 nodes" in text and (folder / "report.txt").read_text() == text
    chunks = png_chunks((folder / "report.png").read_bytes())
    width, height = struct.unpack(">II", chunks[b"IHDR"][0][:8])
    assert (width, height) == (1100, 650)
    assert any(t.startswith(b"Software\0Matplotlib") for t in chunks.get(b"tEXt", []))
    assert len(b"".join(chunks[b"IDAT"])) > 10_000  # two plots and a legend, not a blank page


def test_the_picture_names_the_run_its_units_and_every_fault_kind(tmp_path: Path) -> None:
    def fault(kind: str, start: float, end: float | None) -> list[dict[str, Any]]:
        f = {"kind": kind, "start_s": start, "end_s": end or start + 1, "nodes": [1], "detail": {}}
        events = [{"event": "start", "t": start + 0.1, **f}]
        return events + ([{"event": "end", "t": end + 0.1, **f}] if end else [])

    faults = fault("kill", 0.5, 1.0) + fault("corrupt", 1.5, 2.0) + fault("crash-all", 3.0, None)
    folder = history(tmp_path, faults=faults)
    assert report.fault_windows(folder, 5.0) == [
        ("kill", 0.6, 1.1, "1"),
        ("corrupt", 1.6, 2.1, "1"),
        ("crash-all", 3.1, 5.0, "1"),  # never ended: shaded to the end
    ]
    settings = json.loads((folder / "run.json").read_text())  # faults ["kill"]
    fig = report.figure(folder, settings)
    assert fig.get_suptitle().startswith("chaos run: 3 nodes, 4 s, faults kill, seed 1")
    top, bottom = fig.axes
    assert (top.get_ylabel(), bottom.get_ylabel()) == ("acks/s", "latency (s, log scale)")
    assert bottom.get_xlabel() == "time since the run started (m:ss)"
    assert [t.get_text() for t in bottom.get_legend().get_texts()] == ["p99 (max 0.50 s)", "p50"]
    assert bottom.get_yscale() == "log"
    streams = [t.get_text() for t in top.get_legend().get_texts()]
    assert streams == sorted({op["stream"] for op in checker.rows(folder, "ops")})
    labels = {t.get_text() for t in top.texts}  # each band names the nodes it hit
    assert labels == {"kill 1", "corrupt 1", "crash-all 1"}
    (kinds,) = fig.legends
    assert [t.get_text() for t in kinds.get_texts()] == ["kill", "crash-all", "corrupt"]
    assert set(report.COLORS) == set(schedule.KINDS)  # every kind a run may draw has a colour


def test_the_check_command_exits_non_zero_on_a_violation(tmp_path: Path) -> None:
    """`python -m chaos check DIR`, run in this process by click's runner."""
    clean = history(tmp_path / "clean")
    broken = history(tmp_path / "broken", deliveries=[delivered(f"{S}@1", 10)] * 2)
    passed = CliRunner().invoke(main, ["check", str(clean)])
    assert passed.exit_code == 0, passed.output
    result = CliRunner().invoke(main, ["check", str(broken)])
    assert result.exit_code == 1 and "FAIL no-double-delivery" in result.output


@pytest.mark.parametrize("nodes", [3, 5])
@pytest.mark.parametrize("seed", range(20))
def test_schedules_are_replayable_and_keep_a_majority_whole(nodes: int, seed: int) -> None:
    """Every kind but crash-all leaves a majority whole; crash-all takes every node."""
    faults = schedule.draw(seed, nodes, 120, schedule.KINDS)
    assert faults == schedule.draw(seed, nodes, 120, schedule.KINDS)
    assert {f.kind for f in faults} == set(schedule.KINDS)  # each kind comes up first
    minority = (nodes - 1) // 2
    everyone = tuple(range(1, nodes + 1))
    for f, after in pairwise(faults):
        assert f.end_s < after.start_s  # one at a time
    for f in faults:
        assert 3 <= f.start_s < f.end_s <= 115
        assert set(f.nodes) <= set(everyone)
        if f.kind in schedule.WHOLE_CLUSTER:
            assert f.kind == "crash-all" and f.nodes == everyone and not f.detail
            continue
        if f.kind in ("kill", "pause", "corrupt") or f.detail.get("shape") == "split":
            assert 1 <= len(f.nodes) <= minority
        if f.kind == "corrupt":
            assert len(f.nodes) == 1 and 1 <= f.detail["xor"] <= 255


@pytest.mark.parametrize("nodes", [3, 5])
def test_crash_all_and_corrupt_are_drawn_and_opt_in(nodes: int) -> None:
    for seed in range(10):
        faults = schedule.draw(seed, nodes, 45, ("crash-all", "corrupt"))
        assert [f.kind for f in faults[:2]] == ["crash-all", "corrupt"]
        for f in faults:
            everyone = f.nodes == tuple(range(1, nodes + 1))
            assert everyone if f.kind == "crash-all" else len(f.nodes) == 1
    default = schedule.parse_kinds("kill,pause,partition,loss,clock")  # chaos run's default
    assert not set(default) & {"crash-all", "corrupt"}
    assert schedule.parse_kinds("crash-all,corrupt") == ("crash-all", "corrupt")


def test_unknown_fault_kinds_are_refused() -> None:
    assert schedule.parse_kinds("kill, loss") == ("kill", "loss")
    with pytest.raises(ValueError, match="unknown fault kind 'fire'"):
        schedule.parse_kinds("kill,fire")


def write_log(streams: Path, stream: str, count: int) -> Path:
    """``count`` records of a stream's log as a node writes them (20 per write, each verifying
    the write before it), rolling at 4 KiB: sealed segments and an open one."""
    directory = streams / dir_name(stream)
    directory.mkdir(parents=True)
    log = StreamLog(directory, stream, StorageSettings(segment_bytes=4096), [], 0)
    base_seq, base_digest = 0, genesis(stream)
    for i in range(0, count, 20):
        txs = [Tx(make_seq(T0 + j, 1), 0, 1, 7, "p", j + 1, b"x%d" % j) for j in range(i, i + 20)]
        digests, digest = [], base_digest
        for tx in txs:
            digest = fold_tx(digest, tx)
            digests.append(digest)
        log.apply(
            Persist(stream, 0, base_seq, base_digest, False, tuple(txs), tuple(digests), base_seq),
            T0,
        )
        base_seq, base_digest = txs[-1].seq, digests[-1]
    log.close()
    return directory


def test_a_flipped_byte_in_a_sealed_segment_is_found_by_verify_and_recovery(
    tmp_path: Path,
) -> None:
    streams = tmp_path / "streams"
    directory = write_log(streams, "orders.chaos", 200)
    sealed = sealed_segments(streams)
    assert len(sealed) >= 2 and all(p.suffix == ".seg" for p in sealed)
    assert len(list(directory.glob("*.open"))) == 1  # the active one is never a candidate
    assert verify(directory, "orders.chaos") == (200, None)
    path = sealed[0]
    clean = path.read_bytes()
    header = read_frame(clean, 0)
    assert header is not None
    for seed in range(20):  # wherever the byte lands in the records, the log finds it
        path.write_bytes(clean)
        offset = flip_byte(path, random.Random(seed), 0x5A)
        flipped = path.read_bytes()
        assert header[2] <= offset < len(clean)  # past the segment header
        assert flipped[offset] == clean[offset] ^ 0x5A
        assert flipped[:offset] + flipped[offset + 1 :] == clean[:offset] + clean[offset + 1 :]
        checked, problem = verify(directory, "orders.chaos")
        assert checked < 200 and problem is not None
        assert path.name in problem and "offset" in problem
    window = Window(keep=1000, keep_bytes=1 << 30, dedup_ms=120_000, dedup_keys_max=1000)
    recovered = open_log(directory, "orders.chaos", StorageSettings(), window, T0)
    (problem,) = recovered.problems
    assert path.name in problem and "cut here" in problem
    assert len(recovered.restored.txs) < 200  # the rest is for the peers to send again
    assert path.name in {p.name for p in (directory / "quarantine").rglob("*")}
    assert sealed_segments(streams) == []  # the cut segment is open again, the rest aside
    recovered.log.close()


class FakeCluster:
    """What the nemesis calls on a cluster, recorded; each node's data under ``data``."""

    def __init__(self, data: Path, nodes: int) -> None:
        self.calls: list[tuple[str, int | None]] = []
        self.config = SimpleNamespace(
            nodes=[SimpleNamespace(id=n) for n in range(1, nodes + 1)],
            data_dir=lambda n: data / f"node-{n}",
        )

    def send_signal(self, node_id: int, sig: int) -> None:
        self.calls.append((signal.Signals(sig).name, node_id))

    def stop(self, node_id: int, sig: int = signal.SIGTERM) -> None:
        self.calls.append(("stop", node_id))

    def start(self, node_id: int | None = None) -> None:
        self.calls.append(("start", node_id))


def play(cluster: FakeCluster, faults: list[schedule.Fault]) -> list[dict[str, Any]]:
    """Every fault's start and end, at once (the clock is past them all)."""
    events: list[dict[str, Any]] = []
    nemesis = Nemesis(cluster, faults, lambda: 1000.0, events.append)  # type: ignore[arg-type]
    nemesis.start()
    nemesis.join()
    assert not nemesis.errors and not nemesis.active
    return events


def test_crash_all_kills_every_node_before_waiting_for_any_then_starts_them(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster(tmp_path, 3)
    events = play(cluster, [schedule.Fault("crash-all", 5.0, 8.0, (1, 2, 3))])
    kills = [("SIGKILL", n) for n in (1, 2, 3)]
    waits = [("stop", n) for n in (1, 2, 3)]
    assert cluster.calls == [*kills, *waits, *(("start", n) for n in (1, 2, 3))]
    assert [e["event"] for e in events] == ["start", "end"]


def test_corrupt_flips_a_byte_chosen_by_the_fault_alone_and_logs_where(tmp_path: Path) -> None:
    for copy in ("a", "b"):
        write_log(tmp_path / copy / "node-2" / "streams", "orders.chaos", 200)
        write_log(tmp_path / copy / "node-2" / "streams", "events.chaos", 100)
    fault = schedule.Fault("corrupt", 12.5, 16.0, (2,), {"xor": 7})
    details = []
    for copy in ("a", "b"):
        cluster = FakeCluster(tmp_path / copy, 3)
        start, end = play(cluster, [fault])
        assert cluster.calls == [("stop", 2), ("start", 2)]  # killed, flipped, started
        assert start["detail"] == end["detail"]
        details.append(start["detail"])
    assert details[0] == details[1]  # the same fault, the same byte
    detail = details[0]
    streams = tmp_path / "a" / "node-2" / "streams"
    assert detail["xor"] == 7 and detail["sealed"] == len(sealed_segments(streams)) >= 2
    flipped = streams / detail["file"]
    stream = next(s for s in ("orders.chaos", "events.chaos") if dir_name(s) == flipped.parent.name)
    _, problem = verify(flipped.parent, stream)
    assert problem is not None and flipped.name in problem
    nothing = FakeCluster(tmp_path / "empty", 3)  # no sealed segment yet: a plain kill
    start, _ = play(nothing, [fault])
    assert start["detail"] == {"xor": 7, "sealed": 0}
    assert nothing.calls == [("stop", 2), ("start", 2)]


def test_a_run_refuses_a_history_folder_that_is_not_empty(tmp_path: Path) -> None:
    """An earlier run's node logs in --out would be restored and its transactions checked as
    this run's (a reused folder showed duplicates and a changed order that never happened)."""
    (tmp_path / "run.json").write_text("{}")
    result = CliRunner().invoke(main, ["run", "--duration", "20", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "is not empty" in result.output


def queue_run(tmp_path: Path, steps: list[dict[str, Any]], dead: list[int], acked: int) -> Path:
    """A queue run's files: two jobs (seqs 10 and 20), the workers' steps, the final counts."""
    timeline = [[10, "d1", "p", 1, "a"], [20, "d2", "p", 2, "b"]]
    final = {"stream": "jobs.chaos", "node": 1, "verified_seq": 20, "digest": "d2"}
    folder = history(tmp_path, final=[final, {**final, "timeline": timeline}], workers=steps)
    settings = {"seed": 1, "workload": "queue", "streams": ["jobs.chaos"]}
    (folder / "run.json").write_text(json.dumps(settings))
    info = {"acked": acked, "dead": len(dead), "jobs_through": 20}
    rows = [{"seq": 1, "headers": {"relay-dead-seq": str(s)}} for s in dead]
    queue_final = {"infos": {"1": info, "2": info}, "dead": rows, "lease_ms": 2000}
    (folder / "queue_final.json").write_text(json.dumps(queue_final))
    return folder


def claim(member: str, t0: float, t1: float, *jobs: tuple[int, int]) -> dict[str, Any]:
    return {"member": member, "event": "claim", "t0": t0, "t1": t1, "jobs": [list(j) for j in jobs]}


def settle(
    member: str, t0: float, seq: int, delivery: int, action: str, result: str
) -> dict[str, Any]:
    row = {"member": member, "event": "settle", "seq": seq, "delivery": delivery}
    return {**row, "action": action, "t0": t0, "t1": t0 + 0.01, "result": result}


def queue_verdicts(folder: Path) -> dict[str, list[str]]:
    analysis = checker.check(folder)
    return {v.name: v.violations for v in analysis.verdicts if v.name.startswith("queue")}


def test_a_clean_queue_history_passes(tmp_path: Path) -> None:
    steps = [
        claim("w1", 0.0, 0.1, (10, 1), (20, 1)),
        settle("w1", 0.2, 10, 1, "ack", "settled"),
        settle("w1", 0.3, 20, 1, "nak", "settled"),
        claim("w2", 0.4, 0.5, (20, 2)),  # after the nak was sent
        {"member": "w2", "event": "kill", "t": 0.6},
        claim("w3", 2.5, 2.6, (20, 3)),  # after w2's lease ran out
        settle("w3", 2.7, 20, 3, "reject", "settled"),
    ]
    verdicts = queue_verdicts(queue_run(tmp_path, steps, dead=[20], acked=1))
    assert verdicts == {"queue-one-holder": [], "queue-acked-once": [], "queue-none-lost": []}


def test_a_job_handed_out_while_its_lease_runs_is_a_violation(tmp_path: Path) -> None:
    steps = [claim("w1", 0.0, 0.1, (10, 1)), claim("w2", 1.0, 1.1, (10, 2))]
    [problem] = queue_verdicts(queue_run(tmp_path, steps, [], 0))["queue-one-holder"]
    assert "delivery 2 reached w2" in problem


def test_a_job_acked_twice_or_acked_and_dead_is_a_violation(tmp_path: Path) -> None:
    steps = [
        claim("w1", 0.0, 0.1, (10, 1)),
        settle("w1", 0.2, 10, 1, "ack", "settled"),
        claim("w2", 0.3, 0.4, (10, 2)),
        settle("w2", 0.5, 10, 2, "ack", "settled"),
    ]
    problems = queue_verdicts(queue_run(tmp_path, steps, [10], 2))["queue-acked-once"]
    assert any("acknowledged 2 times" in p for p in problems)
    assert any("acknowledged and is in the dead-letter stream" in p for p in problems)


def test_a_job_neither_acked_nor_dead_is_lost(tmp_path: Path) -> None:
    steps = [claim("w1", 0.0, 0.1, (10, 1)), settle("w1", 0.2, 10, 1, "ack", "settled")]
    [problem] = queue_verdicts(queue_run(tmp_path, steps, [], 1))["queue-none-lost"]
    assert "acked 1 + dead 0 != 2 jobs" in problem
