"""The compacted workload's checker on small made-up histories: a superseded ack is no loss, a
lost newest update is; a consumer that skipped a key's newest update, or read out of order,
fails one-order; replicas whose tables differ fail tables-agree."""

from __future__ import annotations

from chaos import compacted_checker as kv

TIMELINE = {
    "kv": {
        "timeline": [
            [5, "d5", "p", 5, "v5", "a"],
            [7, "d7", "p", 7, "", "b"],  # a tombstone: b is deleted
            [9, "d9", "p", 9, "v9", "c"],
        ]
    }
}


def op(seq: int, key: str, payload: str) -> dict[str, object]:
    return {"stream": "kv", "outcome": "ok", "seq": seq, "key": key, "payload": payload}


def test_an_update_superseded_by_a_newer_one_of_its_key_is_not_lost() -> None:
    v = kv.acknowledged_not_lost([op(1, "a", "v1"), op(5, "a", "v5"), op(3, "b", "v3")], TIMELINE)
    assert v.ok and v.checked == 3
    v = kv.acknowledged_not_lost([op(11, "c", "v11")], TIMELINE)
    assert not v.ok  # the newest update of c is gone
    v = kv.acknowledged_not_lost([op(9, "c", "other")], TIMELINE)
    assert not v.ok


def delivery(consumer: str, seq: int, key: str, digest: str = "") -> dict[str, object]:
    return {
        "consumer": consumer,
        "stream": "kv",
        "seq": seq,
        "key": key,
        "digest": digest or f"d{seq}",
    }


def test_a_consumer_must_get_the_newest_of_each_key_it_read_past_in_order() -> None:
    whole = [
        delivery("x", 1, "a", "d1"),
        delivery("x", 5, "a"),
        delivery("x", 7, "b"),
        delivery("x", 9, "c"),
    ]
    assert kv.one_order(whole, TIMELINE).ok
    assert not kv.one_order([delivery("x", 1, "a", "d1"), delivery("x", 9, "c")], TIMELINE).ok
    assert not kv.one_order([delivery("x", 9, "c"), delivery("x", 5, "a")], TIMELINE).ok
    assert not kv.one_order([delivery("x", 5, "a", "forged")], TIMELINE).ok


def test_every_replicas_table_must_be_the_timelines() -> None:
    assert kv.tables_agree({"kv": {"1": {"a": 5, "c": 9}, "2": {"a": 5, "c": 9}}}, TIMELINE).ok
    assert not kv.tables_agree({"kv": {"1": {"a": 5, "c": 9, "b": 7}}}, TIMELINE).ok
    assert not kv.tables_agree({"kv": {"1": {"a": 1, "c": 9}}}, TIMELINE).ok
