"""relay: a quorum-replicated relay cluster.

The client API: ``Producer`` publishes to any node; ``Consumer`` iterates a stream's
verified transactions from any node; ``Worker`` claims and settles a stream's jobs as a member
of a work group. The clients are imported on first use, so importing
``relay.core`` (pure) or ``relay.errors`` does not load sockets and threads.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from relay.compiled import install
from relay.errors import DataLossError, DigestMismatchError, NoQuorumError, RelayError
from relay.gc_tuning import tune_gc

install()  # before any compiled module is imported: compiled, or every one from source

if TYPE_CHECKING:
    from relay.client.consumer import Consumer, Index, Transaction
    from relay.client.futures import Ack, PublishFuture
    from relay.client.producer import Producer
    from relay.client.worker import Job, Worker

_LAZY = {
    "Consumer": "relay.client.consumer",
    "Transaction": "relay.client.consumer",
    "Index": "relay.client.consumer",
    "Ack": "relay.client.futures",
    "Producer": "relay.client.producer",
    "PublishFuture": "relay.client.futures",
    "Job": "relay.client.worker",
    "Worker": "relay.client.worker",
}

__all__ = [
    "Ack",
    "Consumer",
    "DataLossError",
    "DigestMismatchError",
    "Index",
    "Job",
    "NoQuorumError",
    "Producer",
    "PublishFuture",
    "RelayError",
    "Transaction",
    "Worker",
    "tune_gc",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'relay' has no attribute {name!r}")
    return getattr(import_module(module), name)
