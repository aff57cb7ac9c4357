"""The chaos checker over small hand-written histories, one per kind of violation, and the
fault schedule it reads."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from chaos import checker, report, schedule

S = "orders.chaos"


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


def test_the_report_writes_text_and_a_png(tmp_path: Path) -> None:
    folder = history(tmp_path)
    text = report.write(folder, checker.check(folder))
    assert "3 nodes" in text and (folder / "report.txt").read_text() == text
    assert (folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_check_command_exits_non_zero_on_a_violation(tmp_path: Path) -> None:
    clean = history(tmp_path / "clean")
    broken = history(tmp_path / "broken", deliveries=[delivered(f"{S}@1", 10)] * 2)
    run = [sys.executable, "-m", "chaos", "check"]
    assert subprocess.run([*run, str(clean)], capture_output=True).returncode == 0
    result = subprocess.run([*run, str(broken)], capture_output=True, text=True)
    assert result.returncode == 1 and "FAIL no-double-delivery" in result.stdout


@pytest.mark.parametrize("nodes", [3, 5])
@pytest.mark.parametrize("seed", range(20))
def test_schedules_are_replayable_and_keep_a_majority_whole(nodes: int, seed: int) -> None:
    faults = schedule.draw(seed, nodes, 120, schedule.KINDS)
    assert faults == schedule.draw(seed, nodes, 120, schedule.KINDS)
    assert {f.kind for f in faults} == set(schedule.KINDS)  # each kind comes up first
    minority = (nodes - 1) // 2
    for f, after in pairwise(faults):
        assert f.end_s < after.start_s  # one at a time
    for f in faults:
        assert 3 <= f.start_s < f.end_s <= 115
        if f.kind in ("kill", "pause") or f.detail.get("shape") == "split":
            assert 1 <= len(f.nodes) <= minority
        assert set(f.nodes) <= set(range(1, nodes + 1))


def test_unknown_fault_kinds_are_refused() -> None:
    assert schedule.parse_kinds("kill, loss") == ("kill", "loss")
    with pytest.raises(ValueError, match="unknown fault kind 'fire'"):
        schedule.parse_kinds("kill,fire")
