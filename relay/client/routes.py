"""Where a producer sends each stream's messages, and what it accepts as a key and headers.

How this works: ``Routes`` keeps one node per stream (the one that answered last, or the one a
redirect named) and puts a node that failed aside for a while; ``key_of`` and ``headers_of``
turn the caller's key and headers into the bytes the record carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from relay.client.directory import NodeAddress
from relay.core.digest import Headers

HeadersIn = Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]]


@dataclass(slots=True)
class Routes:
    """Which node to send each stream to, and which nodes to avoid for a while."""

    order: list[NodeAddress]
    by_stream: dict[str, NodeAddress] = field(default_factory=dict)
    avoid_until: dict[NodeAddress, float] = field(default_factory=dict)

    def pick(self, stream: str, now: float) -> NodeAddress | None:
        """The node for ``stream``; None while every node is put aside (``ready_in``): a
        producer that tried again at once, with every node down, would make a connection per
        attempt, thousands a second."""
        chosen = self.by_stream.get(stream)
        if chosen is not None and self.avoid_until.get(chosen, 0) <= now:
            return chosen
        for address in self.order:
            if self.avoid_until.get(address, 0) <= now:
                self.by_stream[stream] = address
                return address
        return None

    def ready_in(self, now: float) -> float:
        """Seconds until a node put aside may be tried again (0: one may be now)."""
        return max(0.0, min(self.avoid_until.get(a, 0) for a in self.order) - now)

    def avoid(self, address: NodeAddress, now: float, seconds: float) -> None:
        self.avoid_until[address] = now + seconds
        for stream, chosen in list(self.by_stream.items()):
            if chosen == address:
                del self.by_stream[stream]

    def prefer(self, stream: str, addresses: list[NodeAddress]) -> None:
        for address in addresses:
            if address not in self.order:
                self.order.append(address)
        if addresses:
            self.by_stream[stream] = addresses[0]


def key_of(key: bytes | str | None) -> bytes | None:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise TypeError(f"a key is bytes or str, not {type(key).__name__}")


def headers_of(headers: HeadersIn | None) -> Headers:
    """Headers as (name, bytes value) pairs, from a mapping or a sequence of pairs."""
    if not headers:
        return ()
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    found = []
    for name, value in pairs:
        if not isinstance(name, str) or not name:
            raise TypeError(f"a header name is a non-empty str, not {name!r:.40}")
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, bytes):
            raise TypeError(f"header {name!r} must be bytes or str, not {type(value).__name__}")
        found.append((name, value))
    return tuple(found)
