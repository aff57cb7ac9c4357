"""The node's ZAP handler: libzmq asks it, for every CURVE handshake on the node's server
sockets, whether the client's public key may connect under that socket's domain.

It answers in the node's own loop (a REP socket on ``inproc://zeromq.zap.01``), so there is no
thread; a handshake waits at most one loop turn. The mesh admits only the configured nodes,
the client port every key or only the allowlist, the admin port only the admin keys.
"""

from __future__ import annotations

from typing import Any

import zmq
from zmq.utils import z85

ENDPOINT = "inproc://zeromq.zap.01"
REQUESTS_PER_TURN = 1000
ANY = None  # a domain that admits every key (still encrypted)


class ZapHandler:
    def __init__(self, ctx: zmq.Context[Any], admitted: dict[str, dict[str, str] | None]) -> None:
        """``admitted``: per domain, public key (Z85) -> the user id it is known as, or ANY."""
        self.admitted = {
            domain.encode(): (
                None if keys is None else {z85.decode(k): u.encode() for k, u in keys.items()}
            )
            for domain, keys in admitted.items()
        }
        self.sock = ctx.socket(zmq.REP)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(ENDPOINT)

    def answer(self) -> list[tuple[str, str]]:
        """Answer every pending request (the REP socket takes them one at a time); the
        (domain, address) of each connection refused."""
        refused = []
        for _ in range(REQUESTS_PER_TURN):
            try:
                request = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            reply, who = self._verdict(request)
            self.sock.send_multipart(reply)
            if who:
                refused.append(who)
        return refused

    def _verdict(self, request: list[bytes]) -> tuple[list[bytes], tuple[str, str] | None]:
        """The reply to one request, and who was refused (None if admitted)."""
        if len(request) < 6 or request[0] != b"1.0":
            request_id = request[1] if len(request) > 1 else b""
            return [b"1.0", request_id, b"500", b"bad request", b"", b""], ("?", "?")
        _, request_id, domain, address, _, mechanism, *credentials = request
        if domain in self.admitted and mechanism == b"CURVE" and len(credentials) == 1:
            admitted = self.admitted[domain]
            if admitted is ANY:
                return [b"1.0", request_id, b"200", b"OK", b"client", b""], None
            user = admitted.get(credentials[0])
            if user is not None:
                return [b"1.0", request_id, b"200", b"OK", user, b""], None
        who = (domain.decode(errors="replace"), address.decode(errors="replace"))
        return [b"1.0", request_id, b"400", b"key not admitted", b"", b""], who

    def ban(self, domain: str, user: str) -> None:
        """Admit the key known as ``user`` under ``domain`` no more (until a restart)."""
        admitted = self.admitted.get(domain.encode())
        if admitted:
            for key, known in list(admitted.items()):
                if known == user.encode():
                    del admitted[key]

    def close(self) -> None:
        self.sock.close(linger=0)
