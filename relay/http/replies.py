"""What a node's client port reply means for an HTTP request: the reply it expected, a 307 to a
replica's HTTP port, or a ``Problem``."""

from __future__ import annotations

from typing import TypeVar

from aiohttp import web

from relay import errors
from relay.config import ClusterConfig
from relay.http.problems import NO_HTTP, Problem
from relay.wire.replies import ErrorReply, RedirectReply, Reply

R = TypeVar("R")


class Answers:
    def __init__(self, config: ClusterConfig) -> None:
        self.http = {n.id: n.http_address for n in config.nodes}

    def expect(self, reply: Reply, kind: type[R], request: web.Request) -> R:
        """``reply`` if it is a ``kind``; else the redirect or the refusal it says."""
        if isinstance(reply, kind):
            return reply
        if isinstance(reply, RedirectReply):
            raise self.redirect([n[0] for n in reply.nodes], reply.stream, request)
        if isinstance(reply, ErrorReply):
            raise Problem(reply.code, reply.message)
        raise Problem(errors.PROTOCOL, f"the node answered with {type(reply).__name__}")

    def redirect(self, nodes: list[int], stream: str, request: web.Request) -> web.HTTPException:
        """307 to the first of ``nodes`` that serves HTTP, with the same path and query."""
        for node in nodes:
            address = self.http.get(node)
            if address is not None:
                return web.HTTPTemporaryRedirect(address + request.path_qs)
        return Problem(
            NO_HTTP,
            f"this node does not replicate {stream!r}, and none of its replicas "
            f"{sorted(nodes)} has an http_port",
        )
