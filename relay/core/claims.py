"""What a peer may claim about time: no epoch, promise or seq far ahead of this node's clock.

How this works: epochs are wall-clock milliseconds and seqs carry one, and a node takes every
promise and seq it hears into its own flake clock (a hybrid logical clock). Believed blindly,
one message claiming a time years ahead would drag every seq the cluster stamps there, and a
heartbeat naming an epoch of 2^62 would make every later message of that peer look stale. A
restart or a clock within ``CLOCK_AHEAD_MAX_MS`` of ours explains any honest claim, so a
message claiming more is a protocol fault of its sender: it is dropped whole. The bound is
checked against this node's wall clock, never its flake clock, so no chain of messages can
ratchet it forward; a step back of the wall clock after the node started does not count (the
node judges by the later of its wall clock and where its monotonic clock says the wall clock
should be). A node started with a clock that far behind the others hears nothing it believes
and fences itself, which is the safe side.
"""

from __future__ import annotations

from relay.core.flake import seq_unix_ms
from relay.core.messages import (
    Heartbeat,
    MeshMessage,
    RepairData,
    Replicate,
    StreamAck,
    SyncData,
    Tx,
    seq_of,
)

CLOCK_AHEAD_MAX_MS = 60_000  # how far ahead of this node's wall clock a peer may be


def too_far_ahead(message: MeshMessage, wall_ms: int, self_id: int) -> str:
    """Why ``message`` claims a time no honest peer can ("" if it does not)."""
    limit = wall_ms + CLOCK_AHEAD_MAX_MS
    for what, ms in _times(message, self_id):
        if ms > limit:
            return f"claimed {what} {ms - wall_ms} ms ahead of this node's clock"
    return ""


def _times(message: MeshMessage, self_id: int) -> list[tuple[str, int]]:
    """(what, unix ms) of every epoch and seq a message asks this node to believe."""
    if isinstance(message, Heartbeat):
        known = [e for n, e in message.epochs if n == self_id]
        return [
            ("an epoch", message.epoch),
            ("a promise", seq_unix_ms(message.floor)),
            *(("this node's epoch", e) for e in known),
            *(("a claim", seq_unix_ms(last)) for _, last in message.origin_last),
        ]
    if isinstance(message, Replicate):
        return [
            ("an epoch", message.epoch),
            ("a promise", seq_unix_ms(message.floor)),
            *_latest(message.txs),
        ]
    if isinstance(message, StreamAck):
        return [
            ("an epoch", message.epoch),
            ("a promise", seq_unix_ms(max(message.floor, message.promise))),
            ("a vote", seq_unix_ms(message.head_seq)),
            ("a claim", seq_unix_ms(message.origin_last)),
        ]
    if isinstance(message, RepairData):
        return [("an epoch", message.origin_epoch), *_latest(message.txs)]
    if isinstance(message, SyncData):
        return [("a base", seq_unix_ms(message.base_seq)), *_latest(message.txs)]
    return []


def _latest(txs: tuple[Tx, ...]) -> list[tuple[str, int]]:
    if not txs:
        return []
    return [("a seq", seq_unix_ms(max(map(seq_of, txs))))]
