"""Closed seq ranges of a stream: planned from a node's span answer, read and proven.

How this works: the planner asks a node where to cut (after, upto] into parts and gets, for
each part, its last seq, the rolling digest there and its tx count. A reader fetches the part
from any node, re-computes the digest chain from the digest before the part's first tx and
checks it reaches the planned digest at the planned seq (equal digests at a seq prove equal
histories, so the count is only a hint for fetch sizes: replicas compact on their own). A tx
whose payload changed, a missing or extra tx, or a node serving another timeline all break
that check. Seqs never
change once verified, so the same range planned twice gives the same parts: a replayed
micro-batch reads exactly what it read before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from relay import errors
from relay.client.fetcher import Fetcher, Spanned
from relay.core.digest import fold
from relay.wire.replies import TxRow
from spark_consumer.options import SourceOptions

log = logging.getLogger("spark_consumer")

POLL_WAIT_MS = 500


@dataclass(frozen=True, slots=True)
class SeqRange:
    """The verified txs in (``after``, ``upto``]: ``count`` of them on the planning replica,
    ``digest`` the rolling digest at ``digest_seq`` (``upto``, or the last tx before it that
    the planning replica kept where compaction dropped the tx at ``upto``)."""

    index: int
    after: int
    upto: int
    count: int
    digest: bytes
    digest_seq: int


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows read from one fetch, each with whether it chained to the digest before it."""

    rows: list[TxRow]
    verified: list[bool]


class Unreachable(errors.RelayError):
    """No node answered within the read timeout."""


def resolve_start(fetcher: Fetcher, starting: str | int, deadline_s: float) -> int:
    """The seq after which a read starts: the tx before the earliest held, the latest
    verified, or the seq given."""
    if isinstance(starting, int):
        return starting
    spanned = ask_span(fetcher, 0, 0, 1, 1, deadline_s)
    if starting == "latest":
        return spanned.verified_seq
    return max(0, spanned.earliest_seq - 1)


def ask_span(
    fetcher: Fetcher,
    after: int,
    upto: int,
    max_txs: int,
    parts: int,
    timeout_s: float,
) -> Spanned:
    try:
        return fetcher.span_within(after, upto, max_txs, parts, timeout_s)
    except TimeoutError as exc:
        raise Unreachable(
            errors.UNAVAILABLE, f"{exc}; start the nodes or check the 'config'/'nodes' option"
        ) from None


def plan(
    fetcher: Fetcher, after: int, upto: int, options: SourceOptions, exact: bool
) -> list[SeqRange]:
    """Cut (``after``, ``upto``] into ranges (``upto`` 0: up to the latest verified).

    ``exact``: ``upto`` is a seq the cluster verified (a streaming end offset), so wait for a
    lagging node to verify it too rather than plan a shorter range.
    """
    deadline = time.monotonic() + options.read_timeout_s
    while True:
        spanned = ask_span(fetcher, after, upto, 0, options.min_partitions, options.read_timeout_s)
        if not exact or spanned.verified_seq >= upto:
            break
        _check_deadline(fetcher, deadline, options.read_timeout_s)
        time.sleep(0.05)
    if spanned.lost:
        _data_loss(fetcher.stream, options, after, spanned.earliest_seq)
    ranges = []
    start = after
    for index, (seq, digest, count) in enumerate(spanned.bounds):
        ranges.append(SeqRange(index, start, seq, count, digest, seq))
        start = seq
    if exact and ranges and ranges[-1].upto != upto:
        if not _compacted_away(fetcher, ranges[-1].upto, upto):
            raise errors.DigestMismatchError(
                "digest_mismatch",
                f"{fetcher.stream!r}: {fetcher.node} holds no verified tx at seq {upto}, the "
                "end of this batch; the node serves a different timeline",
            )
        last = ranges[-1]
        ranges[-1] = SeqRange(last.index, last.after, upto, last.count, last.digest, last.upto)
    return ranges


def _compacted_away(fetcher: Fetcher, after: int, upto: int) -> bool:
    """Whether the node's log is compacted past (``after``, ``upto``] with no tx kept there
    (a read stops at each compacted segment's end: one per segment)."""
    while True:
        reply = fetcher.fetch(after, 1, 0)
        if reply is None or reply.through_seq <= after:
            return False
        if [row for row in reply.rows if row.seq <= upto]:
            return False
        if reply.through_seq >= upto:
            return True
        after = reply.through_seq


def read(fetcher: Fetcher, part: SeqRange, options: SourceOptions) -> Iterator[Chunk]:
    """The txs of ``part`` in seq order, each checked against the digest chain, which must
    reach ``part.digest`` at ``part.digest_seq``. Rows of a compacted range each fold from
    their own prev digest, and the chain after them starts anew; the replicas compact on their
    own, so a part that holds some is checked at its planned digest only where this replica
    kept the tx there."""
    after, seen, chain, lost = part.after, 0, b"", False
    compacted = anew = False  # read a compacted range; the next plain reply starts a chain
    planned: bytes | None = None  # the digest read at part.digest_seq
    timeout = options.read_timeout_s
    deadline = time.monotonic() + timeout
    while after < part.upto:
        want = options.fetch_rows
        if not (lost or compacted) and seen < part.count:
            want = min(want, part.count - seen)
        reply = fetcher.fetch(after, max(1, want), POLL_WAIT_MS)
        if reply is None:
            _check_deadline(fetcher, deadline, timeout)
            continue
        if reply.lost:
            _data_loss(fetcher.stream, options, after, reply.earliest_seq)
            lost = True
        kept = bool(reply.through_seq)
        if kept and (reply.through_seq <= after or (reply.rows and reply.rows[0].seq <= after)):
            raise errors.ProtocolError(
                f"{fetcher.stream!r}: {fetcher.node} answered a read after seq {after} with a "
                f"compacted range through seq {reply.through_seq} that does not start after it"
            )
        if not chain or reply.lost or (anew and not kept):
            chain, anew = reply.prev_digest, False
        compacted, anew = compacted or kept, anew or kept
        rows = [row for row in reply.rows if row.seq <= part.upto]
        if not rows and not (kept and reply.through_seq > after):
            if reply.verified_seq >= part.upto:
                break  # this node holds nothing more in the range (trimmed, or other seqs)
            _check_deadline(fetcher, deadline, timeout)
            continue
        verified = []
        for i, (seq, origin, pid, mid, payload, key, headers, digest) in enumerate(rows):
            prev = reply.prevs[i] if kept else chain
            ok = fold(prev, seq, origin, pid, mid, payload, key, headers) == digest
            if not ok and not options.flag_mismatches:
                raise errors.DigestMismatchError(
                    "digest_mismatch",
                    f"{fetcher.stream!r} seq {seq} from {fetcher.node}: the payload does not "
                    "hash to the digest the cluster verified; this replica's copy is corrupt. "
                    "The read fails, so no sink commits these rows. Repair or replace the node, "
                    "or set verification=flag to read the rows marked verified=false",
                )
            verified.append(ok)
            chain = digest
            planned = digest if seq == part.digest_seq else planned
        seen += len(rows)
        after = max(after, rows[-1].seq if rows else 0, min(reply.through_seq, part.upto))
        deadline = time.monotonic() + timeout
        if rows:
            yield Chunk(rows, verified)
    if lost or planned == part.digest or (compacted and planned is None):
        return
    found = planned.hex()[:16] if planned else "no tx"
    raise errors.DigestMismatchError(
        "digest_mismatch",
        f"{fetcher.stream!r} ({part.after}, {part.upto}]: {fetcher.node} served {seen} txs "
        f"with {found} at seq {part.digest_seq}, where the cluster verified the digest "
        f"{part.digest.hex()[:16]}. The read fails, so no sink commits them",
    )


def _data_loss(stream: str, options: SourceOptions, after: int, earliest: int) -> None:
    message = (
        f"{stream!r}: the txs after seq {after} are no longer held by any node reached "
        f"(the earliest held is {earliest}); they were trimmed from the buffers"
    )
    if options.fail_on_data_loss:
        raise errors.DataLossError(
            "data_loss", message + ". Set failOnDataLoss=false to skip them with a warning"
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", message)


def _check_deadline(fetcher: Fetcher, deadline: float, timeout_s: float) -> None:
    if time.monotonic() > deadline:
        tried = ", ".join(str(a) for a in fetcher.order)
        raise Unreachable(
            errors.UNAVAILABLE,
            f"{fetcher.stream!r}: no relay node answered within {timeout_s:g} s (tried {tried}); "
            "start the nodes or check the 'config'/'nodes' option",
        )
