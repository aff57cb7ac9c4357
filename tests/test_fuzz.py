"""Fuzzing every codec: mesh frames, client requests, replies a client reads, admin requests.

Each property mutates well-formed frames (bytes flipped, cut, inserted, spliced) or draws raw
garbage, and the decoder must either decode it or refuse it with its one documented error;
never any other exception. The live run against real nodes is in ``test_fuzz_live.py``."""

from __future__ import annotations

import contextlib

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mesh_frames import encode
from test_wire import messages, txs

from relay.core.events import Acked, PublishResults, ReadResult, Rejected
from relay.core.node import NodeCore
from relay.core.params import CoreConfig, CoreParams
from relay.core.routing import Subscription
from relay.errors import ProtocolError
from relay.runtime.faults import FaultHooks, admin_reply
from relay.wire import client, mesh, replies

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw: st.DrawFn, frames: st.SearchStrategy[bytes]) -> bytes:
    """A well-formed frame with a few random edits."""
    data = bytearray(draw(frames))
    for _ in range(draw(st.integers(1, 4))):
        edit = draw(st.sampled_from(["flip", "cut", "insert", "splice"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if edit == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif edit == "cut":
            del data[at:]
        elif edit == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif edit == "splice" and data:
            data[at : at + draw(st.integers(1, 16))] = draw(st.binary(max_size=16))
    return bytes(data)


mesh_frames = messages.map(lambda m: encode(m)[1])
items = st.lists(
    st.tuples(
        st.integers(0, 2**63),
        st.binary(max_size=30),
        st.none() | st.binary(max_size=5),
        st.lists(st.tuples(st.text(min_size=1, max_size=5), st.binary(max_size=5)), max_size=2),
    ).map(list),
    min_size=1,
    max_size=4,
)
requests = st.one_of(
    st.builds(
        client.publish_request,
        st.integers(0, 2**32),
        st.text(max_size=12),
        st.text(max_size=8),
        items,
    ),
    st.builds(
        client.fetch_request,
        st.integers(0, 2**32),
        st.text(max_size=12),
        st.integers(0, 2**63),
        st.integers(0, 5000),
        st.integers(0, 60_000),
        st.one_of(st.none(), st.integers(-(2**62), 2**62 - 1)),
    ),
    st.builds(
        client.span_request,
        st.integers(0, 2**32),
        st.text(max_size=12),
        st.integers(0, 2**63),
        st.integers(0, 2**63),
        st.integers(0, 10_000),
        st.integers(1, 64),
    ),
    st.builds(client.status_request, st.integers(0, 2**32)),
)
reply_frames = st.one_of(
    st.builds(
        replies.encode_acks,
        st.integers(0, 2**32),
        st.lists(
            st.builds(Acked, st.integers(1, 2**63), st.binary(min_size=32, max_size=32))
            | st.builds(Rejected, st.sampled_from(["timeout", "conflict"]), st.text(max_size=10)),
            min_size=1,
            max_size=3,
        ).map(lambda r: PublishResults(tuple(r))),
    ),
    st.lists(txs, max_size=3).flatmap(
        lambda rows: st.builds(
            replies.encode_txs,
            st.integers(0, 2**32),
            st.builds(
                ReadResult,
                st.text(min_size=1, max_size=8),
                st.just(tuple(rows)),
                st.just(tuple(bytes(32) for _ in rows)),
                st.binary(min_size=32, max_size=32),
                st.integers(0, 2**63),
                st.integers(0, 2**63),
                st.booleans(),
            ),
        )
    ),
)


@FUZZ
@given(mutated(mesh_frames) | st.binary(max_size=300))
def test_mutated_mesh_frames_decode_or_raise_malformed_frame(body: bytes) -> None:
    with contextlib.suppress(mesh.MalformedFrame):
        decoded = mesh.decode(body)
        assert mesh.decode(encode(decoded)[1]) == decoded  # what passes is well-formed


@FUZZ
@given(mutated(requests) | st.binary(max_size=300))
def test_mutated_client_requests_decode_or_raise_bad_request(body: bytes) -> None:
    with contextlib.suppress(client.BadRequest):
        client.decode_request(body)


@FUZZ
@given(mutated(reply_frames) | st.binary(max_size=300))
def test_mutated_replies_decode_or_raise_protocol_error(body: bytes) -> None:
    """What a client reads from a node that may be broken or hostile."""
    with contextlib.suppress(ProtocolError):
        replies.decode_reply(body)


admin_requests = st.tuples(
    st.sampled_from(["set", "clear", "tamper", "status", "other"]),
    st.none()
    | st.dictionaries(
        st.sampled_from(["loss_in", "delay_ms", "clock_offset_ms", "block_from", "stream", "seq"]),
        st.integers(-(2**63), 2**64 - 1)
        | st.floats()
        | st.text(max_size=4)
        | st.lists(st.integers(-(2**63), 2**64 - 1), max_size=3),
        max_size=3,
    ),
).map(lambda pair: msgpack.packb(list(pair)))


@FUZZ
@given(mutated(admin_requests) | st.binary(max_size=300))
def test_mutated_admin_requests_always_get_an_answer(body: bytes) -> None:
    core = NodeCore(CoreConfig(1, (Subscription(1, ("*",)),), CoreParams()), epoch=1, floor=0)
    hooks = FaultHooks()
    reply = msgpack.unpackb(admin_reply(body, hooks, core), raw=False)
    assert isinstance(reply, dict) and isinstance(reply["ok"], bool)
    assert -86_400_000 <= hooks.clock_offset_ms <= 86_400_000 and 0 <= hooks.delay_ms <= 60_000
