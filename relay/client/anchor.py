"""A consumer's first batch, confirmed by a second replica before it is yielded.

How this works: a consumer checks that every tx it receives chains from the one before, but the
digest its first batch starts from is the serving node's word, so a node that rewrote payloads
and digests consistently (from genesis on, or from any digest it names) would pass that check.
So another replica is asked for its digest (a ``span``) at a seq of that batch: the two must
agree there, after the same count of txs. Each replica serves only what a quorum verified and
equal digests prove equal prefixes, so once a second replica agrees the consumer's own chain is
the anchor: every later batch, from any node, must continue it. With no other node known there
is nothing to compare, and the chain alone is checked.
"""

from __future__ import annotations

import time

from relay import errors
from relay.auth.keys import KeyPair
from relay.client.directory import NodeAddress
from relay.client.fetcher import Fetcher

RETRY_S = 0.05  # a second replica that has not verified the batch yet is asked again


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
        self, serving: NodeAddress | None, seqs: list[int], digests: list[bytes], timeout_s: float
    ) -> bool:
        """Whether a replica other than ``serving`` agrees with the batch (``seqs`` ascending,
        each with the digest after it) within ``timeout_s``; ``DigestMismatchError`` if one
        disagrees."""
        same = (serving.host, serving.port) if serving else None
        if not [a for a in self.order if (a.host, a.port) != same] or not seqs:
            return True
        if self._fetcher is None or self._fetcher.avoid != serving:
            self.close()
            self._fetcher = Fetcher(
                self.stream, self.order, self.reply_timeout_s, avoid=serving, pair=self.pair
            )
        fetcher = self._fetcher
        deadline = time.monotonic() + timeout_s
        while True:
            spanned = fetcher.span(seqs[0] - 1, seqs[-1], 0, 1)
            found = spanned.bounds[-1] if spanned is not None and spanned.bounds else None
            if found is not None and found[2]:
                seq, digest, count = found
                held = seqs.index(seq) + 1 if seq in seqs else 0
                # a replica whose retention already deleted the batch's start counts fewer
                # txs; equal digests at the same seq still prove the same history
                short = spanned is not None and (spanned.lost or spanned.earliest_seq > seqs[0])
                if not held or digests[held - 1] != digest or (held != count and not short):
                    raise errors.DigestMismatchError(
                        "digest_mismatch",
                        f"{self.stream!r}: {serving} and {fetcher.node} disagree at seq {seq}; "
                        "the first served a timeline the second replica does not hold",
                    )
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(RETRY_S)  # a replica that has not verified the batch yet

    def close(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
