"""relay: a quorum-replicated relay cluster.

The client API: ``Producer`` publishes to any node; ``Consumer`` iterates a stream's
verified transactions from any node.
"""

from relay.client.consumer import Consumer, Transaction
from relay.client.producer import Ack, Producer, PublishFuture
from relay.errors import DataLossError, DigestMismatchError, NoQuorumError, RelayError

__all__ = [
    "Ack",
    "Consumer",
    "DataLossError",
    "DigestMismatchError",
    "NoQuorumError",
    "Producer",
    "PublishFuture",
    "RelayError",
    "Transaction",
]
