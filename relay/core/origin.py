"""This node as an origin: its epoch, its seqs, what it originated and has yet to send.

How this works: a publish gives each new message a seq from the flake clock, chained in its
stream by ``prev`` (the node's previous seq there), and queues it in the outbox that the
flush sends as one ``Replicate`` per stream. The node's last seq per stream is its *claim*;
a heartbeat repeats a stream's claim while a live replica of the stream may not hold it (its
vote is below it), so a peer that lost the last ``Replicate`` of a stream, and every ack and
heartbeat after it, still sees the gap once it hears this node again. When the node's epoch ends
(peers cut it, or a previous incarnation had a higher one) everything of the old epoch that
was not sent is dropped: it can never commit.

Seqs survive a crash through a *reservation*: the node originates only seqs at or below
``reserved``, a bound the shell has made durable (``Reserve`` effect, ``Reserved`` event), and a
restarted node starts its clock above the last durable bound. So seqs from one node strictly
increase across its restarts too (invariant 5), though the floor itself is never written. The
bound runs ``RESERVE_AHEAD_MS`` ahead and is renewed when half of that is left, about one tiny
write a second; only a jump of the floor past it (a peer's clock far ahead) makes publishes
wait, for one write.

*Leads.* In a stream where the node originated nothing for ``lead_ms``, its ack promises
``lead_ms`` ahead of its clock (never ahead of what the clock would allow a moment later), and
its next seq there is stamped above that promise. With one origin active, its peers' promises
then already cover each tx it sends, so a replica folds and votes in the turn the tx arrives:
a publish takes two mesh hops instead of three. The promise is relative to the wall clock, so
no chain of leads moves the stamps further ahead than ``lead_ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat

from relay.core.flake import (
    COUNTER_MAX,
    NODE_ID_MAX,
    SEQ_MAX,
    TIME_SHIFT,
    FlakeClock,
    make_seq,
    seq_unix_ms,
)
from relay.core.messages import ANSWER_BYTES_MAX, Item, Replicate, Tx, within_bytes
from relay.core.timer import Now

_new_tx = tuple.__new__  # a Tx straight from its fields, without the named tuple's checks
RESERVE_AHEAD_MS = 2000  # how far ahead of the clock a seq reservation reaches


class Origin:
    def __init__(
        self, node_id: int, epoch: int, floor: int, reserved: int = SEQ_MAX, lead_ms: int = 0
    ) -> None:
        self.node_id = node_id
        self.lead_ms = lead_ms
        self.originated_at: dict[str, int] = {}  # stream -> elapsed ms of its last new tx
        self.promised: dict[str, int] = {}  # stream -> a lead promise not yet passed
        self.epoch = epoch
        self.clock = FlakeClock(node_id, floor)
        self.reserved = reserved  # the durable bound on the seqs this node may originate
        self.reserving = False  # a Reserve is on its way to the disk
        self.short = False  # a publish found no room: reserve at once
        self.last: dict[str, int] = {}  # stream -> last seq originated in this epoch
        self.unheard: dict[str, None] = {}  # streams whose claim a live replica may lack
        self.outbox: dict[str, list[Tx]] = {}

    def originate(self, stream: str, now: Now, producer_id: str, items: list[Item]) -> list[Tx]:
        """New txs for ``items``, chained in seq order after the stream's last one (and
        above any lead this node promised there)."""
        self.clock.observe(self.promised.pop(stream, 0))
        if self.lead_ms:
            self.originated_at[stream] = now.elapsed_ms
        seqs = self.clock.next_seqs(now.wall_ms, len(items))
        prevs = [self.last.get(stream, 0), *seqs[:-1]]
        msg_ids, payloads, keys, headers = zip(*items, strict=True)
        fields = zip(
            seqs,
            prevs,
            repeat(self.node_id),
            repeat(self.epoch),
            repeat(producer_id),
            msg_ids,
            payloads,
            keys,
            headers,
        )
        txs: list[Tx] = list(map(_new_tx, repeat(Tx), fields))
        self.last[stream] = seqs[-1]
        self.unheard[stream] = None
        self.outbox.setdefault(stream, []).extend(txs)
        return txs

    def repeat_claim(self, stream: str) -> None:
        """A replica of ``stream`` may lack this node's last tx there: heartbeats repeat the
        claim until none does (``claims``)."""
        self.unheard[stream] = None

    def room(self, stream: str, wall_ms: int, count: int) -> bool:
        """Whether ``count`` new seqs stay within the reservation (one ms to spare)."""
        above = max(self.clock.floor, self.promised.get(stream, 0))
        first = max(make_seq(wall_ms, self.node_id), above + 1)
        fits = first + ((count >> 12) + 1 << TIME_SHIFT) <= self.reserved
        self.short |= not fits
        return fits

    def to_reserve(self, wall_ms: int) -> int | None:
        """A new bound to make durable, when less than half the reach is left."""
        if self.reserved == SEQ_MAX or self.reserving:
            return None
        now_ms = max(wall_ms, seq_unix_ms(self.clock.floor))
        if seq_unix_ms(self.reserved) - now_ms > RESERVE_AHEAD_MS // 2 and not self.short:
            return None
        self.reserving, self.short = True, False
        return reservation(now_ms)

    def reserved_upto(self, seq: int) -> None:
        self.reserved = max(self.reserved, seq)
        self.reserving = False

    def promise_now(self, wall_ms: int) -> int:
        """Promise to originate nothing stamped before the current millisecond; the floor."""
        self.clock.observe(make_seq(wall_ms - 1, NODE_ID_MAX, COUNTER_MAX))
        return self.clock.floor

    def promise(self, stream: str, floor: int, now: Now) -> int:
        """What an ack in ``stream`` promises: ``floor``, or a lead if the node is idle there."""
        if not self.lead_ms:
            return floor
        at = self.originated_at.get(stream)
        if at is not None:
            if now.elapsed_ms - at < self.lead_ms:
                return floor
            del self.originated_at[stream]
        lead = make_seq(now.wall_ms + self.lead_ms - 1, NODE_ID_MAX, COUNTER_MAX)
        if lead <= max(floor, self.promised.get(stream, 0)):
            return max(floor, self.promised.get(stream, 0))
        self.promised[stream] = lead
        return lead

    def replicates(self) -> list[Replicate]:
        """What this turn originated, one message per stream; the outbox empties."""
        floor = self.clock.floor
        sent = []
        for stream, txs in self.outbox.items():
            while txs:  # a message stays far below a mesh frame's size limit
                count = within_bytes(txs, ANSWER_BYTES_MAX)
                sent.append(Replicate(stream, self.node_id, self.epoch, floor, tuple(txs[:count])))
                txs = txs[count:]
        self.outbox.clear()
        return sent

    def claims(self, unheard: Callable[[str, int], bool]) -> tuple[tuple[str, int], ...]:
        """The claims a heartbeat repeats: those that ``unheard(stream, claim)`` says a live
        replica may still lack. The others leave the set until a new tx or a peer's vote
        below the claim (``NodeCore``) puts them back."""
        for stream in [s for s in self.unheard if not unheard(s, self.last[s])]:
            del self.unheard[stream]
        return tuple(sorted((s, self.last[s]) for s in self.unheard))

    def restart(self, epoch: int) -> None:
        """Start ``epoch``: nothing of the old one is claimed or sent any more."""
        self.epoch = epoch
        self.promised.clear()  # a lead binds its epoch; the next one starts above the head
        self.originated_at.clear()
        self.last.clear()
        self.unheard.clear()
        self.outbox.clear()


def reservation(now_ms: int) -> int:
    """The bound a reservation made at ``now_ms`` (unix ms, or the floor's time) reaches."""
    return make_seq(now_ms + RESERVE_AHEAD_MS, NODE_ID_MAX, COUNTER_MAX)
