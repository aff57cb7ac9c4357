"""What nodes say to each other over the mesh.

Each kind of message travels on one channel (three per stream, plus heartbeats; the mesh codec,
``relay/wire/mesh.py``, picks it by kind): ``Replicate`` travels on the transaction channel,
``StreamAck`` on the write channel, ``RepairRequest``, ``RepairData``, ``SyncRequest`` and
``SyncData`` on the anti-entropy channel, ``Heartbeat`` on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from operator import itemgetter
from typing import NamedTuple

from relay.core.digest import Headers, fold


class Channel(Enum):
    TX = "tx"
    ACK = "ack"
    REPAIR = "ae"
    HEARTBEAT = "hb"


class Tx(NamedTuple):
    """One transaction as it travels between replicas.

    A named tuple rather than a dataclass: it is the one object made per transaction on the
    hot path, and it packs straight into msgpack. CPython's collector would track it for as
    long as it lives (it untracks only exact tuples), so a timeline untracks each tx it holds
    (``relay/core/untracked.py``).
    """

    seq: int
    prev: int  # the origin's previous seq in this stream and epoch; 0 for its first
    origin: int
    epoch: int  # the origin's epoch (incarnation) when it coordinated the tx
    producer_id: str  # "" when the producer named none
    msg_id: int
    payload: bytes
    key: bytes | None = None  # None: no key (an empty key is a key)
    headers: Headers = ()  # (name, value) pairs in the producer's order; names may repeat


# A kept dedup key: (producer id, msg id, seq, digest, content tag); see ``dedup.py``.
KeyRecord = tuple[str, int, int, bytes, int]


class Item(NamedTuple):
    """One message as a producer sends it; the node makes it a ``Tx``."""

    msg_id: int
    payload: bytes
    key: bytes | None = None
    headers: Headers = ()


TX_OVERHEAD_BYTES = 200  # what a held tx costs beyond its payload, key and headers
FETCH_BYTES_MAX = 1 << 20  # a fetch answer's txs (one larger tx still goes), as Kafka's default
ANSWER_BYTES_MAX = 4 << 20  # the txs in one mesh message (a frame may carry 64 MiB): a peer
# handles one in a few ms, so its loop turns stay short


def tx_bytes(tx: Tx) -> int:
    """What holding or sending ``tx`` costs, roughly: byte bounds count this."""
    size = TX_OVERHEAD_BYTES + len(tx.payload)
    if tx.key is not None:
        size += len(tx.key)
    for name, value in tx.headers:
        size += len(name) + len(value)
    return size


_KEY, _HEADERS = itemgetter(7), itemgetter(8)
# A tx's fields as C-speed getters (sort keys, maps over a batch)
seq_of: Callable[[Tx], int] = itemgetter(0)
prev_of: Callable[[Tx], int] = itemgetter(1)
origin_of: Callable[[Tx], int] = itemgetter(2)
epoch_of: Callable[[Tx], int] = itemgetter(3)
producer_id_of: Callable[[Tx], str] = itemgetter(4)
msg_id_of: Callable[[Tx], int] = itemgetter(5)
producer_key_of: Callable[[Tx], tuple[str, int]] = itemgetter(4, 5)  # (producer id, msg id)
payload_of: Callable[[Tx], bytes] = itemgetter(6)


def plain(txs: Sequence[Tx]) -> bool:
    """Whether no tx of ``txs`` has a key or headers (the usual batch), at C speed."""
    return list(map(_KEY, txs)).count(None) == len(txs) and not any(map(_HEADERS, txs))


def txs_bytes(txs: Sequence[Tx]) -> int:
    """``tx_bytes`` summed over ``txs``: a few passes at C speed for a plain batch, else one
    call each."""
    if not plain(txs):
        return sum(map(tx_bytes, txs))
    return TX_OVERHEAD_BYTES * len(txs) + sum(map(len, map(payload_of, txs)))


def within_bytes(txs: Sequence[Tx], bytes_max: int) -> int:
    """How many leading ``txs`` fit in ``bytes_max`` (at least one, so a large tx still goes)."""
    if txs_bytes(txs) <= bytes_max:
        return len(txs)
    count = total = 0
    for tx in txs:
        total += tx_bytes(tx)
        if total > bytes_max and count:
            break
        count += 1
    return count


def fold_tx(previous: bytes, tx: Tx) -> bytes:
    """The digest after ``tx`` on a timeline ending in ``previous``."""
    seq, _, origin, _, producer_id, msg_id, payload, key, headers = tx
    return fold(previous, seq, origin, producer_id, msg_id, payload, key, headers)


@dataclass(frozen=True, slots=True, init=False)
class Replicate:
    """An origin's new transactions for one stream, in seq order, chained by ``prev``."""

    stream: str
    origin: int
    epoch: int
    floor: int  # the origin's promise: it will never originate a seq at or below this
    txs: tuple[Tx, ...]

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        stream: str,
        origin: int,
        epoch: int,
        floor: int,
        txs: tuple[Tx, ...],
    ) -> None:
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "floor", floor)
        object.__setattr__(self, "txs", txs)


@dataclass(frozen=True, slots=True)
class OriginReport:
    """What a replica holds of a suspected origin's epoch: every tx up to ``contig``; or,
    when ``settled``, where the epoch was cut (a decision others adopt as it is). An
    ``answer`` comes from a replica whose lane left that epoch behind without a cut it
    remembers, to a replica that still cuts it; it asks for nothing in return. A
    ``restored`` report comes from a replica that restarted: the last seq of the origin's
    epoch its log held past its verified mark, so peers fold nothing past it without it. A
    settled report is ``waiting`` while its replica lacks txs up to the cut, and then tells
    what it ``held`` of the epoch: a replica whose lane left the epoch behind answers it
    whenever it holds less of it than the cut, and one cutting it too counts ``held`` as its
    report (the cut comes down once every live replica said what it holds); a final cut asks
    nothing."""

    origin: int
    epoch: int
    contig: int
    settled: bool = False
    answer: bool = False  # what a replica holds of an epoch it is not cutting, when asked
    restored: bool = False  # what a restarted replica's unverified tail holds of the epoch
    waiting: bool = False  # settled, and its replica still lacks txs up to the cut
    held: int = 0  # while waiting: every tx of the epoch up to here is held by its replica


@dataclass(frozen=True, slots=True, init=False)
class StreamAck:
    """A replica's promise and vote for one stream.

    ``floor`` and ``origin_last`` are its promise as an origin (it sent every tx it
    originated in this stream up to ``origin_last`` and will originate none at or below
    ``floor``); ``head_seq``/``head_digest`` is its vote: its stable timeline ends there with
    that digest. ``reports`` answer the cut of suspected origins.
    """

    stream: str
    sender: int
    epoch: int
    floor: int
    origin_last: int
    head_seq: int
    head_digest: bytes
    verified_seq: int
    reports: tuple[OriginReport, ...] = ()
    marked_seq: int = 0  # how far it verified the timeline (fsync always: durably, in its log)
    marked_digest: bytes = b""  # its digest there: a mark vouches for one history
    readable_seq: int = 0  # how far a quorum's marks let it serve and acknowledge
    promise: int = 0  # it originates nothing more in this stream at or below this (>= floor)
    retreats: int = 0  # times its stable timeline gave up entries: with the epoch, the votes' round
    synced: bool = True  # it knows its history; one that does not waits for every live peer's word

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        stream: str,
        sender: int,
        epoch: int,
        floor: int,
        origin_last: int,
        head_seq: int,
        head_digest: bytes,
        verified_seq: int,
        reports: tuple[OriginReport, ...] = (),
        marked_seq: int = 0,
        marked_digest: bytes = b"",
        readable_seq: int = 0,
        promise: int = 0,
        retreats: int = 0,
        synced: bool = True,
    ) -> None:
        object.__setattr__(self, "stream", stream)
        object.__setattr__(self, "sender", sender)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "floor", floor)
        object.__setattr__(self, "origin_last", origin_last)
        object.__setattr__(self, "head_seq", head_seq)
        object.__setattr__(self, "head_digest", head_digest)
        object.__setattr__(self, "verified_seq", verified_seq)
        object.__setattr__(self, "reports", reports)
        object.__setattr__(self, "marked_seq", marked_seq)
        object.__setattr__(self, "marked_digest", marked_digest)
        object.__setattr__(self, "readable_seq", readable_seq)
        object.__setattr__(self, "promise", promise)
        object.__setattr__(self, "retreats", retreats)
        object.__setattr__(self, "synced", synced)


@dataclass(frozen=True, slots=True, init=False)
class Heartbeat:
    """A node's liveness and promise: its floor and, per stream, its last originated seq.

    ``accepts`` lists the (node, epoch) pairs this node counts as live origins; a node that
    (re)joins waits to be accepted by every live replica before it coordinates.
    """

    sender: int
    epoch: int
    floor: int
    origin_last: tuple[tuple[str, int], ...]
    accepts: tuple[tuple[int, int], ...]
    leaving: bool = False
    # (node, epoch) of every peer as this node last heard it: a node that restarted with a
    # wall clock behind its previous incarnation's learns it must pick a higher epoch
    epochs: tuple[tuple[int, int], ...] = ()
    # (peer, bucket, digest of the names of the streams both replicate), to find streams missed
    shared: tuple[tuple[int, int, int], ...] = ()

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        sender: int,
        epoch: int,
        floor: int,
        origin_last: tuple[tuple[str, int], ...],
        accepts: tuple[tuple[int, int], ...],
        leaving: bool = False,
        epochs: tuple[tuple[int, int], ...] = (),
        shared: tuple[tuple[int, int, int], ...] = (),
    ) -> None:
        object.__setattr__(self, "sender", sender)
        object.__setattr__(self, "epoch", epoch)
        object.__setattr__(self, "floor", floor)
        object.__setattr__(self, "origin_last", origin_last)
        object.__setattr__(self, "accepts", accepts)
        object.__setattr__(self, "leaving", leaving)
        object.__setattr__(self, "epochs", epochs)
        object.__setattr__(self, "shared", shared)


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """Ask peers for an origin's txs in ``(after_seq, upto_seq]`` of one epoch."""

    stream: str
    requester: int
    origin: int
    origin_epoch: int
    after_seq: int
    upto_seq: int


@dataclass(frozen=True, slots=True)
class RepairData:
    """A peer's answer to a ``RepairRequest``: the txs it holds in the range, chained. A
    ``complete_upto`` above ``after_seq`` says these are every tx of the origin's epoch in
    (``after_seq``, ``complete_upto``]: the sender held the whole range (its lane's contig, or
    the cut where it closed the epoch, reaches it)."""

    stream: str
    sender: int
    origin: int
    origin_epoch: int
    txs: tuple[Tx, ...]
    after_seq: int = 0
    complete_upto: int = 0  # 0: no claim


@dataclass(frozen=True, slots=True)
class SyncRequest:
    """Ask peers for their verified timeline after ``after_seq`` (anti-entropy catch-up).

    Sent by a replica that restarted with empty memory, fell too far behind to repair
    gaps, or whose digest disagrees with its peers.
    """

    stream: str
    requester: int
    after_seq: int


@dataclass(frozen=True, slots=True)
class SyncData:
    """A slice of the sender's verified timeline: ``txs`` follow ``base_seq``/``base_digest``.

    When the sender no longer holds ``after_seq``, the slice starts at the oldest entry it
    holds (a snapshot) and carries the dedup keys of the window before it, so the receiver's
    dedup decisions stay identical to everyone else's.
    """

    stream: str
    sender: int
    requester: int
    base_seq: int
    base_digest: bytes
    txs: tuple[Tx, ...]
    digests: tuple[bytes, ...]
    dedup: tuple[KeyRecord, ...]  # the keys of the window before a snapshot's base
    base_count: int = 0  # txs in the stream's history up to base_seq (the dense index)


MeshMessage = (
    Replicate | StreamAck | Heartbeat | RepairRequest | RepairData | SyncRequest | SyncData
)


def sender_of(message: MeshMessage) -> int:
    """The node a message says sent it: it must be the peer whose connection carried it."""
    if isinstance(message, Replicate):
        return message.origin  # only an origin replicates its own txs
    if isinstance(message, RepairRequest | SyncRequest):
        return message.requester
    return message.sender
