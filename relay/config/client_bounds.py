"""How much one client connection may send and hold in flight: the ``[cluster]`` keys that bound
it (``ClientLimits`` in the shell enforces them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


def integers(
    where: str, cluster: dict[str, Any], defaults: object, ranges: dict[str, tuple[int, int]]
) -> dict[str, int]:
    """Each of ``ranges``' keys from ``[cluster]`` (else its value in ``defaults``), checked to
    be an integer in its range; ``SettingsError`` names the first that is not."""
    found: dict[str, int] = {}
    for key, (least, most) in ranges.items():
        value = cluster.get(key, getattr(defaults, key))
        if type(value) is not int or not least <= value <= most:
            raise SettingsError(
                f"{where}: 'cluster.{key}' must be an integer from {least} to {most}, "
                f"got {value!r:.60}"
            )
        found[key] = value
    return found


def parse(where: str, cluster: dict[str, Any], payload_bytes_max: int) -> ClientBounds:
    """The client bounds among ``[cluster]``'s keys; ``SettingsError`` names a bad one."""
    bounds = ClientBounds(**integers(where, cluster, ClientBounds(), RANGES))
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
