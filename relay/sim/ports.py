"""The simulator's side of the shell's ports: a simulated node's disk (the real storage code on
simulated files, its syncs finished in simulated time), its mesh (the simulated network, with
the checker watching what is sent) and its answers (kept until the checker has looked at the
turn, then handed to the simulated clients).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from relay.core.events import (
    Notice,
    PublishReply,
    ReadReply,
    ReadResult,
    Redirect,
    Rejected,
    Verified,
)
from relay.core.messages import MeshMessage, Replicate, StreamAck
from relay.core.params import CoreParams
from relay.queue.service import Answer as QueueAnswer
from relay.sim.checker import InvariantChecker
from relay.sim.files import SimFiles
from relay.sim.network import SimNetwork
from relay.storage.compactor import InlineCompactions
from relay.storage.node_disk import NodeDisk, restore_window
from relay.storage.settings import StorageSettings
from relay.storage.store import NodeStore

DATA_DIR = Path("/sim/data")
APPENDING_MAX = 16  # append descriptors a simulated node keeps (the seeds with many streams
# give some up and open them again)


class SimSyncRunner:
    """A sync runs when the simulator says its drawn latency has passed (never inline: the
    loop's own small syncs take simulated time too)."""

    inline = False

    def __init__(self) -> None:
        self.run: Callable[[], None] | None = None  # started, not yet finished
        self.due_ms: int | None = None  # when it finishes (drawn once it started)

    def start(self, run: Callable[[], None]) -> None:
        self.run = run

    def finished(self) -> None:
        self.run, self.due_ms = None, None

    def heard(self) -> None:
        pass

    def close(self) -> None:
        self.run, self.due_ms = None, None

    def schedule(self, now_ms: int, rng: random.Random, latency_ms_max: int) -> None:
        """Draw when a sync that just started finishes."""
        if self.run is not None and self.due_ms is None:
            self.due_ms = now_ms + rng.randint(0, latency_ms_max)

    def finish_due(self, now_ms: int) -> bool:
        """Carry out the sync if its time came; whether it did."""
        if self.run is None or self.due_ms is None or self.due_ms > now_ms:
            return False
        self.run()
        return True


def node_disk(
    files: SimFiles,
    node_id: int,
    params: CoreParams,
    settings: StorageSettings,
    settings_of: Callable[[str], StorageSettings] | None = None,
) -> tuple[NodeDisk, SimSyncRunner]:
    """Node ``node_id``'s disk on ``files``: the real store, logs, syncer and compactor (whose
    passes run at once)."""
    store = NodeStore(DATA_DIR / f"node-{node_id}", "sim", node_id, settings, files, settings_of)
    store.appending_max = APPENDING_MAX  # not the host's open-file limit: seeds replay anywhere
    runner = SimSyncRunner()
    return NodeDisk(store, restore_window(params), runner, InlineCompactions()), runner


class SimMesh:
    """What a node broadcasts goes to every other node over the simulated network; the
    checker sees each seq issued and each promise made."""

    def __init__(
        self,
        node_id: int,
        network: SimNetwork,
        peers: list[int],
        checker: InvariantChecker,
        now_ms: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.network = network
        self.peers = [p for p in peers if p != node_id]
        self.checker = checker
        self.now_ms = now_ms

    def send(self, messages: list[MeshMessage]) -> None:
        now = self.now_ms()
        for message in messages:
            if isinstance(message, Replicate):
                for tx in message.txs:
                    self.checker.check_origin_seq(tx.origin, message.stream, tx.seq)
                    self.checker.check_promise_kept(tx.origin, tx.epoch, message.stream, tx.seq)
            elif isinstance(message, StreamAck):
                self.checker.note_promise(
                    message.sender, message.epoch, message.stream, message.promise
                )
            for peer in self.peers:
                self.network.send(now, self.node_id, peer, message)

    def fault(self, peer: int, text: str) -> None:
        pass  # the simulated peers send nothing that breaks the protocol


@dataclass(slots=True)
class SimAnswers:
    """A turn's answers, held until the checker has looked at the turn."""

    held: list[PublishReply | ReadReply] = field(default_factory=list)
    members: list[tuple[bytes, int, QueueAnswer]] = field(default_factory=list)  # work groups'

    def reply(self, reply: PublishReply) -> None:
        self.held.append(reply)

    def queue_reply(self, client: bytes, req_id: int, answer: QueueAnswer) -> None:
        self.members.append((client, req_id, answer))

    def read_done(self, client: bytes, req_id: int, body: ReadResult | Redirect | Rejected) -> None:
        self.held.append(ReadReply(client, req_id, body))

    def take(self) -> list[PublishReply | ReadReply]:
        held, self.held = self.held, []
        return held


class SimReporter:
    """Every verified advance a node announces, noted for the checker."""

    def __init__(self, checker: InvariantChecker, incarnation: int) -> None:
        self.checker = checker
        self.incarnation = incarnation

    def verified(self, effect: Verified) -> None:
        self.checker.note_announced(self.incarnation, effect.stream, effect.seq)

    def notice(self, effect: Notice) -> None:
        pass
