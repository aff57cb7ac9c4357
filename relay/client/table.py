"""A compacted stream read as a table: the newest transaction of each live key."""

from __future__ import annotations

from relay.client.consumer import Consumer, Transaction

POLL_S = 0.5


def newest_by_key(consumer: Consumer) -> list[Transaction]:
    """Read ``consumer`` (started at the earliest) up to the verified head: the newest
    transaction of each key whose newest is not a tombstone (an empty payload), in seq order.
    Transactions without a key are no table's rows and are left out."""
    newest: dict[bytes, Transaction] = {}
    while True:
        for tx in consumer.poll(timeout_s=POLL_S):
            if tx.key is not None:
                newest[tx.key] = tx
        if consumer.at_end():
            break
    return sorted((t for t in newest.values() if t.payload), key=lambda t: t.seq)
