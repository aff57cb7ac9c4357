"""What the HTTP API of a node may take: the ``[cluster]`` keys that bound it.

``http_body_bytes_max`` bounds one request's body (a larger one is answered 413 before it is
read), ``http_requests_max`` the requests a node serves at once (more: 503), and
``http_streams_per_client_max`` the responses one client (a token, or an address where the
cluster needs none) may follow at once (more: 429). A followed response ends after
``http_follow_ms_max``; a reader resumes after its last seq (server-sent events do so by
themselves, with ``Last-Event-ID``). A reader that takes nothing for ``http_write_ms_max`` is cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from relay.config.client_bounds import integers


@dataclass(frozen=True, slots=True)
class HttpBounds:
    http_body_bytes_max: int = 8 << 20
    http_requests_max: int = 256
    http_streams_per_client_max: int = 8
    http_follow_ms_max: int = 3_600_000
    http_write_ms_max: int = 30_000


KEYS = frozenset(HttpBounds.__dataclass_fields__)
RANGES = {
    "http_body_bytes_max": (1 << 10, 64 << 20),
    "http_requests_max": (1, 100_000),
    "http_streams_per_client_max": (1, 100_000),
    "http_follow_ms_max": (1000, 7 * 86_400_000),
    "http_write_ms_max": (100, 3_600_000),
}


def parse(where: str, cluster: dict[str, Any]) -> HttpBounds:
    """The HTTP bounds among ``[cluster]``'s keys; ``SettingsError`` names a bad one."""
    return HttpBounds(**integers(where, cluster, HttpBounds(), RANGES))
