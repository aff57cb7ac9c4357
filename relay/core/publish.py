"""Publish coordination: requests waiting for a quorum to verify their txs, and answers.

How this works: a publish request's items get seqs (or the seq of an earlier copy with the
same producer key) and the request waits, in a per-stream heap keyed by its highest seq,
until the stream's verified seq reaches it. Then each item is answered by looking its seq
up in the timeline: found, it is acknowledged with its digest; skipped as a duplicate, it
waits for the original's seq instead; gone (its coordinator's epoch was cut before a quorum
held it), it is ``not_committed``. A request not answered within ``publish_timeout_ms`` of
elapsed time gets ``timeout``; a node that stops serving answers every waiting request
``unavailable``. The timeline never trims a tx a waiting request still needs.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter

from relay import errors
from relay.core.dedup import COUNTER_BITS, FENCING_IDS, content_tag
from relay.core.events import Acked, PublishReply, PublishRequested, PublishResults, Rejected
from relay.core.flake import SEQ_MAX
from relay.core.lane import LaneState
from relay.core.messages import Item, Tx, seq_of
from relay.core.params import CoreParams
from relay.core.stream import StreamReplica
from relay.core.timer import Timeout

Result = Acked | Rejected | None

HEADERS_MAX = 64  # headers per message
HEADER_NAME_MAX = 255  # characters in a header name
_new_tuple = tuple.__new__  # a named tuple straight from its fields
# an Item's fields
_MSG_ID, _PAYLOAD, _KEY, _HEADERS = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)


@dataclass(slots=True, eq=False)
class PendingPublish:
    client: bytes
    req_id: int
    deadline: Timeout
    seqs: list[int] = field(default_factory=list)  # per item: the seq it waits for
    results: list[Result] = field(default_factory=list)
    done: bool = False

    def originated(self, txs: list[Tx], copies: list[tuple[int, int, bool]]) -> None:
        """The items left by ``attach_retries`` got these txs, in order; each copy inside
        the request (slot, its first copy's slot, whether its content differs) follows its
        first copy: a retry of it, or a conflict naming it."""
        if not copies and len(txs) == len(self.seqs):
            self.seqs[:] = map(seq_of, txs)
            return
        slots = [i for i, seq in enumerate(self.seqs) if seq == 0]
        for i, tx in zip(slots, txs, strict=True):
            self.seqs[i] = tx.seq
        by_seq = {tx.seq: tx for tx in txs} if copies else {}
        for i, first, differs in copies:
            kept = by_seq[self.seqs[first]]
            self.seqs[i] = kept.seq
            if differs:
                self.results[i] = conflict(kept.producer_id, kept.msg_id, kept.seq)


def attach_retries(
    state: StreamReplica, req: PublishRequested, pending: PendingPublish
) -> tuple[list[Item], list[tuple[int, int, bool]]]:
    """Attach each item whose key the stream already holds to that tx (a retry; a conflict
    when it carries other content); (the items left to originate, whose seqs stay 0 in
    ``pending.seqs`` until ``originated``, and the copies of an earlier item of the same
    request, which follow that item)."""
    msg_ids = list(map(_MSG_ID, req.items))
    head = state.timeline.head_seq
    if not req.producer_id or (
        len(set(msg_ids)) == len(msg_ids)
        and not state.dedup.holds_any(req.producer_id, msg_ids, head)
    ):  # the usual request: every item new
        pending.seqs.extend([0] * len(req.items))
        return list(req.items), []
    fresh: list[Item] = []
    copies: list[tuple[int, int, bool]] = []
    first: dict[int, int] = {}  # msg id -> the slot of its first new item in this request
    for i, item in enumerate(req.items):
        held = state.lookup_key(req.producer_id, item.msg_id)
        if held is None:
            earlier = first.get(item.msg_id)
            if earlier is not None:
                differs = content_tag(item) != content_tag(req.items[earlier])
                copies.append((i, earlier, differs))
                pending.seqs.append(-1)  # its first copy's seq, once originated
                continue
            first[item.msg_id] = i
            fresh.append(item)
            pending.seqs.append(0)
            continue
        if held[1] != content_tag(item):  # not a retry: a new message reusing the key
            pending.results[i] = conflict(req.producer_id, item.msg_id, held[0])
        pending.seqs.append(held[0])
    return fresh, copies


def superseded(state: StreamReplica, req: PublishRequested, wall_ms: int) -> Rejected | None:
    """The refusal of a request from an incarnation of its producer id that a newer one
    fenced, if it is one (``DedupIndex.superseded``)."""
    msg_ids = list(map(_MSG_ID, req.items))
    newer = state.dedup.superseded(req.producer_id, msg_ids, state.timeline.head_seq, wall_ms)
    if newer is None:
        return None
    started = (max(msg_ids) - FENCING_IDS) >> COUNTER_BITS
    why = (
        f"producer id {req.producer_id!r} is in use by a newer producer (started "
        f"{newer - started} ms after this one): this one is fenced; two live producers "
        "must not share an id"
    )
    return Rejected(errors.FENCED, why)


def request_problem(
    req: PublishRequested, params: CoreParams, payload_bytes_max: int | None = None
) -> str | None:
    """Why a publish request is malformed (the caller's fault), or None. A stream's own
    ``max_payload_bytes`` stands for the cluster's ``payload_bytes_max`` when given."""
    bytes_max = payload_bytes_max or params.payload_bytes_max
    if not req.items:
        return "a publish needs at least one message"
    if len(req.items) > params.publish_items_max:
        return f"at most {params.publish_items_max} messages per publish request"
    items = req.items
    plain = list(map(_KEY, items)).count(None) == len(items) and not any(map(_HEADERS, items))
    if plain and max(map(len, map(_PAYLOAD, items))) <= bytes_max:
        return None  # the usual request: payloads alone, none too large
    for item in items:
        problem = item_problem(item, bytes_max)
        if problem:
            return problem
    return None


def request_bytes(req: PublishRequested) -> int:
    """The bytes a request's messages carry (payloads, keys and headers): what bounds held
    requests."""
    size = sum(map(len, map(_PAYLOAD, req.items)))
    for item in req.items:
        if item.key is not None or item.headers:
            size += len(item.key or b"") + sum(len(n) + len(v) for n, v in item.headers)
    return size


def item_problem(item: Item, bytes_max: int) -> str | None:
    """Why one message is malformed, or None. Its key, headers and payload together count
    against ``payload_bytes_max``."""
    if len(item.headers) > HEADERS_MAX:
        return f"a message carries {len(item.headers)} headers; at most {HEADERS_MAX}"
    size = len(item.payload) + len(item.key or b"")
    for name, value in item.headers:
        if not 0 < len(name) <= HEADER_NAME_MAX:
            return f"a header name must have 1 to {HEADER_NAME_MAX} characters"
        size += len(name) + len(value)
    if size > bytes_max:
        return (
            f"a message of {size} bytes (payload, key and headers) exceeds the stream's "
            f"payload_bytes_max ({bytes_max})"
        )
    return None


def refusal(stream: StreamReplica, up: set[int]) -> str | None:
    """Why this node cannot coordinate a publish to ``stream`` now (``unavailable``: the
    producer goes elsewhere), or None."""
    live = [r for r in stream.replicas if r in up]
    if len(live) < stream.quorum:
        return (
            f"only {len(live)} of the stream's {len(stream.replicas)} replicas are reachable "
            f"from here; a quorum is {stream.quorum}"
        )
    if stream.lanes[stream.self_id].state is not LaneState.ACTIVE:
        return "this node is rejoining the stream"
    return None


def unadmitted(stream: StreamReplica, up: set[int], admitted_by: dict[int, bool]) -> str | None:
    """Why a publish to ``stream`` must wait a moment (its replicas have not admitted this
    node's epoch yet: a heartbeat away), or None. ``admitted_by`` says, per live peer
    replica, whether it admitted this node; a quorum of replicas (this one counted) that
    admitted it is enough, so a peer that never admits anyone cannot stall the stream."""
    if stream.heard is not None:
        return "the stream has not heard a quorum of its replicas since this node began"
    live = [r for r in stream.replicas if r in up]
    unaware = sorted(r for r, admitted in admitted_by.items() if r in live and not admitted)
    if len(live) - len(unaware) < stream.quorum:
        return f"replicas {unaware} have not admitted this node yet"
    return None


class Publishes:
    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.pending: deque[PendingPublish] = deque()  # in arrival order, for deadlines
        self.waiters: dict[str, list[tuple[int, int, PendingPublish]]] = {}
        self._skips_seen: dict[str, int] = {}  # stream -> its dedup's skips when last keyed
        self._order = 0

    def start(self, elapsed_ms: int, req: PublishRequested) -> PendingPublish:
        """A request coordinated now (its deadline counts from now, even if it was held)."""
        deadline = Timeout(self.timeout_ms)
        deadline.start(elapsed_ms)
        pending = PendingPublish(req.client, req.req_id, deadline)
        pending.results = [None] * len(req.items)
        self.pending.append(pending)
        return pending

    def wait(self, stream: str, pending: PendingPublish) -> None:
        self._order += 1
        heap = self.waiters.setdefault(stream, [])
        heapq.heappush(heap, (max(pending.seqs), self._order, pending))

    def oldest_awaited(self, stream: str) -> int:
        """The lowest seq a waiting request of this stream still has to answer with."""
        heap = self.waiters.get(stream, [])
        return min((min(p.seqs) for _, _, p in heap if not p.done), default=SEQ_MAX)

    def resolve(self, state: StreamReplica) -> list[PublishReply]:
        """Answer the requests of this stream whose seqs are all verified now."""
        heap = self.waiters.get(state.stream)
        replies: list[PublishReply] = []
        if not heap:
            return replies
        if state.dedup.skips != self._skips_seen.get(state.stream, 0):
            heap = self._rekey(state)
        verified = state.timeline.readable_seq
        timeline = state.timeline
        seqs = timeline.seqs
        while heap and heap[0][0] <= verified:
            pending = heapq.heappop(heap)[2]
            if pending.done:
                continue
            results = pending.results
            waiting = False
            j = bisect_left(seqs, min(pending.seqs))
            count = len(results)
            if results.count(None) == count and seqs[j : j + count] == pending.seqs:
                # the usual request: new txs, in the timeline in a row
                answers = zip(pending.seqs, timeline.digests[j : j + count], strict=True)
                pending.results[:] = map(_new_tuple, repeat(Acked), answers)
                replies.append(self._finish(pending))
                continue
            for i, seq in enumerate(pending.seqs):
                if results[i] is not None:
                    continue
                if j < len(seqs) and seqs[j] > seq:  # not ascending (a retried item): search
                    j = bisect_left(seqs, seq)
                while j < len(seqs) and seqs[j] < seq:  # ascending, as usual: walk
                    j += 1
                original = state.dedup.original_of(seq)
                kept = state.dedup.digest_of(seq) if seq <= timeline.trimmed_seq else None
                if original is not None and state.dedup.conflicts(seq):
                    results[i] = conflict("", 0, original)
                elif j < len(seqs) and seqs[j] == seq:
                    results[i] = Acked(seq, timeline.digests[j])
                elif kept is not None:  # a retry of a tx the memory ring no longer holds
                    results[i] = Acked(seq, kept)
                elif original is not None:  # a duplicate: answer with the original's seq
                    pending.seqs[i] = original
                    waiting = True
                else:
                    results[i] = Rejected(
                        errors.NOT_COMMITTED,
                        "the transaction's coordinator was cut before a quorum held it; retry",
                    )
            if waiting:
                self.wait(state.stream, pending)
            else:
                replies.append(self._finish(pending))
        if not heap:
            del self.waiters[state.stream]
            self._skips_seen.pop(state.stream, None)
        return replies

    def _rekey(self, state: StreamReplica) -> list[tuple[int, int, PendingPublish]]:
        """The fold skipped later copies since the stream's requests were keyed: a request
        waiting on one (a retry this node gave a seq before the first copy reached it) now
        waits for the copy that was kept, which is older; else it would wait until the
        verified seq passed its skipped seq, which on a quiet stream is its timeout. Which copy
        a skipped seq names changes only when a fold skips (and forgets old copies) or a
        refold's truncate drops copies, and both change ``skips``: so no request is ever
        popped by a key that no longer holds, and none is answered before what it waits for
        is verified."""
        self._skips_seen[state.stream] = state.dedup.skips
        original_of = state.dedup.original_of
        heap = [
            (max(original_of(seq) or seq for seq in pending.seqs), order, pending)
            for _, order, pending in self.waiters[state.stream]
            if not pending.done
        ]
        heapq.heapify(heap)
        self.waiters[state.stream] = heap
        return heap

    def fail_all(self, rejected: Rejected) -> list[PublishReply]:
        """The node stopped serving: nothing waiting can be acknowledged from here."""
        replies = []
        for pending in self.pending:
            if not pending.done:
                self._fill(pending, rejected)
                replies.append(self._finish(pending))
        return replies

    def expire(self, elapsed_ms: int) -> list[PublishReply]:
        replies = []
        while self.pending and (self.pending[0].done or self.pending[0].deadline.fired(elapsed_ms)):
            pending = self.pending.popleft()
            if pending.done:
                continue
            self._fill(
                pending,
                Rejected(
                    errors.TIMEOUT,
                    f"no quorum verified the transaction within {self.timeout_ms} ms; "
                    "retry with the same message id",
                ),
            )
            replies.append(self._finish(pending))
        return replies

    @staticmethod
    def _fill(pending: PendingPublish, rejected: Rejected) -> None:
        for i, result in enumerate(pending.results):
            if result is None:
                pending.results[i] = rejected

    @staticmethod
    def _finish(pending: PendingPublish) -> PublishReply:
        pending.done = True
        results = tuple(r for r in pending.results if r is not None)
        return PublishReply(pending.client, pending.req_id, PublishResults(results))


def conflict(producer_id: str, msg_id: int, seq: int) -> Rejected:
    """The answer to a new message that reuses the key of the message stored at ``seq``."""
    named = f"producer {producer_id!r} message {msg_id}" if producer_id else "this message's key"
    return Rejected(
        errors.CONFLICT,
        f"{named} already names another message (seq {seq}) with other content; it was not "
        "stored: continue the message numbering, or use a new producer id",
    )
