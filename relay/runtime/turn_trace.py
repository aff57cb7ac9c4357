"""A trace of the node's loop turns, for finding where a publish's time goes.

How this works: with ``relay node --trace FILE`` each turn that handled input is recorded as
(start, end) on the monotonic clock in nanoseconds (one clock for every process of the machine,
so traces of several nodes line up), with when the core got the turn's events, when the shell
began carrying out its effects and when it had (so a turn splits into reading and decoding, the
core, the effects, and what follows them: a few log reads and the sync of what the turn wrote,
which runs in the loop when it is small), the CPU the loop's thread spent in each of the four
(the wall time also holds waits for a core the machine's other processes held), and the kinds
of the events it took and of the effects it carried out. The last
``TURNS_MAX`` turns are kept in memory and written to FILE as JSON lines when the node stops.
``scripts/trace_publish.sh`` lines them up against a producer's publishes.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from itertools import pairwise
from pathlib import Path

from relay.core.events import Effect, Event, MeshReceived

TURNS_MAX = 200_000
Stamps = tuple[int, int, int, int, int]  # start, core, effects, after, end (monotonic ns)


def kind_of(item: Event | Effect) -> str:
    """An event's or effect's kind; a mesh message's by its message."""
    if isinstance(item, MeshReceived):
        return type(item.message).__name__
    message = getattr(item, "message", None)
    return f"{type(item).__name__}:{type(message).__name__}" if message else type(item).__name__


class TurnTrace:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.turns: deque[tuple[Stamps, Stamps, dict[str, int], dict[str, int]]] = deque(
            maxlen=TURNS_MAX
        )

    def turn(self, stamps: Stamps, cpu: Stamps, events: list[Event], effects: list[Effect]) -> None:
        """A turn: ``stamps`` are its start, when the core got its events, when the shell
        began carrying out the effects, when it had, and its end; ``cpu`` the thread's CPU
        clock then."""
        if events or effects:
            took = Counter(kind_of(e) for e in events)
            did = Counter(kind_of(e) for e in effects)
            self.turns.append((stamps, cpu, dict(took), dict(did)))

    def write(self) -> None:
        with self.path.open("w") as out:
            for (start, core, effects, after, end), cpu, took, did in self.turns:
                turn = {"start": start, "core": core, "effects": effects, "after": after}
                turn["end"] = end
                spent = [b - a for a, b in pairwise(cpu)]  # ns: in, core, out, after
                out.write(json.dumps({**turn, "cpu": spent, "in": took, "out": did}) + "\n")
