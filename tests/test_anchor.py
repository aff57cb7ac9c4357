"""The anchor's check of a consumer's first batch against a second replica's span."""

from __future__ import annotations

from typing import Any

import pytest

from relay.client.anchor import Anchor
from relay.client.directory import NodeAddress
from relay.errors import DigestMismatchError
from relay.wire.replies import SpanReply

SERVING, OTHER = NodeAddress(1, "a", 1), NodeAddress(2, "b", 2)
SEQS = [10, 11, 12, 13]
DIGESTS = [bytes([i]) * 32 for i in SEQS]


class OneSpan:
    """A second replica that answers every span with ``reply``."""

    def __init__(self, reply: SpanReply) -> None:
        self.reply, self.avoid, self.node = reply, SERVING, OTHER

    def span(self, *args: Any) -> SpanReply:
        return self.reply

    def close(self) -> None:
        pass


def confirm(earliest: int, lost: bool, bound: tuple[int, bytes, int]) -> bool:
    anchor = Anchor("s", [SERVING, OTHER], 1.0)
    anchor._fetcher = OneSpan(SpanReply(1, "s", 13, earliest, lost, (bound,)))  # type: ignore[assignment]
    return anchor.confirm(SERVING, SEQS, DIGESTS, 1.0)


def test_a_second_replica_is_judged_by_its_digest_at_a_seq_of_the_batch() -> None:
    assert confirm(1, False, (13, DIGESTS[3], 4))
    assert confirm(1, False, (13, DIGESTS[3], 3))  # it compacted one away: the digest decides
    with pytest.raises(DigestMismatchError):
        confirm(1, False, (13, bytes(32), 4))


def test_a_replica_whose_retention_deleted_the_batchs_start_is_judged_by_its_digest() -> None:
    assert confirm(12, False, (13, DIGESTS[3], 2))  # it holds 12 and 13 only
    assert confirm(0, True, (13, DIGESTS[3], 1))
    with pytest.raises(DigestMismatchError):
        confirm(12, False, (13, bytes(32), 2))
