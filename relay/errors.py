"""Error codes shared by nodes and clients, and the exceptions clients raise.

Codes travel on the wire; each says whose move it is:

- ``unavailable``: this node cannot take the request now (joining, no quorum up); try another.
- ``timeout``: no quorum verified the transaction in time; it may still be delivered.
  Retrying with the same producer id and message id cannot duplicate it.
- ``not_committed``: the transaction was dropped (its coordinator was cut); retry.
- ``no_replicas``: no node replicates the stream; fix the cluster config or the stream name.
- ``not_found``: the stream is not declared, and its ``[[stream]]`` block lets no publish create
  it (``create = false``).
- ``bad_request``: the request itself is wrong (malformed frame, bad stream name, too large).
- ``conflict``: the producer id and message id already name a message with other content (a
  producer restarted with a fixed id that numbers its messages from the start again); the new
  message was not stored. Continue the numbering (a producer journal does) or use a new id.
- ``busy``: this connection has as many requests (or bytes of them) in flight as a node lets
  one client have; wait for answers before sending more, or try another node.
- ``storage``: this node's disk refuses writes (full, I/O error); it acknowledges nothing
  until the disk takes writes again. Try another node.
- ``protocol`` (raised by clients, never sent): a node's reply broke the protocol.
- ``journal_full`` (raised by producers, never sent): the producer's journal holds
  ``journal_bytes_max`` of unacknowledged messages, and it was asked to raise rather than wait.
"""

from __future__ import annotations

UNAVAILABLE = "unavailable"
TIMEOUT = "timeout"
NOT_COMMITTED = "not_committed"
NO_REPLICAS = "no_replicas"
BAD_REQUEST = "bad_request"
NOT_FOUND = "not_found"
PROTOCOL = "protocol"
STORAGE = "storage"
CONFLICT = "conflict"
FENCED = "fenced"  # a newer producer took over this producer id
JOURNAL_FULL = "journal_full"
BUSY = "busy"
AUTH = "auth"  # a node refused this client's CURVE key
FORBIDDEN = "forbidden"  # the client's [[client]] table does not allow the request

RETRYABLE = frozenset({UNAVAILABLE, TIMEOUT, NOT_COMMITTED, STORAGE, BUSY})


class RelayError(Exception):
    """A request the cluster answered with an error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class NoQuorumError(RelayError):
    """No node could get the transaction verified by a quorum in time."""


class DataLossError(RelayError):
    """A consumer asked for transactions no node holds any more."""


class DigestMismatchError(RelayError):
    """What a consumer received does not chain to the digests the cluster reported."""


class ProtocolError(RelayError):
    """A node's reply does not have the shape of the protocol: the node is at fault."""

    def __init__(self, message: str) -> None:
        super().__init__(PROTOCOL, message)


class JournalFullError(RelayError):
    """A producer's journal is full of unacknowledged messages (``journal_full="raise"``)."""
