"""Durations and points in time as the CLI takes them: ``30s``, ``10m``, ``+2h``, ISO-8601."""

from __future__ import annotations

import re
import time
from datetime import datetime

import click

UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)?$")


def duration_ms(text: str, option: str) -> int:
    """``500ms``, ``30s``, ``10m``, ``2h``, ``1d``, or a number of milliseconds."""
    found = _DURATION.match(text.strip())
    if found is None:
        raise click.BadParameter(
            f"{text!r} is not a duration such as 30s or 10m", param_hint=option
        )
    return int(found.group(1)) * UNITS_MS[found.group(2) or "ms"]


def point_in_time(text: str, option: str) -> int:
    """Unix ms of ``+DURATION`` (from now), an ISO-8601 time (local time without a zone), or
    unix ms."""
    if text.startswith("+"):
        return int(time.time() * 1000) + duration_ms(text[1:], option)
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not +DURATION, an ISO-8601 time or unix ms", param_hint=option
        ) from None
