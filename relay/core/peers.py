"""The other nodes as this one hears them: epochs, liveness, promises. Knows no streams.

How this works: every mesh message names its sender's epoch (incarnation). A message of an
older epoch is stale and ignored; a newer epoch means the peer restarted. Each peer has two
timers on elapsed time, both reset whenever it is heard: ``heard`` (within ``fence_after_ms``,
the input to fencing: did this node hear a quorum of the cluster?) and ``silence`` (after
``suspect_after_ms`` the peer is suspected and its epoch cut). Time spent fenced is not a
peer's silence: when the node serves again every silence timer restarts. A peer whose promise
stops following the ones this node sends (``frozen``) holds every stream back as surely as a
silent one, and is suspected the same way.
"""

from __future__ import annotations

from collections import deque
from enum import Enum

from relay.core.fencing import FenceInput, quorum_input
from relay.core.timer import Timeout


class Heard(Enum):
    STALE = "stale"  # an older epoch: ignore the message
    AGAIN = "again"  # nothing new about the peer
    CAME_UP = "came up"  # it was down (or never heard), same epoch
    NEW_EPOCH = "new epoch"  # it restarted


class Peer:
    __slots__ = ("accepts", "behind_at", "epoch", "floor", "heard", "silence", "up", "up_since")

    def __init__(self, fence_after_ms: int, suspect_after_ms: int) -> None:
        self.epoch = 0
        self.up = False
        self.up_since = 0  # when it last came up or started an epoch (elapsed ms)
        self.floor = 0  # its latest promise in this epoch
        self.accepts: frozenset[tuple[int, int]] = frozenset()  # the origins it admits
        self.behind_at = -1  # when this node last left frames of it unread (elapsed ms)
        self.heard = Timeout(fence_after_ms)  # running and not fired: heard recently
        self.silence = Timeout(suspect_after_ms)  # fired: suspect it


class Peers:
    def __init__(
        self, self_id: int, ids: list[int], fence_after_ms: int, suspect_after_ms: int
    ) -> None:
        self.self_id = self_id
        self.by_id: dict[int, Peer] = {
            n: Peer(fence_after_ms, suspect_after_ms) for n in ids if n != self_id
        }
        self.floors: dict[int, tuple[int, int]] = {}  # peer -> (epoch, floor)
        self.states: dict[int, tuple[bool, int]] = dict.fromkeys(self.by_id, (False, 0))
        self.promise_lag_max_ms = 2 * suspect_after_ms
        self.sent: deque[tuple[int, int]] = deque()  # (elapsed ms, floor) of our heartbeats

    def hear(self, elapsed_ms: int, sender: int, epoch: int) -> Heard:
        peer = self.by_id.get(sender)
        if peer is None or epoch < peer.epoch:
            return Heard.STALE
        peer.heard.reset(elapsed_ms)
        peer.silence.reset(elapsed_ms)
        if epoch > peer.epoch:
            peer.epoch = epoch
            peer.floor = 0
            peer.accepts = frozenset()
            outcome = Heard.NEW_EPOCH
        elif not peer.up:
            outcome = Heard.CAME_UP
        else:
            return Heard.AGAIN
        peer.up = True
        peer.up_since = elapsed_ms
        self.floors[sender] = (epoch, peer.floor)
        self.states[sender] = (True, epoch)
        return outcome

    def admits(self, sender: int, origins: frozenset[tuple[int, int]]) -> None:
        """The sender (heard, current epoch) takes txs of these (origin, epoch) pairs."""
        self.by_id[sender].accepts = origins

    def admitting(self, origin: tuple[int, int], nodes: tuple[int, ...]) -> dict[int, bool]:
        """Which of ``nodes`` (this node's peers among them) admit ``origin``."""
        return {n: origin in p.accepts for n, p in self.by_id.items() if n in nodes}

    def promise(self, sender: int, floor: int) -> None:
        """The sender (heard, current epoch) will originate nothing at or below ``floor``."""
        peer = self.by_id[sender]
        if floor > peer.floor:
            peer.floor = floor
            self.floors[sender] = (peer.epoch, floor)

    def promised(self, elapsed_ms: int, floor: int) -> None:
        """This node's heartbeat promised ``floor``: every honest peer hears it and takes it
        into its own clock, so its promises reach it within a heartbeat or two."""
        self.sent.append((elapsed_ms, floor))
        due = elapsed_ms - self.promise_lag_max_ms
        while len(self.sent) >= 2 and self.sent[1][0] <= due:
            self.sent.popleft()

    def behind(self, elapsed_ms: int, peers: frozenset[int]) -> None:
        """This node left frames of ``peers`` unread: it hears them late."""
        for n in peers:
            if n in self.by_id:
                self.by_id[n].behind_at = elapsed_ms

    def frozen(self, elapsed_ms: int) -> list[tuple[int, int]]:
        """(peer, its promise) of the up peers whose promise has not reached the floor this
        node sent ``promise_lag_max_ms`` ago: a promise that does not move stalls every
        stream's folding, so such a peer is treated as a silent one. A peer whose frames
        this node left unread within that time is not judged: its promise is late because
        this node reads it late (thousands of streams acking at once after a restart)."""
        due = elapsed_ms - self.promise_lag_max_ms
        if not self.sent or self.sent[0][0] > due:
            return []
        floor = self.sent[0][1]
        return [
            (n, p.floor)
            for n, p in self.by_id.items()
            if p.up and p.up_since <= due and p.behind_at < due and p.floor < floor
        ]

    def down(self, node: int) -> None:
        peer = self.by_id[node]
        peer.up = False
        self.states[node] = (False, peer.epoch)

    def fence_input(self, elapsed_ms: int) -> FenceInput:
        heard = 1 + sum(
            1 for p in self.by_id.values() if p.heard.running and not p.heard.fired(elapsed_ms)
        )
        return quorum_input(heard, len(self.by_id) + 1)

    def silent(self, elapsed_ms: int) -> list[tuple[int, int]]:
        """(peer, ms silent) of the up peers silent past ``suspect_after_ms``."""
        return [
            (n, p.silence.age_ms(elapsed_ms))
            for n, p in self.by_id.items()
            if p.up and p.silence.fired(elapsed_ms)
        ]

    def forgive_silence(self, elapsed_ms: int) -> None:
        """The node serves again: silence while it was fenced is not the peers' fault."""
        for peer in self.by_id.values():
            if peer.up:
                peer.silence.reset(elapsed_ms)

    def up_nodes(self) -> set[int]:
        return {self.self_id} | {n for n, p in self.by_id.items() if p.up}
