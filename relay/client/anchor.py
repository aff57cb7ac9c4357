"""A consumer's first batch, confirmed by a second replica before it is yielded.

How this works: a consumer checks that every tx it receives chains from the one before, but the
digest its first batch starts from is the serving node's word, so a node that rewrote payloads
and digests consistently (from genesis on, or from any digest it names) would pass that check.
So another replica is asked for its digest (a ``span``) at a seq of that batch: the two must
agree there. Each replica serves only what a quorum verified and
equal digests prove equal prefixes, so once a second replica agrees the consumer's own chain is
the anchor: every later batch, from any node, must continue it. With no other node known there
is nothing to compare, and the chain alone is checked. Rows of a compacted range do not chain;
each folds from its own prev digest, and a second replica's digests at the seqs both hold must
be the same (``confirm_kept``).
"""

from __future__ import annotations

import time

from relay import errors
from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress
from relay.client.fetcher import Fetcher, Spanned

RETRY_S = 0.05  # a second replica that has not verified the batch yet is asked again
KEPT_CUTS = 16  # the seqs a second replica names in a compacted range, to compare digests at


class Anchor:
    def __init__(
        self,
        stream: str,
        order: list[NodeAddress],
        reply_timeout_s: float,
        pair: KeyPair | None = None,
    ) -> None:
        self.stream = stream
        self.pair = pair
        self.order = order
        self.reply_timeout_s = reply_timeout_s
        self._fetcher: Fetcher | None = None  # asks every node but the serving one

    def confirm(
        self,
        serving: NodeAddress | None,
        seqs: list[int],
        digests: list[bytes],
        timeout_s: float,
        after_kept: bool = False,
    ) -> bool | None:
        """Whether a replica other than ``serving`` agrees with the batch (``seqs`` ascending,
        each with the digest after it, a plain range of the serving node's log) within
        ``timeout_s``: every seq it names in the batch's range must be one of the batch's,
        with the same digest (``DigestMismatchError`` if not). None if it verified past the
        batch but deleted (retention) or compacted away all of that range: nothing to compare,
        the next batch is compared instead. ``after_kept``: the batch follows a compacted
        range, which the other may have compacted further: it names up to ``KEPT_CUTS`` seqs
        (else its last)."""
        fetcher = self._other(serving)
        if fetcher is None or not seqs:
            return True
        cuts = KEPT_CUTS if after_kept else 1
        deadline = time.monotonic() + timeout_s
        while True:
            spanned = fetcher.span(seqs[0] - 1, seqs[-1], 0, cuts)
            if spanned is not None and spanned.bounds:
                self._compare(serving, fetcher, spanned.bounds, seqs, digests, strict=True)
                return True
            if spanned is not None and spanned.verified_seq >= seqs[-1]:
                if self._none_held(fetcher, spanned, seqs[0] - 1, seqs[-1]):
                    return None
                raise errors.DigestMismatchError(
                    "digest_mismatch",
                    f"{self.stream!r}: {fetcher.node} verified past seq {seqs[-1]} and holds "
                    f"none of the seqs {serving} served after seq {seqs[0] - 1}; the first "
                    "served a timeline the second replica does not hold",
                )
            if time.monotonic() >= deadline:
                return False
            time.sleep(RETRY_S)  # a replica that has not verified the batch yet

    @staticmethod
    def _none_held(fetcher: Fetcher, spanned: Spanned, after: int, upto: int) -> bool:
        """Whether the replica holds nothing in (``after``, ``upto``] because its retention
        deleted that range or its compaction kept nothing there."""
        if spanned.lost or spanned.earliest_seq > upto:
            return True
        reply = fetcher.fetch(after, 1, 0)
        return reply is not None and reply.through_seq >= upto and not reply.rows

    def confirm_kept(
        self, serving: NodeAddress | None, seqs: list[int], digests: list[bytes], timeout_s: float
    ) -> None:
        """Hold rows of a compacted range against a second replica: where its span of the same
        range cuts at a seq among ``seqs``, the digests there must be equal
        (``DigestMismatchError`` if not). Replicas compact on their own schedules, so a cut may
        land on a record only one of them kept: that says nothing either way."""
        fetcher = self._other(serving)
        if fetcher is None or not seqs:
            return
        deadline = time.monotonic() + timeout_s
        spanned = None
        while spanned is None and time.monotonic() < deadline:
            spanned = fetcher.span(seqs[0] - 1, seqs[-1], 0, KEPT_CUTS)
        if spanned is not None:
            self._compare(serving, fetcher, spanned.bounds, seqs, digests, strict=False)

    def _compare(
        self,
        serving: NodeAddress | None,
        fetcher: Fetcher,
        bounds: tuple[tuple[int, bytes, int], ...],
        seqs: list[int],
        digests: list[bytes],
        strict: bool,
    ) -> None:
        """``DigestMismatchError`` where ``bounds`` (a second replica's seqs and digests) and
        the batch differ at a seq both hold, or (``strict``: the batch is all the serving node
        holds in its range) where the second holds a seq the batch does not."""
        held = dict(zip(seqs, digests, strict=True))
        for seq, digest, _ in bounds:
            if (seq in held and held[seq] != digest) or (strict and seq not in held):
                raise errors.DigestMismatchError(
                    "digest_mismatch",
                    f"{self.stream!r}: {serving} and {fetcher.node} disagree at seq {seq}; "
                    "the first served a timeline the second replica does not hold",
                )

    def _other(self, serving: NodeAddress | None) -> Fetcher | None:
        """A fetcher of every node but ``serving`` (None if there is no other)."""
        same = (serving.host, serving.port) if serving else None
        if not [a for a in self.order if (a.host, a.port) != same]:
            return None
        if self._fetcher is None or self._fetcher.avoid != serving:
            self.close()
            self._fetcher = Fetcher(
                self.stream, self.order, self.reply_timeout_s, avoid=serving, pair=self.pair
            )
        return self._fetcher

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
