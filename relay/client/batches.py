"""Fan-out batches (Carlyle's idea): know deterministically when every item of a batch was
processed, with retries and acknowledgements in any order.

How this works: ``Producer.open_batch(stream)`` names a batch by its own stream,
``<stream>.__batch.<id>``, and every item sent with it carries the header ``relay-batch`` =
``<batch>#<index>`` (indexes 0, 1, ... in send order). ``close_batch`` appends a *close*
record with the item count to the batch stream; ``Consumer.ack(tx)`` (in a group) collects the
indexes it processed and appends them as *ack* records (sorted ranges, so a million in-order
acks cost a few hundred bytes). Both are ordinary transactions: replicated, verified and
durable, so the answer survives what transactions survive. ``status`` collects the acked
ranges of the batch stream and counts the indexes below the count they cover, each once
(sorted and merged: a million scattered acks cost one sort); the batch is ``complete`` exactly
when it is closed and every index below the count is covered. An ack given twice counts once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from relay import errors
from relay.client.fetcher import Fetcher
from relay.core.routing import BATCH_SUFFIX

HEADER = "relay-batch"
INDEX_MAX = 1 << 24  # the most items a batch may have (a 2 MiB bitmap)


@dataclass(frozen=True, slots=True)
class BatchStatus:
    batch: str
    group: str
    closed: bool
    count: int  # items in the batch (known once closed; else the highest acked index + 1)
    acked: int  # distinct items the group acknowledged

    @property
    def complete(self) -> bool:
        return self.closed and self.acked == self.count


def batch_stream(stream: str, batch_id: str) -> str:
    return f"{stream}{BATCH_SUFFIX}{batch_id}"


def item_header(batch: str, index: int) -> tuple[str, bytes]:
    return HEADER, f"{batch}#{index}".encode()


def item_of(headers: tuple[tuple[str, bytes], ...], stream: str) -> tuple[str, int] | None:
    """(batch, index) of a transaction of ``stream`` sent in one of its batches."""
    for name, value in headers:
        if name == HEADER:
            batch, sep, index = value.decode("utf-8", "replace").rpartition("#")
            ours = batch.startswith(stream + BATCH_SUFFIX) and len(batch) > len(
                stream + BATCH_SUFFIX
            )
            if sep and ours and index.isascii() and index.isdigit() and int(index) < INDEX_MAX:
                return batch, int(index)
    return None


def close_payload(count: int) -> bytes:
    return json.dumps({"close": count}).encode()


def acks_payload(group: str, indexes: set[int]) -> bytes:
    """The indexes as sorted, merged [first, last] ranges."""
    ranges: list[list[int]] = []
    for i in sorted(indexes):
        if ranges and ranges[-1][1] == i - 1:
            ranges[-1][1] = i
        else:
            ranges.append([i, i])
    return json.dumps({"group": group, "acks": ranges}).encode()


def status(fetcher: Fetcher, group: str, timeout_s: float = 10.0) -> BatchStatus:
    """Fold the batch stream ``fetcher`` reads, up to its verified head, for ``group``."""
    payloads: list[bytes] = []
    after, head = 0, None
    deadline = time.monotonic() + timeout_s
    while head is None or after < head:
        reply = fetcher.fetch(after, 1000, 0)  # from the start: a lost start is an error
        if reply is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no node served {fetcher.stream!r} in {timeout_s} s")
            continue
        if reply.lost:
            raise errors.DataLossError(
                "data_loss", f"{fetcher.stream!r}: retention took records this status needs"
            )
        head = reply.verified_seq if head is None else head
        if not reply.rows:
            break
        payloads += [row.payload for row in reply.rows]
        after = reply.rows[-1].seq
    return status_of(fetcher.stream, group, payloads)


def status_of(batch: str, group: str, payloads: Iterable[bytes]) -> BatchStatus:
    """Fold a batch stream's records, in order, for ``group``."""
    ranges: list[tuple[int, int]] = []  # acked [first, last] pairs, as recorded
    count: int | None = None
    for payload in payloads:
        count = _fold(payload, group, count, ranges)
    top = count if count is not None else max((last + 1 for _, last in ranges), default=0)
    return BatchStatus(batch, group, count is not None, top, _covered(ranges, top))


def _covered(ranges: list[tuple[int, int]], top: int) -> int:
    """How many indexes below ``top`` the ranges cover, each counted once."""
    done, reach = 0, 0  # ranges sorted by start: count what each adds past the reach so far
    for first, last in sorted(ranges):
        first, last = max(first, reach), min(last, top - 1)
        if first <= last:
            done += last - first + 1
            reach = last + 1
    return done


def _fold(
    payload: bytes, group: str, count: int | None, ranges: list[tuple[int, int]]
) -> int | None:
    """One record of a batch stream taken in; the count, once a close was read."""
    try:
        record = json.loads(payload)
    except (ValueError, RecursionError):
        return count  # not a batch record: someone else's transaction
    if not isinstance(record, dict):
        return count
    close = record.get("close")
    if type(close) is int and 0 <= close <= INDEX_MAX:
        return close if count is None else count  # the first close counts
    if record.get("group") != group or not isinstance(record.get("acks"), list):
        return count
    for pair in record["acks"]:
        if isinstance(pair, list) and len(pair) == 2 and all(type(i) is int for i in pair):
            first, last = pair
            if 0 <= first <= last < INDEX_MAX:
                ranges.append((first, last))
    return count
