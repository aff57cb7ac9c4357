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


class NoneHeld(OneSpan):
    """A second replica that verified past the batch and names none of its seqs; a fetch
    there answers ``through`` (a compacted range kept nothing) or plain rows (0)."""

    def __init__(self, earliest: int, through: int) -> None:
        super().__init__(SpanReply(1, "s", 20, earliest, False, ()))
        self.through = through

    def fetch(self, *args: Any) -> Any:
        from relay.wire.replies import TxsReply

        return TxsReply(1, "s", b"", 20, 1, False, (), through_seq=self.through)


def held_none(earliest: int, through: int) -> bool | None:
    anchor = Anchor("s", [SERVING, OTHER], 1.0)
    anchor._fetcher = NoneHeld(earliest, through)  # type: ignore[assignment]
    return anchor.confirm(SERVING, SEQS, DIGESTS, 1.0)


def test_a_replica_that_holds_none_of_the_batch_must_have_deleted_or_compacted_it() -> None:
    assert held_none(earliest=14, through=0) is None  # retention took the range: nothing to compare
    assert held_none(earliest=1, through=15) is None  # compacted away: nothing to compare
    with pytest.raises(DigestMismatchError, match="holds none of the seqs"):
        held_none(earliest=1, through=0)  # it holds the range, and none of these seqs


def test_a_second_replica_naming_a_seq_the_batch_lacks_is_a_mismatch() -> None:
    with pytest.raises(DigestMismatchError):
        confirm(1, False, (14, DIGESTS[3], 4))  # 14 is within the range asked, not served
