"""A streaming query's progress reported as a consumer group (option ``group``).

How this works: when Spark commits a micro-batch that ends at seq ``s``, the source appends a
group commit for ``s`` (with the stream's digest there) to the group's stream, exactly as a
``relay.Consumer`` in that group would, so ``relay groups describe`` shows how far the query
has read and how far behind it is. The checkpoint stays the source of truth for exactly-once:
a report is never read back by the source, and one that fails is logged, not raised.
"""

from __future__ import annotations

import logging
import time

from relay import Producer, RelayError
from relay.client.fetcher import Fetcher
from relay.client.groups import commit_payload, group_stream
from spark_consumer.options import SourceOptions

log = logging.getLogger("relay.spark")


def report_progress(fetcher: Fetcher, options: SourceOptions, end_seq: int) -> None:
    if end_seq <= 0:
        return
    deadline = time.monotonic() + options.read_timeout_s
    try:
        reply = None
        while reply is None:  # the digest at end_seq: the one before whatever follows it
            reply = fetcher.fetch(end_seq, 1, 0)
            if reply is None and time.monotonic() > deadline:
                raise TimeoutError(f"no node answered for {fetcher.stream!r}")
        with Producer(
            config=options.config,
            nodes=None if options.config else [a.text for a in options.nodes],
            timeout_s=options.read_timeout_s,
            client_key=options.client_key,
        ) as producer:
            payload = commit_payload(fetcher.stream, end_seq, reply.prev_digest)
            name = group_stream(fetcher.stream, options.group)
            producer.publish(name, payload, key=fetcher.stream)
    except (RelayError, TimeoutError) as exc:
        log.warning("group %s: could not report seq %d: %s", options.group, end_seq, exc)
