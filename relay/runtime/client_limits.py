"""What one client connection may have in flight, so that no client fills a node's memory or
its loop: requests and their bytes until each is answered, and the size of one request.

How this works: the shell admits each publish and fetch before the core sees it, keyed by the
connection and the request id, and lets it go when its answer leaves. A connection over its
share, or a request that would take the node's requests over their share of the memory budget
(``memory_bytes_max``), is answered ``busy`` at once (the client backs off or goes to another
node); a request over ``request_bytes_max`` never reaches the loop (the socket drops the
connection: ``ZMQ_MAXMSGSIZE``). The settings are ``[cluster]`` keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relay import errors
from relay.core.events import Rejected

TOTAL_REQUESTS_MAX = 200_000  # requests in flight over every connection of a node


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ClientBounds:
    request_bytes_max: int = 8 << 20
    client_inflight_max: int = 256  # requests one connection may have unanswered
    client_inflight_bytes_max: int = 64 << 20
    client_connections_max: int = 10_000  # over all addresses (each holds a descriptor)
    client_connections_per_address_max: int = 1000


KEYS = frozenset(ClientBounds.__dataclass_fields__)
RANGES = {
    "request_bytes_max": (64 << 10, 64 << 20),
    "client_inflight_max": (1, 100_000),
    "client_inflight_bytes_max": (64 << 10, 1 << 30),
    "client_connections_max": (1, 1_000_000),
    "client_connections_per_address_max": (1, 1_000_000),
}


def parse(where: str, cluster: dict[str, Any], payload_bytes_max: int) -> ClientBounds:
    """The client bounds among ``[cluster]``'s keys; ``SettingsError`` names a bad one."""
    defaults = ClientBounds()
    found: dict[str, int] = {}
    for key, (least, most) in RANGES.items():
        value = cluster.get(key, getattr(defaults, key))
        if type(value) is not int or not least <= value <= most:
            raise SettingsError(
                f"{where}: 'cluster.{key}' must be an integer from {least} to {most}, "
                f"got {value!r:.60}"
            )
        found[key] = value
    bounds = ClientBounds(**found)
    if bounds.request_bytes_max < payload_bytes_max + (64 << 10):
        raise SettingsError(
            f"{where}: 'cluster.request_bytes_max' ({bounds.request_bytes_max}) must exceed "
            f"'cluster.payload_bytes_max' ({payload_bytes_max}) by at least 65536, or a "
            "request with one largest message could not be sent"
        )
    if bounds.client_inflight_bytes_max < bounds.request_bytes_max:
        raise SettingsError(
            f"{where}: 'cluster.client_inflight_bytes_max' must be at least "
            "'cluster.request_bytes_max'"
        )
    return bounds


class ClientLimits:
    def __init__(self, bounds: ClientBounds, total_bytes_max: int = 1 << 62) -> None:
        self.bounds = bounds
        self.total_bytes_max = total_bytes_max  # over every connection (the memory budget)
        self.total_bytes = 0
        self.open: dict[tuple[bytes, int], int] = {}  # (connection, req id) -> its bytes
        self.held: dict[bytes, list[int]] = {}  # connection -> [requests, bytes] in flight
        self.waiting: set[tuple[bytes, int]] = set()  # open, but their answers wait to leave

    def admit(self, client: bytes, req_id: int, size: int) -> Rejected | None:
        """None if the request may go on; else its answer (``busy``, or ``bad_request`` for
        a request id already in flight on this connection)."""
        if (client, req_id) in self.open:
            why = f"request id {req_id} is already in flight on this connection"
            return Rejected(errors.BAD_REQUEST, why)
        held = self.held.get(client, [0, 0])
        b = self.bounds
        in_core = len(self.open) - len(self.waiting)
        if held[0] >= b.client_inflight_max or in_core >= TOTAL_REQUESTS_MAX:
            why = f"{held[0]} requests in flight on this connection; wait for answers"
            return Rejected(errors.BUSY, why)
        if held[1] + size > b.client_inflight_bytes_max:
            why = (
                f"{held[1]} bytes of requests in flight on this connection "
                f"(client_inflight_bytes_max {b.client_inflight_bytes_max}); wait for answers"
            )
            return Rejected(errors.BUSY, why)
        if self.total_bytes + size > self.total_bytes_max:
            why = (
                f"the node holds {self.total_bytes} bytes of requests (a quarter of "
                "memory_bytes_max); try again or another node"
            )
            return Rejected(errors.BUSY, why)
        self.total_bytes += size
        self.open[(client, req_id)] = size
        self.held[client] = [held[0] + 1, held[1] + size]
        return None

    def answer_waits(self, client: bytes, req_id: int) -> None:
        """The request's answer waits to leave: it keeps its place in the connection's share,
        not in the node's total (which bounds the work in the core)."""
        if (client, req_id) in self.open:
            self.waiting.add((client, req_id))

    def done(self, client: bytes, req_id: int) -> None:
        """The request's answer left (or it will get none)."""
        size = self.open.pop((client, req_id), None)
        if size is None:
            return
        self.waiting.discard((client, req_id))
        self.total_bytes -= size
        held = self.held[client]
        held[0] -= 1
        held[1] -= size
        if not held[0]:
            del self.held[client]
