"""Fault injection in the real shell, for chaos tests and operators: off unless the node was
started with ``--admin-port``, and served on its own socket, never the client port.

The hooks act on mesh frames as they arrive (drop from named peers, drop a fraction, delay)
and as they leave (drop a fraction), and can offset the node's clock. A one-way partition
A -> B is ``block_from=[A]`` on B; a symmetric one is that on both sides. ``tamper_payload``
corrupts one stored transaction the way bit rot would: its payload changes, its digest does not,
so only a reader that re-computes the digest chain can tell.
"""

from __future__ import annotations

import logging
import random
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgpack

from relay.core.flake import NODE_ID_MAX
from relay.core.messages import MeshMessage, sender_of
from relay.core.node import NodeCore
from relay.core.timeline import Timeline
from relay.core.untracked import untrack

log = logging.getLogger("relay.node")

ADMIN_KEYS = ("loss_in", "loss_out", "block_from", "delay_ms", "clock_offset_ms")
DAY_MS = 24 * 3600 * 1000
SETTING_BOUNDS = {"delay_ms": (0, 60_000), "clock_offset_ms": (-DAY_MS, DAY_MS)}


class AdminError(ValueError):
    pass


@dataclass(slots=True)
class FaultHooks:
    loss_in: float = 0.0
    loss_out: float = 0.0
    block_from: frozenset[int] = frozenset()
    delay_ms: int = 0
    clock_offset_ms: int = 0
    rng: random.Random = field(default_factory=random.Random)
    delayed: deque[tuple[int, MeshMessage]] = field(default_factory=deque)
    dropped_in: int = 0
    dropped_out: int = 0

    def set(self, settings: dict[str, Any]) -> None:
        """Replace the named settings; refuse unknown keys and bad values (no partial update)."""
        unknown = set(settings) - set(ADMIN_KEYS)
        if unknown:
            raise AdminError(f"unknown fault setting {sorted(unknown)[0]!r}; known: {ADMIN_KEYS}")
        for key in ("loss_in", "loss_out"):
            if key in settings and not (
                isinstance(settings[key], int | float) and 0 <= settings[key] <= 1
            ):
                raise AdminError(f"{key} must be a fraction from 0 to 1")
        if "block_from" in settings and not (
            isinstance(settings["block_from"], list)
            and all(type(n) is int for n in settings["block_from"])
        ):
            raise AdminError("block_from must be a list of node ids")
        for key, (least, most) in SETTING_BOUNDS.items():
            value = settings.get(key, 0)
            if type(value) is not int or not least <= value <= most:
                raise AdminError(f"{key} must be an integer from {least} to {most}")
        if "block_from" in settings and not all(
            0 <= n <= NODE_ID_MAX for n in settings["block_from"]
        ):
            raise AdminError(f"block_from names node ids from 0 to {NODE_ID_MAX}")
        for key, value in settings.items():
            setattr(self, key, frozenset(value) if key == "block_from" else value)

    def clear(self) -> None:
        self.set({"loss_in": 0.0, "loss_out": 0.0, "block_from": [], "delay_ms": 0})

    def status(self) -> dict[str, Any]:
        return {
            "loss_in": self.loss_in,
            "loss_out": self.loss_out,
            "block_from": sorted(self.block_from),
            "delay_ms": self.delay_ms,
            "clock_offset_ms": self.clock_offset_ms,
            "dropped_in": self.dropped_in,
            "dropped_out": self.dropped_out,
        }

    def admit(self, now_ms: int, message: MeshMessage) -> MeshMessage | None:
        """The message if it is to be handled now; None if dropped or held back."""
        if sender_of(message) in self.block_from or (
            self.loss_in and self.rng.random() < self.loss_in
        ):
            self.dropped_in += 1
            return None
        if self.delay_ms:
            self.delayed.append((now_ms + self.delay_ms, message))
            return None
        return message

    def release(self, now_ms: int) -> list[MeshMessage]:
        """Held-back messages whose delay is over."""
        out = []
        while self.delayed and (self.delayed[0][0] <= now_ms or not self.delay_ms):
            out.append(self.delayed.popleft()[1])
        return out

    def keep_outgoing(self) -> bool:
        if self.loss_out and self.rng.random() < self.loss_out:
            self.dropped_out += 1
            return False
        return True


def tamper_payload(timeline: Timeline, seq: int) -> int:
    """Flip the first byte of the payload held at ``seq`` (0: the last verified tx); its seq."""
    if seq == 0:
        seq = timeline.verified_seq
    index = bisect_left(timeline.seqs, seq)
    if index >= len(timeline.seqs) or timeline.seqs[index] != seq:
        raise AdminError(f"this node holds no tx with seq {seq}")
    tx = timeline.txs[index]
    payload = bytes([tx.payload[0] ^ 0xFF]) + tx.payload[1:] if tx.payload else b"\x00"
    timeline.txs[index] = tampered = tx._replace(payload=payload)
    untrack(tampered)  # as the timeline holds every tx (relay/core/untracked.py)
    return seq


def admin_reply(raw: bytes, hooks: FaultHooks, core: NodeCore) -> bytes:
    """The encoded answer to one encoded admin request; a request that is not msgpack, or
    nests too deep, gets an error like any other bad request."""
    try:
        answer = admin_command(msgpack.unpackb(raw, raw=False), hooks, core)
    except (ValueError, RecursionError) as exc:
        return admin_error(f"not a msgpack request: {exc}")
    reply: bytes = msgpack.packb(answer)
    return reply


def admin_error(why: str) -> bytes:
    """The encoded answer to an admin request refused before it was read as a command."""
    reply: bytes = msgpack.packb({"ok": False, "error": why})
    return reply


def admin_command(request: object, hooks: FaultHooks, core: NodeCore) -> dict[str, Any]:
    """Carry out one admin request ``[command, argument]``; the answer to send back."""
    try:
        command, argument = (
            request if isinstance(request, list) and len(request) == 2 else (None, None)
        )
        if command == "set":
            if not isinstance(argument, dict):
                raise AdminError("set takes a map of fault settings")
            hooks.set(argument)
            log.warning("fault hooks set: %s", argument)
        elif command == "clear":
            hooks.clear()
            log.warning("fault hooks cleared")
        elif command == "tamper":
            if not isinstance(argument, dict) or not isinstance(argument.get("stream"), str):
                raise AdminError("tamper takes {stream: name, seq: n (0: the last verified)}")
            state = core.streams.get(argument["stream"])  # a fault, not a decision
            if state is None:
                raise AdminError(f"this node holds no stream {argument['stream']!r}")
            seq = argument.get("seq", 0)
            if type(seq) is not int or not 0 <= seq < 1 << 64:
                raise AdminError("tamper's seq is an integer (0: the last verified tx)")
            seq = tamper_payload(state.timeline, seq)
            log.warning("tampered with the payload of %s seq %d", argument["stream"], seq)
        elif command != "status":
            raise AdminError(
                "commands: [set, {...}], [clear, null], [tamper, {...}], [status, null]"
            )
        return {"ok": True, "faults": hooks.status(), "node": core.status().to_wire()}
    except (AdminError, ValueError, TypeError) as exc:
        return {"ok": False, "error": str(exc)}
