"""Mesh and client frames: round trips, and garbage refused with MalformedFrame."""

import contextlib
from dataclasses import replace
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mesh_frames import encode

from relay.core.messages import (
    Channel,
    Heartbeat,
    Item,
    OriginReport,
    RepairData,
    RepairRequest,
    Replicate,
    StreamAck,
    SyncData,
    SyncRequest,
    Tx,
)
from relay.core.routing import STREAM_NAME_BYTES_MAX, stream_name_problem
from relay.errors import ProtocolError, RelayError
from relay.queue.ops import SettleItem
from relay.wire import client, mesh, replies

u64 = st.integers(0, 2**63 - 1)
names = st.text(min_size=1, max_size=20)
txs = st.builds(
    lambda prev, step, origin, epoch, pid, mid, payload, key, headers: Tx(
        prev + step, prev, origin, epoch, pid, mid, payload, key, tuple(headers)
    ),
    st.integers(0, 2**62),
    st.integers(1, 2**20),
    st.integers(0, 1023),
    u64,
    st.text(max_size=8),
    u64,
    st.binary(max_size=50),
    st.none() | st.binary(max_size=8),
    st.lists(st.tuples(names, st.binary(max_size=8)), max_size=3),
)
messages = st.one_of(
    st.builds(
        Replicate, names, st.integers(0, 1023), u64, u64, st.lists(txs, max_size=5).map(tuple)
    ),
    st.builds(
        StreamAck,
        names,
        st.integers(0, 1023),
        u64,
        u64,
        u64,
        u64,
        st.binary(min_size=32, max_size=32),
        u64,
        st.lists(
            st.builds(
                OriginReport,
                st.integers(0, 1023),
                u64,
                u64,
                st.booleans(),
                st.booleans(),
                st.booleans(),
                st.booleans(),
                u64,
            ),
            max_size=3,
        ).map(tuple),
        marked_seq=u64,
        marked_digest=st.binary(max_size=32),
        readable_seq=u64,
        promise=u64,
        retreats=u64,
        synced=st.booleans(),
    ),
    st.builds(
        Heartbeat,
        st.integers(0, 1023),
        u64,
        u64,
        st.lists(st.tuples(names, u64), max_size=3).map(tuple),
        st.lists(st.tuples(st.integers(0, 1023), u64), max_size=3).map(tuple),
        st.booleans(),
    ),
    st.builds(RepairRequest, names, st.integers(0, 1023), st.integers(0, 1023), u64, u64, u64),
    st.builds(
        RepairData,
        names,
        st.integers(0, 1023),
        st.integers(0, 1023),
        u64,
        st.lists(txs, max_size=5).map(tuple),
    ),
    st.builds(SyncRequest, names, st.integers(0, 1023), u64),
    st.lists(txs, max_size=4).flatmap(
        lambda rows: st.builds(
            SyncData,
            names,
            st.integers(0, 1023),
            st.integers(0, 1023),
            u64,
            st.binary(min_size=32, max_size=32),
            st.just(tuple(rows)),
            st.just(tuple(bytes(32) for _ in rows)),
            st.lists(
                st.tuples(st.text(max_size=5), u64, u64, st.binary(max_size=32), u64), max_size=3
            ).map(tuple),
        )
    ),
)


def as_sent(message: Any) -> Any:
    """``message`` about a stream whose name is valid: a node sends about no other."""
    if stream_name_problem(getattr(message, "stream", "s")):
        return replace(message, stream="s")
    return message


@given(messages)
def test_mesh_messages_round_trip(message) -> None:
    topic, body = encode(message)
    assert mesh.decode(body) == message
    assert topic.split(b"|")[0] in (b"tx", b"ack", b"hb", b"ae")


@given(st.binary(max_size=200))
def test_garbage_mesh_frames_raise_malformed_frame_only(body: bytes) -> None:
    with contextlib.suppress(mesh.MalformedFrame):
        mesh.decode(body)


V11_REPORT = [1, 1, 1, True, False, False]  # a cut report of version 11 (nothing of waiting)


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb(
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, 3, 4, "p", 4, b"", None]]]
        ),  # a field short
        msgpack.packb(
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, 3, 4, "p", 4, b"", None, [["", b""]]]]]
        ),
        msgpack.packb(
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, 3, 4, "p", 4, b"", "k", []]]]
        ),  # a str key
        msgpack.packb(
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, 3, 4, "p", 4, b"", None, [[1, b""]]]]]
        ),
        msgpack.packb(  # a tx of a negative origin (struct.pack of the digest raised on it)
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, -1, 4, "p", 4, b"", None, []]]]
        ),
        msgpack.packb(  # a tx of an origin past 1023
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, 1024, 4, "p", 4, b"", None, []]]]
        ),
        msgpack.packb(  # a tx whose seq is not above its prev
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 2, 3, 4, "p", 4, b"", None, []]]]
        ),
        msgpack.packb(  # a negative msg id
            [mesh.VERSION, 1, "s", 1, 1, 1, [[2, 1, 3, 4, "p", -4, b"", None, []]]]
        ),
        msgpack.packb([mesh.VERSION, 2, "s", -1, 0, 0, 0, 0, b"", []]),  # a short ack
        msgpack.packb(  # an ack with a negative sender
            [mesh.VERSION, 2, "s", -1, 0, 0, 0, 0, b"", 0, [], 0, 0, b"", 0, 0, True]
        ),
        msgpack.packb(  # an ack with negative retreats
            [mesh.VERSION, 2, "s", 1, 0, 0, 0, 0, b"", 0, [], 0, 0, b"", 0, -1, True]
        ),
        msgpack.packb(  # an ack whose synced flag is not a bool
            [mesh.VERSION, 2, "s", 1, 0, 0, 0, 0, b"", 0, [], 0, 0, b"", 0, 0, 1]
        ),
        msgpack.packb(  # an ack of the fields of version 9 (no retreats, no synced flag)
            [mesh.VERSION, 2, "s", 1, 0, 0, 0, 0, b"", 0, [], 0, 0, b"", 0]
        ),
        msgpack.packb(  # an ack whose report is not a bool where one is asked
            [mesh.VERSION, 2, "s", 1, 0, 0, 0, 0, b"", 0, [[1, 1, 1, 1, 0]], 0, 0, b"", 0, 0, True]
        ),
        msgpack.packb(  # an ack whose report has the fields of version 11
            [mesh.VERSION, 2, "s", 1, 0, 0, 0, 0, b"", 0, [V11_REPORT], 0, 0, b"", 0, 0, True]
        ),
        msgpack.packb([1, 3]),  # another version
        msgpack.packb({"kind": "replicate"}),
        b"\x93\x03\x03\xa2\xff\xfe",  # a string that is not UTF-8
        msgpack.packb(
            [mesh.VERSION, 3, 1, 1, 1, [], [{1: 0, 2: 0}], False, [], []]
        ),  # a map for a pair
        msgpack.packb(
            [mesh.VERSION, 3, *([None] * 4_000_000)]
        ),  # millions of fields: refused by count
    ],
)
def test_wrongly_shaped_mesh_frames_are_refused(body: bytes) -> None:
    with pytest.raises(mesh.MalformedFrame):
        mesh.decode(body)


def test_the_refused_shapes_differ_from_good_frames_only_where_they_say() -> None:
    tx = [2, 1, 3, 4, "p", 4, b"", None, [["h", b""]]]
    assert mesh.decode(msgpack.packb([mesh.VERSION, 1, "s", 1, 1, 1, [tx]]))
    assert mesh.decode(msgpack.packb([mesh.VERSION, 3, 1, 1, 1, [], [[1, 0]], False, [], []]))
    report = [1, 1, 1, True, False, False, True, 0]
    ack = [mesh.VERSION, 2, "s", 1, 0, 0, 0, 0, b"", 0, [report], 0, 0, b"", 0, 0, False]
    assert mesh.decode(msgpack.packb(ack))


@given(st.lists(messages, max_size=12), st.sampled_from(["a", "b"]))
def test_frames_carry_messages_in_order_and_bundle_runs_of_one_stream(
    found: list[object], stream: str
) -> None:
    found = [as_sent(m) for m in found]
    same = [m for m in found if not isinstance(m, Heartbeat)]
    same = [replace(m, stream=stream) for m in same]  # type: ignore[type-var]
    for sent in (found, same):
        frames = mesh.frames(sent)  # type: ignore[arg-type]
        assert [m for frame in frames for m in mesh.decode_frame(frame)] == sent
        if sent is same and same:
            assert len(frames) == -(-len(same) // mesh.BUNDLE_MAX)  # runs of one stream: bundled


def _bundle(bodies: list[bytes]) -> bytes:
    return msgpack.packb([mesh.VERSION, 8, [msgpack.unpackb(b) for b in bodies]])


def test_hostile_bundles_are_refused_whole() -> None:
    ack = encode(StreamAck("s", 1, 1, 1, 1, 1, bytes(32), 1, ()))[1]
    assert mesh.decode_body(_bundle([ack, ack])) == [mesh.decode(ack)] * 2
    for body in (
        _bundle([ack]),  # a bundle of one is not how a node sends
        _bundle([ack] * (mesh.BUNDLE_MAX + 1)),
        _bundle([ack, _bundle([ack, ack])]),  # a bundle inside a bundle
        _bundle([ack, msgpack.packb([mesh.VERSION, 2, "s"])]),  # one bad message spoils all
        msgpack.packb([mesh.VERSION, 8, 7]),
        b"\x93" + bytes([mesh.VERSION, 8]) + b"\xdd\xff\xff\xff\xff",  # claims 4 billion
    ):
        with pytest.raises(mesh.MalformedFrame):
            mesh.decode_body(body)


def test_client_requests_decode_and_bad_ones_keep_their_req_id() -> None:
    rows: list[list[object]] = [[1, b"x", None, []], [2, b"y", b"k", [("h", b"v"), ("h", b"")]]]
    frame = client.decode_request(client.publish_request(5, "s", "p", rows))
    items = (Item(1, b"x"), Item(2, b"y", b"k", (("h", b"v"), ("h", b""))))
    assert frame == client.PublishFrame(5, "s", "p", items)
    for bad in (
        [1, "not bytes", None, []],
        [1, b"x"],  # a version-1 item
        [1, b"x", "k", []],
        [1, b"x", None, [["", b"v"]]],
        [1, b"x", None, [["h", "v"]]],
        [1, b"x", None, {"h": b"v"}],
    ):
        with pytest.raises(client.BadRequest) as info:
            client.decode_request(client.pack("pub", 9, "s", "p", [bad]))
        assert info.value.req_id == 9
    for garbage in (b"\x93\x02\xa2\xff\xfe\x01", msgpack.packb([2, "pub", *([0] * 4_000_000)])):
        with pytest.raises(client.BadRequest):  # bad UTF-8; millions of fields
            client.decode_request(garbage)
    with pytest.raises(client.BadRequest):
        client.decode_request(b"\xc1garbage")


def test_topic_prefixes_cover_the_patterns() -> None:
    prefixes = mesh.topic_prefixes(("orders.*", "payments.eu"))
    assert b"tx|orders." in prefixes and b"ack|payments.eu" in prefixes and b"hb|" in prefixes


def test_a_brief_status_request_asks_for_no_streams() -> None:
    from relay.wire.client import StatusFrame, decode_request, status_request

    assert decode_request(status_request(7)) == StatusFrame(7, False)
    assert decode_request(status_request(8, brief=True)) == StatusFrame(8, True)


def test_fetch_and_span_requests_carry_only_the_fields_a_node_reads() -> None:
    fetch = client.decode_request(client.fetch_request(3, "s", 10, 5, 0, None))
    assert fetch == client.FetchFrame(3, "s", 10, 5, 0)
    by_index = client.decode_request(client.fetch_request(3, "s", 10, 5, 0, -7))
    assert by_index == client.FetchFrame(3, "s", 0, 5, 0, -7)  # the last 7
    span = client.decode_request(client.span_request(4, "s", 0, 99, 10, 2))
    assert span == client.SpanFrame(4, "s", 0, 99, 10, 2)
    with pytest.raises(client.BadRequest, match="from_index: expected an integer") as info:
        client.decode_request(client.pack("fetch", 3, "s", 10, 5, 0, True))
    assert info.value.req_id == 3
    with pytest.raises(client.BadRequest, match="'fetch' with 9 fields"):
        client.decode_request(client.pack("fetch", 3, "s", 10, 5, 0, 1, 2))
    with pytest.raises(client.BadRequest, match="'span' with 9 fields"):
        client.decode_request(client.pack("span", 4, "s", 0, 99, 10, 2, True))
    with pytest.raises(client.BadRequest, match="more than 9 fields"):
        client.decode_request(client.pack("claim", 4, "s", "g", "m", 1, 1000, 0, True))


def test_a_work_group_members_requests_decode_with_every_field_checked() -> None:
    claim = client.decode_request(client.claim_request(5, "jobs", "g", "w1", 10, 30_000, 500))
    assert claim == client.ClaimFrame(5, "jobs", "g", "w1", 10, 30_000, 500)
    items = [SettleItem(7, 1, "ack"), SettleItem(8, 2, "nak", 100)]
    settle = client.decode_request(client.settle_request(6, "jobs", "g", "w1", items))
    assert settle == client.SettleFrame(6, "jobs", "g", "w1", tuple(items))
    peek = client.decode_request(client.queue_info_request(7, "jobs", "g", 10))
    assert peek == client.QueueInfoFrame(7, "jobs", "g", 10)
    for bad, names in (
        (client.pack("claim", 1, "jobs", "g", "w1", 0, 30_000, 0), "count"),
        (client.pack("claim", 1, "jobs", "g", "", 1, 30_000, 0), "member"),
        (client.pack("claim", 1, "jobs", "g", "w1", 1, 5, 0), "lease_ms"),
        (client.pack("settle", 1, "jobs", "g", "w1", []), "items"),
        (client.pack("settle", 1, "jobs", "g", "w1", [[7, 1, "burn", 0]]), "action"),
        (client.pack("settle", 1, "jobs", "g", "w1", [[7, 0, "ack", 0]]), "delivery"),
        (client.pack("qinfo", 1, "jobs", "g", client.PEEK_MAX + 1), "peek"),
        (client.pack("qinfo", 1, "jobs", "g", "all"), "non-negative integer, got .all"),
    ):
        with pytest.raises(client.BadRequest, match=names) as info:
            client.decode_request(bad)
        assert info.value.req_id == 1


def test_a_work_group_reply_that_breaks_its_shape_names_the_field() -> None:
    good = client.pack("jobs", 3, [[7, 1, 0, None, 1, 99, b"p", []]], 0)
    reply = replies.decode_reply(good)
    assert isinstance(reply, replies.JobsReply)
    [row] = reply.rows
    assert (row.seq, row.priority, row.payload, row.headers) == (7, 1, b"p", ())
    with pytest.raises(ProtocolError, match="jobs reply: rows"):
        replies.decode_reply(client.pack("jobs", 3, [[7, 1, 0, None, 1, 99, b"p"]], 0))
    with pytest.raises(ProtocolError, match="settled reply: results"):
        replies.decode_reply(client.pack("settled", 3, [1]))
    with pytest.raises(ProtocolError, match="qinfo reply: info"):
        replies.decode_reply(client.pack("qinfo", 3, [1]))


def test_a_peek_answer_that_is_not_a_list_of_jobs_is_a_protocol_error() -> None:
    from relay.client.worker import _peek_rows

    assert _peek_rows([[7, 1, 0, 5, None], [8, 2, 9, 9, b"k"]]) == [
        (7, 1, 0, 5, None),
        (8, 2, 9, 9, b"k"),
    ]
    for bad in ({"7": 1}, [[7, 1, 0, 5]], [[7, -1, 0, 5, None]], [[7, 1, 0, 5, "k"]], [7]):
        with pytest.raises(RelayError) as info:
            _peek_rows(bad)
        assert info.value.code == "protocol"


def test_a_frame_starts_with_its_topic_and_one_without_a_topic_is_malformed() -> None:
    ack = StreamAck("orders.eu", 1, 1, 1, 1, 1, bytes(32), 1, ())
    (frame,) = mesh.frames([ack])
    assert frame.startswith(mesh.topic(Channel.ACK, "orders.eu") + b"\0")  # SUB prefixes match
    assert mesh.decode_frame(frame) == [ack]
    longest = "s" * STREAM_NAME_BYTES_MAX  # every channel's topic of the longest name
    tx = Tx(1, 0, 1, 1, "p", 1, b"x")
    for message in (
        replace(ack, stream=longest),
        Replicate(longest, 1, 1, 1, (tx,)),
        RepairRequest(longest, 1, 1, 1, 0, 1),
    ):
        assert [m for f in mesh.frames([message]) for m in mesh.decode_frame(f)] == [message]
    body = encode(ack)[1]
    for hostile in (body, b"x" * (mesh.TOPIC_BYTES_MAX + 1) + b"\0" + body, b"", b"\0"):
        with pytest.raises(mesh.MalformedFrame):
            mesh.decode_frame(hostile)
