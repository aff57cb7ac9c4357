"""The storage keys of ``[cluster]``: how the log syncs, rolls and is retained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FSYNC_MODES = ("always", "interval", "never")


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

    @property
    def votes_wait(self) -> bool:
        return self.fsync == "always"


KEYS = {f for f in StorageSettings.__dataclass_fields__}


def parse(where: str, cluster: dict[str, Any]) -> StorageSettings:
    """The storage settings among ``[cluster]``'s keys; ``SettingsError`` names a bad one."""
    defaults = StorageSettings()
    fsync = cluster.get("fsync", defaults.fsync)
    if fsync not in FSYNC_MODES:
        raise SettingsError(
            f"{where}: 'cluster.fsync' must be one of {', '.join(FSYNC_MODES)}, got {fsync!r}"
        )
    numbers: dict[str, int] = {}
    for key in KEYS - {"fsync"}:
        value = cluster.get(key, getattr(defaults, key))
        if type(value) is not int or value < 0:
            raise SettingsError(
                f"{where}: 'cluster.{key}' must be a non-negative integer, got {value!r}"
            )
        numbers[key] = value
    for key, least in (("fsync_interval_ms", 1), ("segment_bytes", 4096), ("segment_ms", 1000)):
        if numbers[key] < least:
            raise SettingsError(f"{where}: 'cluster.{key}' must be at least {least}")
    return StorageSettings(fsync=fsync, **numbers)
