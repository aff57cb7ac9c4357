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

from relay import errors
from relay.client.anchor import Anchor
from relay.client.fetcher import Fetcher
from relay.core.digest import DIGEST_BYTES, fold
from relay.core.flake import make_seq, seq_unix_ms
from relay.core.routing import GROUP_SUFFIX

LOOK_BACK_MS = 60_000  # the first window looked back over for the last commit


@dataclass(frozen=True, slots=True)
class Committed:
    stream: str
    seq: int
    digest: bytes
    at_seq: int  # the commit's own seq in the group stream (its time)


def group_stream(stream: str, group: str) -> str:
    if not group or any(c in group for c in "*?[] \t\r\n\0"):
        raise ValueError(f"a group name is non-empty, without spaces or glob characters: {group!r}")
    return f"{stream}{GROUP_SUFFIX}{group}"


def parse_group_stream(name: str) -> tuple[str, str] | None:
    """(stream, group) of a group stream's name, or None for another stream."""
    stream, sep, group = name.rpartition(GROUP_SUFFIX)
    return (stream, group) if sep and stream and group else None


def commit_payload(stream: str, seq: int, digest: bytes) -> bytes:
    return json.dumps({"stream": stream, "seq": seq, "digest": digest.hex()}).encode()


def read_committed(
    fetcher: Fetcher, timeout_s: float, anchor: Anchor | None = None
) -> Committed | None:
    """The last commit in the group stream ``fetcher`` reads; None if there is none yet.
    The commit must chain to the digest before it and, with an ``anchor``, a second replica
    must agree on it, so one node cannot move a group. ``TimeoutError`` if no node answers
    in time; ``CommitError`` for a transaction there that is not a well-formed commit."""
    deadline = time.monotonic() + timeout_s
    last = _last_seq(fetcher, deadline)
    if last == 0:
        return None
    while True:
        reply = fetcher.fetch(last - 1, 1, 0)
        if reply is not None and reply.rows:
            break
        _check(fetcher, deadline)
        time.sleep(0.02)  # a node that has not verified it yet
    row = reply.rows[0]
    chained = fold(
        reply.prev_digest,
        row.seq,
        row.origin,
        row.producer_id,
        row.msg_id,
        row.payload,
        row.key,
        row.headers,
    )
    if chained != row.digest:
        raise errors.DigestMismatchError(
            "digest_mismatch", f"{fetcher.stream!r} seq {row.seq} does not chain"
        )
    if anchor is not None and not anchor.confirm(fetcher.node, [row.seq], [row.digest], timeout_s):
        raise TimeoutError(f"no second replica confirmed {fetcher.stream!r} seq {row.seq}")
    return commit_of(fetcher.stream, row.seq, row.payload)


class CommitError(errors.RelayError):
    """A group stream's last transaction is not a commit: ``relay groups reset`` writes one."""

    def __init__(self, stream: str, seq: int, why: str) -> None:
        super().__init__(
            "bad_commit", f"{stream!r} seq {seq} is not a group commit ({why}); reset the group"
        )


def commit_of(name: str, at_seq: int, payload: bytes) -> Committed:
    """The commit a group stream's record holds; ``CommitError`` if it holds none."""
    try:
        found = json.loads(payload)
    except (ValueError, RecursionError):
        raise CommitError(name, at_seq, "not JSON") from None
    if not isinstance(found, dict):
        raise CommitError(name, at_seq, "not an object")
    seq, digest = found.get("seq"), found.get("digest")
    stream = parse_group_stream(name)
    if type(seq) is not int or not 0 <= seq < 1 << 64:
        raise CommitError(name, at_seq, "no seq")
    if not isinstance(digest, str) or len(digest) != 2 * DIGEST_BYTES:
        raise CommitError(name, at_seq, "no digest")
    if stream is None or found.get("stream") != stream[0]:
        raise CommitError(name, at_seq, "another stream's")
    try:
        return Committed(stream[0], seq, bytes.fromhex(digest), at_seq)
    except ValueError:
        raise CommitError(name, at_seq, "a digest that is not hex") from None


def _last_seq(fetcher: Fetcher, deadline: float) -> int:
    """The group stream's last readable seq (0: none), found by looking back over windows
    that grow tenfold, so a long group stream is not counted from its start."""
    while True:
        head = fetcher.fetch(0, 0, 0)
        if head is not None:
            break
        _check(fetcher, deadline)
    if head.verified_seq == 0:
        return 0
    window_ms = LOOK_BACK_MS
    while True:
        after = max(0, make_seq(seq_unix_ms(head.verified_seq) - window_ms, 0, 0) - 1)
        spanned = fetcher.span(after, head.verified_seq, 0, 1)
        if spanned is None:
            _check(fetcher, deadline)
            continue
        found = [b for b in spanned.bounds if b[2]]
        if found:
            return found[-1][0]
        if after == 0:
            return 0
        window_ms *= 10


def _check(fetcher: Fetcher, deadline: float) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"no node answered for {fetcher.stream!r} in time")
