"""The storage keys of ``[cluster]``: how the log syncs, rolls and is retained. A
``[[stream]]`` block sets the per-stream ones (``STREAM_KEYS``) for the streams it matches."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

FSYNC_MODES = ("always", "interval", "never")
CLEANUP_POLICIES = ("delete", "compact")


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class StorageSettings:
    fsync: str = "always"  # always: a vote waits for fdatasync; interval; never
    fsync_interval_ms: int = 100
    segment_bytes: int = 64 << 20
    segment_ms: int = 3_600_000
    retention_ms: int = 0  # 0: keep forever
    retention_bytes: int = 0  # per stream; 0: no bound
    retention_txs: int = 0  # per stream; 0: no bound
    cleanup: str = "delete"  # compact: sealed segments keep the newest tx of each key
    delete_retention_ms: int = 86_400_000  # how long a compacted stream keeps a tombstone
    schema: bytes = b""  # the fingerprint of the stream's schema, in each new segment's header
    schemas: frozenset[bytes] = frozenset()  # every fingerprint a segment header may carry

    @property
    def votes_wait(self) -> bool:
        return self.fsync == "always"


KEYS = {f for f in StorageSettings.__dataclass_fields__} - {"cleanup", "schema", "schemas"}
STREAM_KEYS = KEYS - {"fsync", "fsync_interval_ms"}  # and cleanup, which only a block sets


def parse(where: str, cluster: dict[str, Any]) -> StorageSettings:
    """The storage settings among ``[cluster]``'s keys; ``SettingsError`` names a bad one."""
    defaults = StorageSettings()
    fsync = cluster.get("fsync", defaults.fsync)
    if fsync not in FSYNC_MODES:
        raise SettingsError(
            f"{where}: 'cluster.fsync' must be one of {', '.join(FSYNC_MODES)}, got {fsync!r}"
        )
    return replace(defaults, fsync=fsync, **_numbers(where, "cluster", cluster, KEYS, defaults))


def for_stream(
    where: str, label: str, block: dict[str, Any], base: StorageSettings
) -> StorageSettings:
    """``base`` with what a ``[[stream]]`` block (``label``) sets of its stream keys."""
    cleanup = block.get("cleanup", base.cleanup)
    if cleanup not in CLEANUP_POLICIES:
        raise SettingsError(
            f"{where}: '{label}.cleanup' must be one of {', '.join(CLEANUP_POLICIES)}, "
            f"got {cleanup!r:.40}"
        )
    keys = STREAM_KEYS & set(block)
    return replace(base, cleanup=cleanup, **_numbers(where, label, block, keys, base))


def _numbers(
    where: str, label: str, table: dict[str, Any], keys: set[str], base: StorageSettings
) -> dict[str, Any]:
    numbers: dict[str, Any] = {}
    for key in keys - {"fsync"}:
        value = table.get(key, getattr(base, key))
        if type(value) is not int or value < 0:
            raise SettingsError(
                f"{where}: '{label}.{key}' must be a non-negative integer, got {value!r:.40}"
            )
        numbers[key] = value
    for key, least in (("fsync_interval_ms", 1), ("segment_bytes", 4096), ("segment_ms", 1000)):
        if numbers.get(key, least) < least:
            raise SettingsError(f"{where}: '{label}.{key}' must be at least {least}")
    return numbers
