"""What every room of ``NodeCore`` shares: the node's parts, and how a stream is reached.

``MeshIntake``, ``PublishIntake`` and ``LogEvents`` are mixins of ``NodeCore``; each declares
here, once, the parts of the node it uses, and finds (or creates) a stream's replica and marks
it active the same way.
"""

from __future__ import annotations

from relay.core.events import Effect
from relay.core.origin import Origin
from relay.core.params import CoreParams
from relay.core.peers import Peers
from relay.core.stream import StreamReplica
from relay.core.streams import StreamSet


class NodeParts:
    node_id: int
    params: CoreParams
    origin: Origin
    peers: Peers
    stream_set: StreamSet
    streams: dict[str, StreamReplica]
    storage_error: str  # what the disk refused last, until a write succeeds
    elapsed_ms: int
    wall_ms: int  # the wall clock of the turn (ms)
    _effects: list[Effect]

    @property
    def epoch(self) -> int:
        return self.origin.epoch

    def _stream(self, name: str) -> StreamReplica | None:
        return self.stream_set.ensure(name, self.epoch, self.peers.states)

    def _touch(self, name: str) -> None:
        self.stream_set.touch(name)
