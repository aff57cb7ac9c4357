"""Which streams a query reads, and its offsets: one seq per stream, each named.

How this works: an offset is ``{stream: seq}``, "every verified tx of that stream up to seq",
so a checkpoint says which streams it belongs to. One that names a stream this query does not
subscribe to is refused: reusing a checkpoint for another stream would otherwise read the new
stream from the old one's seq. A pattern subscription asks every node which streams it holds
at each trigger; a stream that appears later joins from its earliest transaction, as a new
Kafka partition does.
"""

from __future__ import annotations

from collections.abc import Mapping

from relay.client.status import statuses
from spark_consumer.options import SourceOptions

LEGACY_KEY = "seq"  # a one-stream query's offset in an older checkpoint: {"seq": S}


def subscribed(options: SourceOptions) -> list[str]:
    """The streams to read now: the names given, or those matching the pattern that any
    node that answers holds."""
    if not options.pattern:
        return list(options.streams)
    answered = [s for s in statuses(list(options.nodes), options.pair(), 2000).values() if s]
    if not answered:
        tried = ", ".join(str(a) for a in options.nodes)
        raise RuntimeError(
            f"relay source: no node answered which streams match {options.pattern!r} "
            f"(tried {tried})"
        )
    return sorted({s.name for st in answered for s in st.streams if options.subscribes(s.name)})


def read_offset(options: SourceOptions, raw: Mapping[str, object]) -> dict[str, int]:
    """An offset Spark hands back (from the checkpoint or a plan), checked against this
    query's subscription."""
    if set(raw) == {LEGACY_KEY} and len(options.streams) == 1:
        return {options.streams[0]: _seq(LEGACY_KEY, raw[LEGACY_KEY])}
    foreign = sorted(str(s) for s in raw if not options.subscribes(str(s)))
    if foreign:
        reads = options.pattern or ", ".join(options.streams)
        raise ValueError(
            f"relay source: the checkpoint's offsets name {', '.join(foreign)}, which this "
            f"query does not read ({reads}): a checkpoint belongs to one query; give this one a "
            "new checkpointLocation"
        )
    return {str(s): _seq(str(s), v) for s, v in raw.items()}


def _seq(stream: str, value: object) -> int:
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise ValueError(f"relay source: the offset of {stream!r} is {value!r}, not a seq")
    return value
