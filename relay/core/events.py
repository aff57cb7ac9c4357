"""What the shell hands the core (events) and what the core asks of the shell (effects)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from relay.core.messages import FETCH_BYTES_MAX, Item, KeyRecord, MeshMessage, Tx

# --- events ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, init=False)
class MeshReceived:
    message: MeshMessage

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, message: MeshMessage) -> None:
        object.__setattr__(self, "message", message)


@dataclass(frozen=True, slots=True, init=False)
class PublishRequested:
    client: bytes  # the shell's opaque address of the requester
    req_id: int
    stream: str
    producer_id: str  # "" for none: then no dedup
    items: tuple[Item, ...]

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        client: bytes,
        req_id: int,
        stream: str,
        producer_id: str,
        items: tuple[Item, ...],
    ) -> None:
        object.__setattr__(self, "client", client)
        object.__setattr__(self, "req_id", req_id)
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "producer_id", producer_id)
        object.__setattr__(self, "items", items)


@dataclass(frozen=True, slots=True)
class FetchRequested:
    """A consumer asks for verified txs after ``after_seq``; with ``wait_ms`` > 0 the answer
    waits (long poll) until there is something new or the wait runs out. The answer holds at
    most ``bytes_max`` of txs (the shell's memory budget may ask for less than the default)."""

    client: bytes
    req_id: int
    stream: str
    after_seq: int
    limit: int
    wait_ms: int
    bytes_max: int = FETCH_BYTES_MAX
    from_index: int | None = None  # instead of after_seq: from the entry of this dense index
    # (a negative one counts back from the readable end: -N, the last N)


@dataclass(frozen=True, slots=True, init=False)
class Tick:
    """Time passed: check timers (heartbeats, suspicion, publish timeouts, cuts, repairs).

    The shell sends one every few milliseconds; other events do not run the timers.
    ``behind`` names the peers whose frames this node left unread since the last tick (its
    drain hit its bound): what it hears of them is late, so their promises look late too."""

    behind: frozenset[int] = frozenset()

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, behind: frozenset[int] = frozenset()) -> None:
        object.__setattr__(self, "behind", behind)


@dataclass(frozen=True, slots=True)
class ShutdownRequested:
    """The node is stopping: tell the peers so they cut it at once."""


@dataclass(frozen=True, slots=True, init=False)
class Persisted:
    """The stream's log holds write generation ``generation`` up to ``seq`` on disk, and the
    verified mark ``mark``: the disk says which mark its sync covered (a mark written while an
    earlier sync was running is not covered by it, though it names the same head)."""

    stream: str
    generation: int
    seq: int
    mark: int = 0

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, stream: str, generation: int, seq: int, mark: int = 0) -> None:
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "mark", mark)


@dataclass(frozen=True, slots=True)
class PersistFailed:
    """The disk refused the stream's last write (``why``), or with ``sync`` a sync of its
    writes: nothing of it counts as durable."""

    stream: str
    why: str
    sync: bool = False


@dataclass(frozen=True, slots=True)
class Reserved:
    """The node's seq reservation up to ``seq`` is durable."""

    seq: int


@dataclass(frozen=True, slots=True)
class Restored:
    """A stream's log as this node's disk holds it, read back at start (before any other
    event): the stable timeline after ``base_seq``, and how far it was verified."""

    stream: str
    base_seq: int
    base_digest: bytes
    txs: tuple[Tx, ...]
    digests: tuple[bytes, ...]
    verified_seq: int
    dedup_keys: tuple[KeyRecord, ...]  # (producer, msg id, seq, digest, content tag)
    log_base: int = 0  # the log holds every seq after this one
    log_chained: int = 0  # and chains from this one on (compaction kept less before it)
    base_count: int = 0  # txs in the stream's history up to base_seq


@dataclass(frozen=True, slots=True)
class Retained:
    """Retention removed the stream's oldest segments, or compaction rewrote them: the log now
    starts after ``base_seq``, and chains from ``chained_seq`` on (what it holds before that
    is compacted: readers get it, a peer cannot fold it)."""

    stream: str
    base_seq: int
    chained_seq: int = 0


Event = (
    MeshReceived
    | PublishRequested
    | FetchRequested
    | Tick
    | ShutdownRequested
    | Persisted
    | PersistFailed
    | Reserved
    | Restored
    | Retained
)


# --- outcomes the core returns to clients ------------------------------------------------


class Acked(NamedTuple):
    """A tx stored at ``seq``; the stream's digest after it. A named tuple: one is made per
    acknowledged tx."""

    seq: int
    digest: bytes


@dataclass(frozen=True, slots=True)
class Rejected:
    """An expected failure: ``code`` is one of the codes in relay.errors."""

    code: str
    message: str
    try_nodes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Redirect:
    stream: str
    nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PublishResults:
    results: tuple[Acked | Rejected, ...]


@dataclass(frozen=True, slots=True)
class ReadResult:
    stream: str
    txs: tuple[Tx, ...]
    digests: tuple[bytes, ...]
    prev_digest: bytes  # the digest just before txs[0] (or at after_seq when txs is empty)
    verified_seq: int
    earliest_seq: int
    lost: bool  # the reader asked for txs already trimmed from the buffer
    prevs: tuple[bytes, ...] = ()  # read from a compacted segment: each tx's own prev digest
    through_seq: int = 0  # and the txs are all it kept after the read's start up to here
    first_index: int = 0  # the dense index of txs[0] (the rest follow it one by one)
    indexes: tuple[int, ...] = ()  # read from a compacted segment: each tx's own index


@dataclass(frozen=True, slots=True)
class LogRead:
    """A read the memory ring no longer holds: the shell answers it from the log, with the
    verified txs in (``after_seq``, ``upto_seq``], at most ``limit`` and ``bytes_max``."""

    stream: str
    after_seq: int
    upto_seq: int
    limit: int
    verified_seq: int
    bytes_max: int = FETCH_BYTES_MAX
    from_index: int = -1  # >= 0: from the entry of this dense index, not after after_seq
    from_held: bool = False  # and an index below the log's first entry starts at that entry


@dataclass(frozen=True, slots=True)
class LogSpan:
    """A span that starts below the memory ring: the shell counts (``after_seq``,
    ``trimmed_seq``] in the log and the rest, up to ``upto_seq``, in memory."""

    stream: str
    after_seq: int
    upto_seq: int
    max_txs: int
    parts: int
    readable_seq: int
    trimmed_seq: int


@dataclass(frozen=True, slots=True)
class SpanResult:
    """Where a range of verified txs can be cut into parts, without the txs themselves.

    ``bounds`` holds one ``(seq, digest, count)`` per part, in order: the part's last seq, the
    rolling digest there and how many txs it holds. Readers plan with it (a Spark batch) and
    check what they fetch against the digests.
    """

    stream: str
    bounds: tuple[tuple[int, bytes, int], ...]
    verified_seq: int
    earliest_seq: int
    lost: bool


# --- effects -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, init=False)
class Broadcast:
    message: MeshMessage

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, message: MeshMessage) -> None:
        object.__setattr__(self, "message", message)


@dataclass(frozen=True, slots=True, init=False)
class PublishReply:
    client: bytes
    req_id: int
    body: PublishResults | Rejected | Redirect

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self, client: bytes, req_id: int, body: PublishResults | Rejected | Redirect
    ) -> None:
        object.__setattr__(self, "client", client)
        object.__setattr__(self, "req_id", req_id)
        object.__setattr__(self, "body", body)


@dataclass(frozen=True, slots=True)
class ReadReply:
    client: bytes
    req_id: int
    body: ReadResult | LogRead | Redirect | Rejected


@dataclass(frozen=True, slots=True)
class LogSync:
    """Answer a peer's sync from the log: the verified txs in (``after_seq``, ``upto_seq``],
    at most ``limit``, as a ``SyncData`` from this node to ``requester``."""

    stream: str
    requester: int
    after_seq: int
    upto_seq: int
    limit: int


@dataclass(frozen=True, slots=True, init=False)
class Verified:
    stream: str
    seq: int

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, stream: str, seq: int) -> None:
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "seq", seq)


@dataclass(frozen=True, slots=True, init=False)
class Persist:
    """Make the stream's log after ``base_seq`` equal to ``txs``."""

    stream: str
    generation: int
    base_seq: int
    base_digest: bytes  # the digest at base_seq
    reset: bool  # drop the whole log first: it starts over at base_seq
    txs: tuple[Tx, ...]
    digests: tuple[bytes, ...]
    verified_seq: int  # how far a quorum verified: the log may record it
    rewind: bool = False  # the cut reaches below the verified mark (``TimelineRebuild.adopt``)
    base_count: int = 0  # with ``reset``: txs in the stream's history up to base_seq

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        stream: str,
        generation: int,
        base_seq: int,
        base_digest: bytes,
        reset: bool,
        txs: tuple[Tx, ...],
        digests: tuple[bytes, ...],
        verified_seq: int,
        rewind: bool = False,
        base_count: int = 0,
    ) -> None:
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "base_seq", base_seq)
        object.__setattr__(self, "base_digest", base_digest)
        object.__setattr__(self, "reset", reset)
        object.__setattr__(self, "txs", txs)
        object.__setattr__(self, "digests", digests)
        object.__setattr__(self, "verified_seq", verified_seq)
        object.__setattr__(self, "rewind", rewind)
        object.__setattr__(self, "base_count", base_count)


@dataclass(frozen=True, slots=True, init=False)
class Reserve:
    """Make the bound on this node's seqs durable: after a restart it starts above it."""

    seq: int

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(self, seq: int) -> None:
        object.__setattr__(self, "seq", seq)


@dataclass(frozen=True, slots=True)
class Notice:
    """Something an operator may want to see; ``kind`` is a short stable label."""

    kind: str
    text: str


@dataclass(frozen=True, slots=True)
class PeerFault:
    """A peer broke the protocol (what it sent is not taken; ``text`` follows its name)."""

    peer: int
    text: str


Effect = (
    Broadcast
    | PublishReply
    | ReadReply
    | Verified
    | Persist
    | Reserve
    | LogSync
    | Notice
    | PeerFault
)
