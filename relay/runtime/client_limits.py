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

from relay import errors
from relay.config.client_bounds import ClientBounds
from relay.core.events import Rejected

TOTAL_REQUESTS_MAX = 200_000  # requests in flight over every connection of a node


class ClientLimits:
    def __init__(self, bounds: ClientBounds, total_bytes_max: int = 1 << 62) -> None:
        self.bounds = bounds
        self.total_bytes_max = total_bytes_max  # over every connection (the memory budget)
        self.total_bytes = 0
        # (connection, req id) -> its bytes, and when it arrived (``time.perf_counter_ns``)
        self.open: dict[tuple[bytes, int], tuple[int, int]] = {}
        self.held: dict[bytes, list[int]] = {}  # connection -> [requests, bytes] in flight
        self.waiting: set[tuple[bytes, int]] = set()  # open, but their answers wait to leave

    def admit(self, client: bytes, req_id: int, size: int, arrived_ns: int) -> Rejected | None:
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
        self.open[(client, req_id)] = (size, arrived_ns)
        self.held[client] = [held[0] + 1, held[1] + size]
        return None

    def arrived_ns(self, client: bytes, req_id: int) -> int | None:
        """When the request arrived, while it is open."""
        entry = self.open.get((client, req_id))
        return None if entry is None else entry[1]

    def answer_waits(self, client: bytes, req_id: int) -> None:
        """The request's answer waits to leave: it keeps its place in the connection's share,
        not in the node's total (which bounds the work in the core)."""
        if (client, req_id) in self.open:
            self.waiting.add((client, req_id))

    def done(self, client: bytes, req_id: int) -> None:
        """The request's answer left (or it will get none)."""
        entry = self.open.pop((client, req_id), None)
        if entry is None:
            return
        size = entry[0]
        self.waiting.discard((client, req_id))
        self.total_bytes -= size
        held = self.held[client]
        held[0] -= 1
        held[1] -= size
        if not held[0]:
            del self.held[client]
