"""What a node reports about itself: typed records, built from the core's state.

``to_wire`` gives the map the client protocol carries (``relay cluster status``, the admin
port, tests and the chaos runner read it); ``NodeStatus.from_wire`` reads one back and names
the field that is missing or of the wrong type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relay.core.stream import StreamReplica


class StatusFormatError(ValueError):
    """A status map that does not have the shape of a node's status."""


@dataclass(frozen=True, slots=True)
class StreamStatus:
    name: str
    replicas: tuple[int, ...]
    head_seq: int
    verified_seq: int
    digest: str  # hex digest at the verified seq ("" if not held)
    unverified_txs: int  # held (queued or stable) but not yet verified here
    mismatches: int
    late_txs: int
    catchup: str
    lanes: tuple[tuple[int, str], ...]  # (origin, lane state)
    log_first_seq: int = 0  # the oldest seq on this node's disk (0: none); the shell fills
    log_txs: int = 0  # these three from the node's log
    log_bytes: int = 0
    recovering: bool = False  # its node started with --recover and it has not caught up yet

    @staticmethod
    def of(state: StreamReplica) -> StreamStatus:
        timeline = state.timeline
        verified_digest = timeline.digest_at(timeline.verified_seq)
        queued = sum(len(lane.queue) for lane in state.lanes.values())
        return StreamStatus(
            name=state.stream,
            replicas=state.replicas,
            head_seq=timeline.head_seq,
            verified_seq=timeline.verified_seq,
            digest=verified_digest.hex() if verified_digest else "",
            unverified_txs=queued + timeline.unverified_count(),
            mismatches=state.votes.mismatches,
            late_txs=state.late_txs,
            catchup=state.catchup.state.value,
            lanes=tuple((o, lane.state.value) for o, lane in sorted(state.lanes.items())),
            recovering=state.recovery is not None,
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "replicas": list(self.replicas),
            "head_seq": self.head_seq,
            "verified_seq": self.verified_seq,
            "digest": self.digest,
            "lag": self.unverified_txs,
            "mismatches": self.mismatches,
            "late_txs": self.late_txs,
            "catchup": self.catchup,
            "lanes": {str(o): s for o, s in self.lanes},
            "log_first_seq": self.log_first_seq,
            "log_txs": self.log_txs,
            "log_bytes": self.log_bytes,
            "recovering": self.recovering,
        }

    @staticmethod
    def from_wire(name: str, raw: object) -> StreamStatus:
        where = f"streams[{name!r}]"
        if not isinstance(raw, dict):
            raise StatusFormatError(f"{where} is not a map")
        lanes = _field(raw, "lanes", dict, where)
        replicas = _field(raw, "replicas", list, where)
        if not all(isinstance(r, int) for r in replicas):
            raise StatusFormatError(f"{where}.replicas must hold node ids")
        try:
            lane_states = tuple(sorted((int(o), str(s)) for o, s in lanes.items()))
        except ValueError:
            raise StatusFormatError(f"{where}.lanes must be keyed by node ids") from None
        return StreamStatus(
            name=name,
            replicas=tuple(replicas),
            head_seq=_field(raw, "head_seq", int, where),
            verified_seq=_field(raw, "verified_seq", int, where),
            digest=_field(raw, "digest", str, where),
            unverified_txs=_field(raw, "lag", int, where),
            mismatches=_field(raw, "mismatches", int, where),
            late_txs=_field(raw, "late_txs", int, where),
            catchup=_field(raw, "catchup", str, where),
            lanes=lane_states,
            log_first_seq=_optional(raw, "log_first_seq", where),
            log_txs=_optional(raw, "log_txs", where),
            log_bytes=_optional(raw, "log_bytes", where),
            recovering=_field(raw, "recovering", bool, where) if "recovering" in raw else False,
        )


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node: int
    epoch: int
    state: str
    peers_up: tuple[int, ...]
    peers_down: tuple[int, ...]
    streams: tuple[StreamStatus, ...]
    storage: str = ""  # what the disk refused, while it refuses ("" when healthy)

    @staticmethod
    def of(
        node: int,
        epoch: int,
        state: str,
        peers_up: dict[int, bool],
        streams: dict[str, StreamReplica],
        storage: str = "",
    ) -> NodeStatus:
        return NodeStatus(
            node=node,
            epoch=epoch,
            state=state,
            peers_up=tuple(sorted(n for n, up in peers_up.items() if up)),
            peers_down=tuple(sorted(n for n, up in peers_up.items() if not up)),
            streams=tuple(StreamStatus.of(s) for _, s in sorted(streams.items())),
            storage=storage,
        )

    def stream(self, name: str) -> StreamStatus | None:
        return next((s for s in self.streams if s.name == name), None)

    def to_wire(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "epoch": self.epoch,
            "state": self.state,
            "peers_up": list(self.peers_up),
            "peers_down": list(self.peers_down),
            "streams": {s.name: s.to_wire() for s in self.streams},
            "storage": self.storage,
        }

    @staticmethod
    def from_wire(raw: object) -> NodeStatus:
        if not isinstance(raw, dict):
            raise StatusFormatError("a status must be a map")
        streams = _field(raw, "streams", dict, "status")
        peers_up = _field(raw, "peers_up", list, "status")
        peers_down = _field(raw, "peers_down", list, "status")
        if not all(isinstance(n, int) for n in [*peers_up, *peers_down]):
            raise StatusFormatError("status.peers_up and peers_down must hold node ids")
        return NodeStatus(
            node=_field(raw, "node", int, "status"),
            epoch=_field(raw, "epoch", int, "status"),
            state=_field(raw, "state", str, "status"),
            peers_up=tuple(peers_up),
            peers_down=tuple(peers_down),
            streams=tuple(StreamStatus.from_wire(str(n), s) for n, s in sorted(streams.items())),
            storage=_field(raw, "storage", str, "status"),
        )


def _field(raw: dict[Any, Any], key: str, kind: type, where: str) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StatusFormatError(f"{where}.{key} must be {kind.__name__}, got {value!r}")
    return value


def _optional(raw: dict[Any, Any], key: str, where: str) -> int:
    """A count a node of an older version does not send: 0 when absent."""
    return _field(raw, key, int, where) if key in raw else 0
