"""Catching up: whether a replica knows its stream's history, and when it asks for it.

How this works (the argument is in docs/design.md): a replica starts UNSYNCED (no history:
it may not fold, vote or serve reads). It becomes SYNCED at genesis when every live peer
reports that nothing is verified yet, or by adopting a peer's verified slice (a sync). A
SYNCED replica whose timeline a peer's vote contradicts is DIVERGED until its verified seq
moves or it adopts or refolds. It asks for a sync while UNSYNCED with peers verified, while
DIVERGED, and when *stuck*: peers vote ahead of its verified seq, or it holds an unverified tail
with enough peers up to verify it, and its verified seq has not moved for ``stuck_after_ms``.
Stuck for twice that with nobody verified further ("no quorum on a digest"), it refolds its
unverified tail: txs of its lanes' current epochs fold again, those of an epoch that ended
(a tx its origin sent into a cut it never reached) are dropped. Every state change goes
through the table.

``slice_for`` and ``slice_problem`` are the two halves of a sync: what a peer sends (a
verified slice after the asker's verified seq, or a snapshot from its oldest entry) and what
the asker checks before adopting it (that the slice chains from its base).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from relay.core.messages import Tx, fold_tx
from relay.core.timeline import Timeline
from relay.core.timer import Timeout


class CatchupState(Enum):
    UNSYNCED = "unsynced"
    SYNCED = "synced"
    DIVERGED = "diverged"

    __hash__ = object.__hash__  # members are singletons: a C hash for the tables' keys


class CatchupInput(Enum):
    GENESIS_AGREED = "genesis agreed"  # every live peer reports nothing verified yet
    ADOPTED = "adopted"  # a peer's verified slice was adopted
    CONTRADICTED = "contradicted"  # a peer's vote contradicts our stable timeline
    VERIFIED_MOVED = "verified moved"
    REFOLDED = "refolded"  # the unverified tail was given up to be folded again

    __hash__ = object.__hash__  # members are singletons: a C hash for the tables' keys


ST, IN = CatchupState, CatchupInput
TRANSITIONS: dict[tuple[CatchupState, CatchupInput], CatchupState] = {
    (ST.UNSYNCED, IN.GENESIS_AGREED): ST.SYNCED,
    (ST.UNSYNCED, IN.ADOPTED): ST.SYNCED,
    (ST.UNSYNCED, IN.CONTRADICTED): ST.UNSYNCED,  # votes do not count before we know history
    (ST.UNSYNCED, IN.VERIFIED_MOVED): ST.UNSYNCED,
    (ST.UNSYNCED, IN.REFOLDED): ST.UNSYNCED,
    (ST.SYNCED, IN.GENESIS_AGREED): ST.SYNCED,
    (ST.SYNCED, IN.ADOPTED): ST.SYNCED,
    (ST.SYNCED, IN.CONTRADICTED): ST.DIVERGED,
    (ST.SYNCED, IN.VERIFIED_MOVED): ST.SYNCED,
    (ST.SYNCED, IN.REFOLDED): ST.SYNCED,
    (ST.DIVERGED, IN.GENESIS_AGREED): ST.DIVERGED,
    (ST.DIVERGED, IN.ADOPTED): ST.SYNCED,
    (ST.DIVERGED, IN.CONTRADICTED): ST.DIVERGED,
    (ST.DIVERGED, IN.VERIFIED_MOVED): ST.SYNCED,  # a quorum agrees with us after all
    (ST.DIVERGED, IN.REFOLDED): ST.SYNCED,
}
del ST, IN


class CatchupAction(Enum):
    NONE = "none"
    SYNC = "sync"  # ask the peers for their verified timeline
    REFOLD = "refold"  # give up the unverified tail and fold it again
    GENESIS = "genesis"  # synced at genesis just now: fold what waited, and say so


@dataclass(frozen=True, slots=True, init=False)
class PeerView:
    """What the replica knows of its live peers' votes, for one decision."""

    live: int  # live peer replicas
    verified_known: int  # how many of them reported their verified seq
    any_verified: bool  # one of them verified something
    verified_ahead: bool  # one of them verified beyond our verified seq
    heads_ahead: bool  # one of them votes a head beyond our verified seq

    # written out, so that mypyc compiles it (docs/design.md, Compiled)
    def __init__(
        self,
        live: int,
        verified_known: int,
        any_verified: bool,
        verified_ahead: bool,
        heads_ahead: bool,
    ) -> None:
        object.__setattr__(self, "live", live)
        object.__setattr__(self, "verified_known", verified_known)
        object.__setattr__(self, "any_verified", any_verified)
        object.__setattr__(self, "verified_ahead", verified_ahead)
        object.__setattr__(self, "heads_ahead", heads_ahead)


class Catchup:
    __slots__ = ("progress", "state")

    def __init__(self, stuck_after_ms: int) -> None:
        self.state = CatchupState.UNSYNCED
        self.progress = Timeout(stuck_after_ms)  # runs while peers are ahead of us

    @property
    def synced(self) -> bool:
        return self.state is not CatchupState.UNSYNCED

    def apply(self, event: CatchupInput, elapsed_ms: int) -> None:
        self.state = TRANSITIONS[(self.state, event)]
        if event is not CatchupInput.CONTRADICTED:
            self.progress.stop()  # progress, or a fresh start: the stuck clock restarts

    def on_tick(
        self, elapsed_ms: int, peers: PeerView, quorum: int, unverified_tail: bool
    ) -> CatchupAction:
        """What to do now; a replica at genesis that every live peer agrees on syncs here."""
        if self.state is CatchupState.UNSYNCED:
            if peers.any_verified:
                return CatchupAction.SYNC
            if peers.verified_known == peers.live and peers.live + 1 >= quorum:
                self.apply(CatchupInput.GENESIS_AGREED, elapsed_ms)
                return CatchupAction.GENESIS
            return CatchupAction.NONE
        diverged = self.state is CatchupState.DIVERGED
        alone_ahead = unverified_tail and peers.live + 1 >= quorum
        if not diverged and not peers.heads_ahead and not alone_ahead:
            self.progress.stop()
            return CatchupAction.NONE
        self.progress.start(elapsed_ms)
        stuck_ms = self.progress.age_ms(elapsed_ms)
        if (
            stuck_ms >= 2 * self.progress.after_ms
            and not peers.verified_ahead
            and (peers.heads_ahead or unverified_tail)
        ):
            return CatchupAction.REFOLD  # no quorum on a digest: nobody can sync us
        if diverged or stuck_ms >= self.progress.after_ms:
            return CatchupAction.SYNC
        return CatchupAction.NONE


class Vouchers:
    """Who offered each sync base this replica cannot check against its own history.

    Adopting a slice from a base this replica does not hold as verified replaces what it
    holds (a snapshot). One peer's word is not enough for that, since it may be the one node
    that lies: a base is adopted once ``needed`` distinct peers offered it, enough that with
    this replica a quorum holds it and never fewer than two. While one peer vouches for a
    base, the next sync asks from that base, so the other peers answer from it too."""

    __slots__ = ("ask_after", "by_base", "needed")

    KEPT_MAX = 16  # distinct bases remembered; a peer offering many cannot grow this

    def __init__(self, quorum: int) -> None:
        self.needed = max(2, quorum - 1)
        self.by_base: dict[tuple[int, bytes, int], set[int]] = {}
        self.ask_after: int | None = None

    def vouch(self, sender: int, base_seq: int, base_digest: bytes, base_count: int) -> bool:
        """``sender`` offered this base (and the txs of the stream's history up to it, which
        no digest covers: the peers must agree on it too); True once enough distinct peers
        did."""
        key = (base_seq, base_digest, base_count)
        if key not in self.by_base and len(self.by_base) >= self.KEPT_MAX:
            del self.by_base[next(iter(self.by_base))]
        peers = self.by_base.setdefault(key, set())
        peers.add(sender)
        if len(peers) >= self.needed:
            return True
        self.ask_after = base_seq
        return False

    def ask_next_after(self, seq: int) -> None:
        """The next sync asks from ``seq``: a slice agreed with this replica up to there."""
        self.ask_after = seq

    def next_ask(self) -> int | None:
        """Where to ask the next sync from, once: a base that waits for a second voice, or
        where a slice that agreed with us all the way ended (``TimelineRebuild.adopt``)."""
        ask, self.ask_after = self.ask_after, None
        return ask

    def clear(self) -> None:
        self.by_base.clear()
        self.ask_after = None


def slice_for(
    timeline: Timeline, after_seq: int, limit: int
) -> tuple[int, bytes, range, bool] | None:
    """What to answer a sync request: (base seq, base digest, indexes, is a snapshot)."""
    if timeline.verified_seq <= after_seq:
        return None
    base_digest = timeline.digest_at(after_seq) if after_seq else None
    if after_seq == 0 and timeline.trimmed_seq == 0:
        base_digest = timeline.trimmed_digest  # genesis
    snapshot = base_digest is None
    base_seq = timeline.trimmed_seq if snapshot else after_seq
    start, indexes = timeline.read_verified(base_seq, limit, timeline.verified_seq)
    return base_seq, timeline.digest_before(start), range(start, start + len(indexes)), snapshot


def slice_problem(base_digest: bytes, txs: tuple[Tx, ...], digests: tuple[bytes, ...]) -> str:
    """Why a sync slice cannot be adopted as it is ("" if it chains from its base)."""
    if len(txs) != len(digests):
        return "a sync slice with a digest count that does not match its txs"
    chain = base_digest
    previous = 0
    for tx, digest in zip(txs, digests, strict=True):
        if tx.seq <= previous:
            return f"a sync slice whose seqs do not ascend at seq {tx.seq}"
        previous = tx.seq
        chain = fold_tx(chain, tx)
        if chain != digest:
            return f"a sync slice whose digests do not chain at seq {tx.seq}"
    return ""
