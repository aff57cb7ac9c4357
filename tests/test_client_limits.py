"""Per-connection admission of requests: counts, bytes, reuse of a request id, release."""

from __future__ import annotations

from relay.config.client_bounds import ClientBounds
from relay.runtime.client_limits import ClientLimits


def test_a_connection_gets_its_share_and_no_more_until_answers_leave() -> None:
    limits = ClientLimits(ClientBounds(1 << 20, 2, 1 << 20))
    assert limits.admit(b"a", 1, 10, 0) is None
    assert limits.admit(b"a", 2, 10, 0) is None
    refused = limits.admit(b"a", 3, 10, 0)
    assert refused is not None and refused.code == "busy"
    assert limits.admit(b"b", 1, 10, 0) is None  # another connection has a share of its own
    limits.done(b"a", 1)
    assert limits.admit(b"a", 3, 10, 0) is None
    for client, req_id in ((b"a", 2), (b"a", 3), (b"b", 1), (b"b", 1)):  # a second done: no-op
        limits.done(client, req_id)
    assert limits.open == {} and limits.held == {}


def test_bytes_in_flight_and_a_reused_request_id_are_refused() -> None:
    limits = ClientLimits(ClientBounds(1 << 20, 100, 1 << 20))
    assert limits.admit(b"a", 1, 1 << 19, 0) is None
    too_much = limits.admit(b"a", 2, (1 << 19) + 1, 0)
    assert too_much is not None and too_much.code == "busy"
    reused = limits.admit(b"a", 1, 1, 0)
    assert reused is not None and reused.code == "bad_request"
    assert limits.held == {b"a": [1, 1 << 19]}
