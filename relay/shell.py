"""The one place a node's effects are carried out, for the real node and the simulator alike.

How this works: the core decides, the shell does. Each turn the caller hands the shell the
time (``Now``: the real clocks, or simulated ones) and the events it gathered; the shell gives
them to the core and carries out the effects through three ports: the mesh (``MeshPort``:
ZeroMQ sockets, or the simulated network), the clients (``ClientsPort``) and the disk
(``NodeDisk``: the real storage code, on real files or on simulated ones). What the node
reports about itself (verified advances, notices) goes to a ``Reporter``.

The order is the durability argument of ``docs/design.md``. With ``fsync = "always"`` (votes
wait for the disk) the mesh goes first, so peers start on this turn's messages while the disk
works: nothing a broadcast says then depends on this turn's writes (a vote or a mark is only
what the disk already confirmed). Otherwise a vote is the stable head, and the turn's records
reach the page cache before a peer may count it, so a killed process never leaves an
acknowledged tx on fewer than a quorum. A peer's sync from below the memory ring is read
before this turn's writes when the mesh goes first, after them otherwise. Answers go last;
reads from the log are answered a few per turn (each may read and re-check megabytes), after
the turn's writes. What the disk answers at once (a refused write, a reservation already
durable) comes back as events of the next turn (``pending``); what a sync makes durable, when
the disk's runner says it finished (``completed``).
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from relay import errors
from relay.core.events import (
    Broadcast,
    Effect,
    Event,
    LogRead,
    LogSync,
    Notice,
    PeerFault,
    Persist,
    PersistFailed,
    PublishReply,
    PublishRequested,
    ReadReply,
    ReadResult,
    Redirect,
    Rejected,
    Reserve,
    Restored,
    Tick,
    Verified,
)
from relay.core.messages import MeshMessage, StreamAck
from relay.core.node import NodeCore
from relay.core.routing import QUEUE_SUFFIX
from relay.core.timer import Now
from relay.queue.bounds import QueueBounds
from relay.queue.service import INTERNAL, Answer, QueueService
from relay.storage.node_disk import NodeDisk

LOG_READS_PER_TURN = 4


class MeshPort(Protocol):
    def send(self, messages: list[MeshMessage]) -> None:
        """Broadcast a turn's messages to the peers, in order."""

    def fault(self, peer: int, text: str) -> None:
        """A peer sent something that breaks the protocol (the core's ``PeerFault``)."""


class ClientsPort(Protocol):
    def reply(self, reply: PublishReply) -> None:
        """A publish's answer."""

    def read_done(self, client: bytes, req_id: int, body: ReadResult | Redirect | Rejected) -> None:
        """A fetch's answer."""

    def queue_reply(self, client: bytes, req_id: int, answer: Answer) -> None:
        """A work group member's answer."""


class Reporter(Protocol):
    def verified(self, effect: Verified) -> None: ...

    def notice(self, effect: Notice) -> None: ...


class Shell:
    def __init__(
        self,
        node_id: int,
        core: NodeCore,
        disk: NodeDisk,
        mesh: MeshPort,
        clients: ClientsPort,
        reporter: Reporter,
        sends_first: bool,
        queue_bounds: QueueBounds | None = None,
    ) -> None:
        self.node_id = node_id
        self.core = core
        self.disk = disk
        self.mesh = mesh
        self.clients = clients
        self.reporter = reporter
        self.sends_first = sends_first
        self.pending: list[Event] = []  # the disk's and the queues' events, for the next turn
        self.log_reads: deque[tuple[bytes, int, LogRead]] = deque()  # waiting for the disk
        self.queues = QueueService(
            node_id,
            core.routing,
            core.config.quorum_of,
            self._verified_of,
            core.peers.up_nodes,
            queue_bounds or QueueBounds(),
        )

    def turn(self, now: Now, events: list[Event]) -> list[Effect]:
        """One whole turn: the core handles ``events``, the effects are carried out, a few
        log reads answered, and a sync of what was written started."""
        effects = self.handle(now, events)
        self.carry_out(effects, now)
        self.after_turn(now)
        return effects

    def handle(self, now: Now, events: list[Event]) -> list[Effect]:
        """The core's turn over ``events``, less clients' publishes into work groups' control
        streams (refused: only nodes write there), with the work groups' own requests."""
        self.queues.now = now
        taken: list[Event] = []
        for event in events:
            if isinstance(event, PublishRequested) and QUEUE_SUFFIX in event.stream:
                if event.client != INTERNAL:
                    why = f"{event.stream!r} is a work group's control stream: only nodes write it"
                    refused = PublishReply(
                        event.client, event.req_id, Rejected(errors.FORBIDDEN, why)
                    )
                    self.clients.reply(refused)
                    continue
            elif isinstance(event, Tick):
                self.queues.tick(now)
            elif isinstance(event, Restored) and QUEUE_SUFFIX in event.stream:
                self.queues.follow(event.stream)  # its group, folded again from the start
            taken.append(event)
        taken += self.queues.take_events()
        return self.core.handle(now, taken)

    def _verified_of(self, stream: str) -> int:
        state = self.core.streams.get(stream)
        return state.timeline.readable_seq if state is not None else 0

    def take_pending(self) -> list[Event]:
        pending, self.pending = self.pending, []
        return pending

    def completed(self, now: Now) -> list[Event]:
        """What the disk's last sync made durable (when its runner says one finished)."""
        return self.disk.completed(now.elapsed_ms)

    def carry_out(self, effects: list[Effect], now: Now) -> None:
        # writes first (a vote is the stable head): an ack of a stream whose write the disk
        # refused is held back, since its vote and mark are not in this node's page cache (the
        # core owes it again, ``StreamReplica.persist_failed``)
        refused = set() if self.sends_first else self._writes(effects, now)
        outgoing: list[MeshMessage] = []
        for effect in effects:
            if isinstance(effect, Broadcast):
                message = effect.message
                if not (refused and isinstance(message, StreamAck) and message.stream in refused):
                    outgoing.append(message)
            elif isinstance(effect, LogSync):
                sync = self.disk.sync_data(effect, self.node_id)
                if sync is not None:
                    outgoing.append(sync)
        self.mesh.send(outgoing)
        if self.sends_first:
            self._writes(effects, now)
        for effect in effects:
            if isinstance(effect, PublishReply):
                if effect.client == INTERNAL:
                    self.queues.answered(effect.req_id, effect.body)
                else:
                    self.clients.reply(effect)
            elif isinstance(effect, ReadReply):
                read = effect.body
                if isinstance(read, LogRead):
                    self.log_reads.append((effect.client, effect.req_id, read))
                else:
                    self._read_done(effect.client, effect.req_id, read)
            elif isinstance(effect, Verified):
                self.reporter.verified(effect)
                if QUEUE_SUFFIX in effect.stream:
                    self.queues.follow(effect.stream)
                else:
                    self.queues.grew(effect.stream, now)
            elif isinstance(effect, PeerFault):
                self.mesh.fault(effect.peer, effect.text)
            elif isinstance(effect, Notice):
                self.reporter.notice(effect)

    def after_turn(self, now: Now) -> None:
        """Answer a few reads from the log, and start a sync of what the turn wrote."""
        for _ in range(min(LOG_READS_PER_TURN, len(self.log_reads))):
            client, req_id, read = self.log_reads.popleft()
            self._read_done(client, req_id, self.disk.read(read))
        self.disk.after_turn(now.elapsed_ms, self.core.epoch)
        for client, req_id, answer in self.queues.take_replies():
            self.clients.queue_reply(client, req_id, answer)
        self.pending += self.queues.take_events()

    def _read_done(
        self, client: bytes, req_id: int, body: ReadResult | Redirect | Rejected
    ) -> None:
        if client == INTERNAL:
            self.queues.answered(req_id, body)
        else:
            self.clients.read_done(client, req_id, body)

    def _writes(self, effects: list[Effect], now: Now) -> set[str]:
        """Carry out the turn's writes; the streams whose write the disk refused."""
        refused: set[str] = set()
        for effect in effects:
            if isinstance(effect, Persist | Reserve):
                answer = self.disk.carry_out(effect, now.wall_ms, now.elapsed_ms)
                if answer is not None:
                    self.pending.append(answer)
                    if isinstance(answer, PersistFailed):
                        refused.add(answer.stream)
        return refused
