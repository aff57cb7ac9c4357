"""Consumer groups: a group's committed position in a stream, kept in the cluster itself.

How this works: a group's commits for stream ``S`` are transactions of the stream
``S.__group.<group>`` (as Kafka keeps offsets in ``__consumer_offsets``), so they are
replicated, quorum-verified, durable and repaired exactly as every other transaction, with no
second mechanism to argue for. A commit is a JSON payload ``{"stream", "seq", "digest"}``
(keyed by the stream): the seq a consumer of the group has processed up to and the stream's
digest there. The committed position is the last commit: a reader asks any node for the group
stream's verified head (``span``) and fetches the transaction there. A consumer that resumes
from a commit also resumes its chain: its first batch must chain from the committed digest.

The group stream needs a replica like any stream: the config's patterns must cover its name
(``orders.*`` covers ``orders.eu.__group.billing``; an exact ``orders`` pattern does not, and
a commit is then refused with ``no_replicas``). Its retention is the cluster's retention: a
group idle for longer than ``retention_ms`` loses its position, as Kafka's offset retention.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from relay.client.fetcher import Fetcher

SUFFIX = ".__group."


@dataclass(frozen=True, slots=True)
class Committed:
    stream: str
    seq: int
    digest: bytes
    at_seq: int  # the commit's own seq in the group stream (its time)


def group_stream(stream: str, group: str) -> str:
    if not group or any(c in group for c in "*?[] \t\r\n\0"):
        raise ValueError(f"a group name is non-empty, without spaces or glob characters: {group!r}")
    return f"{stream}{SUFFIX}{group}"


def parse_group_stream(name: str) -> tuple[str, str] | None:
    """(stream, group) of a group stream's name, or None for another stream."""
    stream, sep, group = name.rpartition(SUFFIX)
    return (stream, group) if sep and stream and group else None


def commit_payload(stream: str, seq: int, digest: bytes) -> bytes:
    return json.dumps({"stream": stream, "seq": seq, "digest": digest.hex()}).encode()


def read_committed(fetcher: Fetcher, timeout_s: float) -> Committed | None:
    """The last commit in the group stream ``fetcher`` reads; None if there is none yet.
    ``TimeoutError`` if no node answers in time; a malformed commit raises ``ValueError``."""
    deadline = time.monotonic() + timeout_s
    while True:
        spanned = fetcher.span(0, 0, 0, 1, False)
        if spanned is not None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"no node answered for {fetcher.stream!r} in {timeout_s} s")
    bounds = [b for b in spanned.bounds if b[2]]
    if not bounds:
        return None
    last_seq = bounds[-1][0]
    while True:
        reply = fetcher.fetch(last_seq - 1, 1, 0, False)
        if reply is not None and reply.rows:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"no node served {fetcher.stream!r} seq {last_seq} in {timeout_s} s")
        time.sleep(0.02)  # a node that has not verified it yet
    row = reply.rows[0]
    found = json.loads(row.payload)
    if not isinstance(found, dict) or not isinstance(found.get("seq"), int):
        raise ValueError(f"{fetcher.stream!r} seq {row.seq} is not a group commit")
    digest = bytes.fromhex(str(found.get("digest", "")))
    return Committed(str(found.get("stream", "")), found["seq"], digest, row.seq)
