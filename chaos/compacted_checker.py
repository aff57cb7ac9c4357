"""The invariants of a chaos run's compacted workload (``--workload compacted``), where the
final timeline read from a replica keeps only the newest transaction of each key in its
compacted range:

- acknowledged-not-lost: each acknowledged update is in the final timeline with its payload, or
  a later update of its key is (it was superseded; a compacted range keeps only the newest).
- one-order: each consumer's deliveries ascend, and each seq the final timeline holds has the
  same digest there; for every key, the last update a consumer received is the newest the
  timeline holds up to where that consumer read (nothing newer was skipped).
- tables-agree: every replica's table (the newest transaction of each live key, read as a
  consumer reads it from the earliest) is the same, and is the final timeline's.
"""

from __future__ import annotations

from typing import Any

from chaos.checker import Verdict, by_consumer


def acknowledged_not_lost(ops: list[dict[str, Any]], timelines: dict[str, Any]) -> Verdict:
    v = Verdict("acknowledged-not-lost")
    for stream, t in timelines.items():
        rows = {row[0]: row for row in t["timeline"]}
        newest = _newest(t["timeline"])
        for op in ops:
            if op["stream"] != stream or op["outcome"] != "ok":
                continue
            v.checked += 1
            row = rows.get(op["seq"])
            if row is not None and row[4] != op["payload"]:
                v.fail(f"{stream} seq {op['seq']} holds {row[4]!r}, acked {op['payload']!r}")
            elif row is None and newest.get(op["key"], (0,))[0] <= op["seq"]:
                v.fail(
                    f"{stream} seq {op['seq']} (key {op['key']}) was acknowledged, is gone, "
                    "and no later update of its key is there"
                )
    return v


def one_order(deliveries: list[dict[str, Any]], timelines: dict[str, Any]) -> Verdict:
    v = Verdict("one-order")
    for consumer, got in sorted(by_consumer(deliveries, v).items()):
        v.checked += 1
        timeline = timelines.get(got[0]["stream"], {}).get("timeline", [])
        digests = {row[0]: row[1] for row in timeline}
        last: dict[str, int] = {}
        for before, d in zip([None, *got], got, strict=False):
            if before is not None and d["seq"] <= before["seq"]:
                v.fail(f"{consumer} received seq {d['seq']} after seq {before['seq']}")
                break
            if d["seq"] in digests and digests[d["seq"]] != d["digest"]:
                v.fail(f"{consumer}'s seq {d['seq']} differs from the final timeline's")
                break
            last[d["key"]] = d["seq"]
        read_to = got[-1]["seq"]
        for key, (seq, _) in _newest([r for r in timeline if r[0] <= read_to]).items():
            if last.get(key, 0) < seq:
                v.fail(f"{consumer} missed seq {seq}, the newest of key {key} it read past")
                break
    return v


def tables_agree(
    tables: dict[str, dict[str, dict[str, int]]], timelines: dict[str, Any]
) -> Verdict:
    """``tables``: stream -> node -> key -> the seq of its newest live transaction."""
    v = Verdict("tables-agree")
    for stream, per_node in sorted(tables.items()):
        expected = {
            k: seq
            for k, (seq, payload) in _newest(timelines[stream]["timeline"]).items()
            if payload
        }
        for node, table in sorted(per_node.items()):
            v.checked += 1
            if table != expected:
                wrong = sorted(set(table.items()) ^ set(expected.items()))[:3]
                v.fail(f"{stream}: node {node}'s table differs from the timeline's: {wrong}")
    return v


def _newest(timeline: list[list[Any]]) -> dict[str, tuple[int, str]]:
    """key -> (seq, payload) of its newest row (rows: [seq, digest, producer, msg_id, payload,
    key])."""
    newest: dict[str, tuple[int, str]] = {}
    for row in timeline:
        if len(row) > 5 and row[5] is not None:
            newest[row[5]] = (row[0], row[4])
    return newest
