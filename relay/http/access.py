"""Who an HTTP request comes from, and what it may do: bearer tokens mapped to the same
permissions as client keys.

With ``client_auth = "keys"`` every request but ``/health``, ``/ready`` and the console's own
files carries ``Authorization: Bearer <token>`` (or, only for a GET of server-sent events, as an
``EventSource`` cannot set a header, ``?access_token=``), and the token's SHA-256 is in
``client_tokens`` (may do everything) or in a ``[[client]]`` table's ``tokens`` (what that table
allows); anything else is answered 401. With ``client_auth = "none"`` the API is open, as the
client port is.
``StreamSlots`` counts the responses each client follows at once.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from aiohttp import web

from relay import errors
from relay.auth.grants import Grant
from relay.auth.tokens import token_hash
from relay.config import ClusterConfig
from relay.http.problems import TOO_MANY, UNAUTHORIZED, Problem

TOKEN_CHARS_MAX = 512


@dataclass(frozen=True, slots=True)
class Access:
    client: str  # who, for the per-client bounds: a token's hash, or an address
    grant: Grant | None  # None: may do everything

    def check_publish(self, stream: str) -> None:
        if self.grant is not None and not self.grant.may_publish(stream):
            raise Problem(errors.FORBIDDEN, self.grant.refusal("publish to", stream))

    def check_consume(self, stream: str) -> None:
        if self.grant is not None and not self.grant.may_consume(stream):
            raise Problem(errors.FORBIDDEN, self.grant.refusal("read", stream))


class Gate:
    def __init__(self, config: ClusterConfig) -> None:
        self.open = config.auth.client_auth != "keys"
        self.everything = frozenset(config.auth.client_tokens)
        self.grants = config.token_grants

    def admit(self, request: web.Request) -> Access:
        """The request's client; ``Problem`` 401 if it needs a token and has no valid one."""
        if self.open:
            return Access(request.remote or "?", None)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if not header and _is_event_source(request):  # it cannot set a header
            token = request.query.get("access_token", "")
        elif header and scheme.lower() != "bearer":
            raise Problem(UNAUTHORIZED, "the Authorization header must be 'Bearer <token>'")
        token = token.strip()
        if not token:
            raise Problem(
                UNAUTHORIZED,
                "this cluster needs a bearer token: send 'Authorization: Bearer <token>' "
                "(relay cluster init writes one to <keys_dir>/client.token; relay keys token "
                "makes more)",
            )
        if len(token) > TOKEN_CHARS_MAX or not token.isascii():
            raise Problem(UNAUTHORIZED, "the bearer token is not one of ours (ASCII, 43 chars)")
        hashed = token_hash(token)
        if any(hmac.compare_digest(hashed, h) for h in self.everything):
            return Access(hashed, None)
        grant = self.grants.get(hashed)
        if grant is None:
            raise Problem(
                UNAUTHORIZED,
                "the bearer token is not one this cluster knows (its SHA-256 is in neither "
                "cluster.client_tokens nor a [[client]] table's tokens)",
            )
        return Access(hashed, grant)


def _is_event_source(request: web.Request) -> bool:
    """A GET of server-sent events: the one request that may carry its token in the URL."""
    wants = request.query.get("format") == "sse" or "text/event-stream" in request.headers.get(
        "Accept", ""
    )
    return request.method == "GET" and wants


class StreamSlots:
    """How many followed responses each client has open, at most ``per_client`` each."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self.open: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.open.values())

    @contextmanager
    def hold(self, access: Access) -> Iterator[None]:
        held = self.open.get(access.client, 0)
        if held >= self.per_client:
            raise Problem(
                TOO_MANY,
                f"this client follows {held} responses already "
                f"(cluster.http_streams_per_client_max); close one first",
            )
        self.open[access.client] = held + 1
        try:
            yield
        finally:
            left = self.open[access.client] - 1
            if left:
                self.open[access.client] = left
            else:
                del self.open[access.client]
