"""The node's turn trace: what a turn took and did, and where its time went, as JSON lines."""

import json
from pathlib import Path

from relay.core.events import Broadcast, MeshReceived, Persist, Tick
from relay.core.messages import Heartbeat
from relay.runtime.turn_trace import TurnTrace


def test_a_turn_is_written_with_its_stamps_and_kinds(tmp_path: Path) -> None:
    trace = TurnTrace(tmp_path / "node.trace")
    heartbeat = Heartbeat(2, 5, 0, (), ())
    persist = Persist("s", 0, 0, b"", False, (), (), 0)
    took = [MeshReceived(heartbeat), Tick(), Tick()]
    trace.turn((100, 130, 190, 240, 500), (7, 27, 67, 97, 350), took, [persist])
    trace.turn((300, 301, 302, 303, 304), (0, 1, 2, 3, 4), [], [])  # an idle turn is not kept
    trace.turn((400, 410, 420, 430, 431), (100, 105, 112, 120, 121), [], [Broadcast(heartbeat)])
    trace.write()
    lines = [json.loads(line) for line in (tmp_path / "node.trace").open()]
    assert lines == [
        {
            "start": 100,
            "core": 130,
            "effects": 190,
            "after": 240,
            "end": 500,
            "cpu": [20, 40, 30, 253],
            "in": {"Heartbeat": 1, "Tick": 2},
            "out": {"Persist": 1},
        },
        {
            "start": 400,
            "core": 410,
            "effects": 420,
            "after": 430,
            "end": 431,
            "cpu": [5, 7, 8, 1],
            "in": {},
            "out": {"Broadcast:Heartbeat": 1},
        },
    ]
