"""Operations and job headers as hostile bytes see them: every malformed one named, none taken."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.core.messages import Tx
from relay.queue.jobs import PRIORITY_DEFAULT, job_headers, job_of
from relay.queue.ops import (
    ACK,
    Claim,
    Configure,
    OpError,
    Settings,
    Settle,
    SettleItem,
    Tick,
    decode,
    encode,
    parse_queue_stream,
    queue_stream,
)


@pytest.mark.parametrize(
    "op",
    [
        Claim("worker-1", 10, 30_000, 123, 1_800_000_000_000),
        Settle("worker-1", (SettleItem(5, 1, ACK), SettleItem(6, 2, "nak", 500)), 7),
        Tick(9),
        Configure(Settings(1000, 3, True, False, 77), 11),
    ],
)
def test_an_operation_comes_back_as_it_went(op: object) -> None:
    assert decode(encode(op)) == op  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ([1, "claim", "m", 0, 30_000, 1, 1], "count"),
        ([1, "claim", "m", 5, 10, 1, 1], "lease_ms"),
        ([1, "claim", "", 5, 30_000, 1, 1], "member"),
        ([1, "claim", "m", 5, 30_000, -1, 1], "upto"),
        ([1, "settle", "m", [], 1], "items"),
        ([1, "settle", "m", [[1, 1, "burn", 0]], 1], "action"),
        ([1, "settle", "m", [[1, 1, "ack"]], 1], "settlement"),
        ([1, "configure", 1000, 3, 1, False, 0, 1], "booleans"),
        ([2, "tick", 1], "version"),
        ([1, "tick", True, 0, 0], "wall_ms"),
        ([1, "launch"], "unknown"),
    ],
)
def test_a_malformed_operation_is_named(raw: list[object], names: str) -> None:
    with pytest.raises(OpError, match=names):
        decode(msgpack.packb(raw))


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_op_error(payload: bytes) -> None:
    with contextlib.suppress(OpError):
        decode(payload)


def test_headers_that_do_not_parse_count_as_absent_and_mark_the_job() -> None:
    tx = Tx(5, 0, 1, 1, "", 1, b"x", b"k", (("relay-priority", b"300"),))
    job = job_of(tx)
    assert (job.priority, job.malformed, job.key) == (PRIORITY_DEFAULT, True, b"k")
    tx = Tx(5, 0, 1, 1, "", 1, b"x", None, job_headers(3, 1_800_000_000_000))
    assert (job_of(tx).priority, job_of(tx).not_before, job_of(tx).malformed) == (
        3,
        1_800_000_000_000,
        False,
    )
    with pytest.raises(ValueError, match="priority"):
        job_headers(256, None)


def test_control_stream_names() -> None:
    assert queue_stream("orders.eu", "billing") == "orders.eu.__queue.billing"
    assert parse_queue_stream("orders.eu.__queue.billing") == ("orders.eu", "billing")
    assert parse_queue_stream("orders.eu") is None
    with pytest.raises(ValueError, match="group name"):
        queue_stream("orders", "a.b")
