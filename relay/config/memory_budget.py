"""A node's memory budget: one bound, ``memory_bytes_max``, shared by what its clients and
streams can make it hold.

How this works: the budget is cut in three shares. Half is for the streams' rings (the core
sheds the oldest verified entries of every ring once they hold more together; readers find
them in the log). A quarter is for answers on their way to clients: half of that for answers
waiting in the outbox (``ClientOutbox``), half for those in the client socket's queues, which
hold ``QUEUED_MAX`` answers per connection, so a fetch answer is cut to this share over
``QUEUED_MAX`` and the open connections (one transaction larger than that still goes). A
quarter is for the bytes of the requests the node holds until it answers them
(``ClientLimits``). What is not in the budget is the process itself (the interpreter, the
modules, each stream's bookkeeping: ``docs/design.md`` says how much) and the mesh's socket
queues.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from relay.core.messages import FETCH_BYTES_MAX

MACHINE_SHARE = 8  # unless told, a node takes an eighth of the machine's memory
BYTES_LEAST = 64 << 20
BYTES_MOST = 1 << 40
FETCH_BYTES_LEAST = 64 << 10  # a fetch answer is never cut below this by the budget


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    total: int

    @property
    def rings(self) -> int:
        return self.total // 2

    @property
    def outbox(self) -> int:
        return self.total // 8

    @property
    def socket_answers(self) -> int:
        return self.total // 8

    @property
    def requests(self) -> int:
        return self.total // 4

    def fetch_bytes(self, connections: int, queued_max: int) -> int:
        """What one fetch answer may hold while ``connections`` are open."""
        share = self.socket_answers // (max(1, connections) * queued_max)
        return max(FETCH_BYTES_LEAST, min(FETCH_BYTES_MAX, share))


def machine_bytes() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def parse(where: str, cluster: dict[str, Any], request_bytes_max: int) -> MemoryBudget:
    """The budget in ``[cluster]``'s ``memory_bytes_max`` (0 or absent: an eighth of this
    machine's memory, at least ``BYTES_LEAST``); ``SettingsError`` names a bad value."""
    value = cluster.get("memory_bytes_max", 0)
    if type(value) is not int or not (value == 0 or BYTES_LEAST <= value <= BYTES_MOST):
        raise SettingsError(
            f"{where}: 'cluster.memory_bytes_max' must be 0 (an eighth of the machine's "
            f"memory) or an integer from {BYTES_LEAST} to {BYTES_MOST}, got {value!r:.60}"
        )
    budget = MemoryBudget(value or max(BYTES_LEAST, machine_bytes() // MACHINE_SHARE))
    if budget.requests < request_bytes_max:
        raise SettingsError(
            f"{where}: 'cluster.memory_bytes_max' ({budget.total}) must be at least four times "
            f"'cluster.request_bytes_max' ({request_bytes_max}): a quarter of it holds requests"
        )
    return budget
