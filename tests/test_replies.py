"""Client protocol replies: a node encodes, a client decodes, a broken reply names its field."""

import re

import pytest

from relay.core.events import Acked, PublishResults, ReadResult, Rejected, SpanResult
from relay.core.messages import Tx
from relay.core.status import NodeStatus, StreamStatus
from relay.errors import ProtocolError
from relay.wire import replies
from relay.wire.client import VERSION, pack

_TX = Tx(5, 0, 1, 7, "p", 9, b"payload", b"k", (("h", b"v"), ("h", b"")))
_STATUS = NodeStatus(
    1,
    7,
    "serving",
    (2, 3),
    (),
    (StreamStatus("s", (1, 2, 3), 5, 5, "ab", 0, 0, 0, "synced", ((1, "active"),)),),
)


def test_every_reply_round_trips() -> None:
    acks = replies.decode_reply(
        replies.encode_acks(3, PublishResults((Acked(5, b"d"), Rejected("timeout", "slow"))))
    )
    rows = (replies.AckRow(5, b"d"), replies.ErrorRow("timeout", "slow"))
    assert acks == replies.AcksReply(3, rows)
    only_acks = PublishResults((Acked(5, b"d"), Acked(6, b"e")))  # the typed decoder's case
    assert replies.decode_reply(replies.encode_acks(3, only_acks)) == replies.AcksReply(
        3, (replies.AckRow(5, b"d"), replies.AckRow(6, b"e"))
    )
    txs = replies.decode_reply(
        replies.encode_txs(4, ReadResult("s", (_TX,), (b"d",), b"p", 5, 5, False))
    )
    assert txs == replies.TxsReply(
        4,
        "s",
        b"p",
        5,
        5,
        False,
        (replies.TxRow(5, 1, "p", 9, b"payload", b"k", (("h", b"v"), ("h", b"")), b"d"),),
    )
    planned = SpanResult("s", ((5, b"d", 1),), 5, 1, True)
    span = replies.decode_reply(replies.encode_span(5, planned))
    assert span == replies.SpanReply(5, "s", 5, 1, True, ((5, b"d", 1),))
    status = replies.decode_reply(replies.encode_status(6, _STATUS))
    assert status == replies.StatusReply(6, _STATUS)
    key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
    redirect = replies.decode_reply(replies.encode_redirect(7, "s", [(2, "h", 9, key)]))
    assert redirect == replies.RedirectReply(7, "s", ((2, "h", 9, key),))
    error = replies.decode_reply(replies.encode_error(8, Rejected("unavailable", "no"), []))
    assert error == replies.ErrorReply(8, "unavailable", "no", ())


_D = bytes(32)
_ROW = [5, 1, "p", 9, b"x", b"k", [], _D]


def test_a_txs_reply_read_field_by_field_is_the_reply_the_typed_decoder_reads() -> None:
    """A ``txs`` reply another msgpack encoder wrote (its array's length in 16 bits) is read
    by the field readers, into the same reply: its first index stays the first index."""
    read = ReadResult("s", (_TX,), (b"d",), b"p", 5, 5, False, first_index=7)
    body = replies.encode_txs(4, read)
    assert body[0] == 0x9A  # a fixarray of 10: the typed decoder's case
    wide = b"\xdc\x00\x0a" + body[1:]
    assert replies.decode_reply(wide) == replies.decode_reply(body)
    assert replies.decode_reply(wide).first_index == 7


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"\xc1", "not msgpack"),
        (pack("acks"), f"[{VERSION}, kind, req_id"),
        (pack("nope", 1), "unknown kind"),
        (pack("acks", 1), "1 fields, expected 2"),
        (pack("acks", -1, []), "acks reply: req_id"),
        (pack("acks", 1, [[0, 5]]), "acks reply: rows: [0] is not a list of 3"),
        (pack("acks", 1, [[2, 5, b"d"]]), "rows: [0]: outcome must be 0"),
        (pack("acks", 1, [[0, 5, b"d"], [0, -5, b"d"]]), "rows: [1]: expected a non-negative"),
        (pack("txs", 1, "s", "notbytes", 5, 5, False, [], 0), "txs reply: prev_digest"),
        (pack("txs", 1, "s", b"p", 5, 5, 0, [], 0), "txs reply: lost"),
        (pack("txs", 1, "s", b"p", 5, 5, False, [], -1), "txs reply: first_index"),
        (
            pack("txs", 1, "s", b"p", 5, 5, False, [[5, 1, "p", 9, 3, None, [], b"d"]], 0),
            "[0]: expected bytes",
        ),
        (
            pack("txs", 1, "s", b"p", 5, 5, False, [[5, 1024, "p", 9, b"x", None, [], b"d"]], 0),
            "[0]: expected a node id of 0..1023, got 1024",
        ),
        (
            pack("txs", 1, "s", b"p", 5, 5, False, [[5, 1, "p", 9, b"x", None, [["h"]], b"d"]], 0),
            "[0]: a header is a [name, value] pair",
        ),
        (pack("span", 1, "s", 5, 5, False, [[5, b"d"]]), "span reply: bounds: [0]"),
        (pack("kept", 1, "s", 9, 1, [_ROW], [], 9, [0]), "one prev digest and one index per row"),
        (pack("kept", 1, "s", 9, 1, [_ROW], [_D], 9, []), "one prev digest and one index per row"),
        (pack("kept", 1, "s", 9, 1, [_ROW], [_D], 4, [0]), "through_seq is at or past every row"),
        (pack("kept", 1, "s", 7, 1, [_ROW], [_D], 8, [0]), "through_seq is past the verified seq"),
        (pack("kept", 1, "s", 9, 1, [_ROW, _ROW], [_D, _D], 9, [0, 1]), "rows in ascending seq"),
        (pack("kept", 1, "s", 9, 1, [_ROW], [_D], 9, [-1]), "kept reply: indexes"),
        (pack("status", 1, {"node": 1}), "status reply: status: status.streams"),
        (pack("status", 1, "x"), "status reply: status: a status must be a map"),
        (
            pack("redirect", 1, "s", [[2, 3, 4, ""]]),
            "redirect reply: nodes: [0]: expected a string",
        ),
        (pack("redirect", 1, "s", [[2, "h", 4, "short"]]), "not a public key"),
        (pack("redirect", 1, "s", [[2, "h", 4]]), "not a list of 4 fields"),
        (pack("error", 1, 5, "m", []), "error reply: code"),
    ],
)
def test_a_broken_reply_names_what_is_wrong(body: bytes, names: str) -> None:
    with pytest.raises(ProtocolError, match=re.escape(names)):
        replies.decode_reply(body)


def test_a_status_from_a_node_without_log_counts_reads_them_as_zero() -> None:
    """A node of the version before stream counts (log_*) still answers relay cluster status."""
    raw = _STATUS.to_wire()
    for stream in raw["streams"].values():
        for key in ("log_first_seq", "log_txs", "log_bytes"):
            del stream[key]
    (older,) = NodeStatus.from_wire(raw).streams
    assert (older.log_first_seq, older.log_txs, older.log_bytes) == (0, 0, 0)
    raw["streams"]["s"]["log_txs"] = "many"
    with pytest.raises(ValueError, match="log_txs must be int"):
        NodeStatus.from_wire(raw)


def test_a_status_says_which_streams_recover_and_refuses_a_recovering_that_is_no_flag() -> None:
    raw = _STATUS.to_wire()
    raw["streams"]["s"]["recovering"] = True
    assert NodeStatus.from_wire(raw).streams[0].recovering
    del raw["streams"]["s"]["recovering"]  # a node of the version before --recover
    assert not NodeStatus.from_wire(raw).streams[0].recovering
    raw["streams"]["s"]["recovering"] = 1
    with pytest.raises(ValueError, match="recovering must be bool"):
        NodeStatus.from_wire(raw)
