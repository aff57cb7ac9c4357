"""The HTTP server of a node's ``/metrics``: prometheus_client's WSGI app, behind a bearer
token when the cluster file names one.

How this works: with ``[cluster] metrics_token_sha256`` (the hex SHA-256 of a token; the file
holds only the hash, as it is shared), a scrape must send ``Authorization: Bearer <token>``
(Prometheus: ``authorization: {credentials_file: ...}``); any other request is answered 401
without a body. ``relay keys metrics-token`` makes a token and prints its hash. The server runs
in a daemon thread, one thread per request, as ``start_http_server`` does.
"""

from __future__ import annotations

import hmac
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from relay.auth.tokens import token_hash

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are not logged."""


def guarded(app: App, token_sha256: str) -> App:
    """``app`` for requests that carry the token whose hash is ``token_sha256``."""

    def check(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            token_hash(token.strip()), token_sha256
        ):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("WWW-Authenticate", 'Bearer realm="relay"')])
        return [b""]

    return check


def serve(registry: CollectorRegistry, host: str, port: int, token_sha256: str = "") -> None:
    """Serve ``/metrics`` on ``host``:``port`` (IPv4 or IPv6) in a daemon thread
    (``OSError`` if it cannot bind)."""
    app: App = make_wsgi_app(registry)
    if token_sha256:
        app = guarded(app, token_sha256)
    found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    server_class: type[_Server] = type("Server", (_Server,), {"address_family": found[0][0]})
    server: _Server = make_server(host, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
