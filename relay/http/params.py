"""Numbers and names from an HTTP request (query, headers, JSON bodies), checked before use: only
ASCII digits count as digits (``"²".isdigit()`` is true), a string is one the wire can carry,
and every number has a bound."""

from __future__ import annotations

from relay import errors
from relay.http.problems import Problem

U64_MAX = (1 << 64) - 1


def decimal(value: object, digits: int = 20) -> int | None:
    """``value`` as an integer if it is a string of 1 to ``digits`` ASCII digits, else None."""
    if not isinstance(value, str) or not 0 < len(value) <= digits:
        return None
    if not (value.isascii() and value.isdigit()):
        return None
    return int(value)


def bounded(value: object, name: str, least: int, most: int) -> int:
    """``value`` (a JSON integer, or its decimal string) in ``least..most``; ``Problem`` 400
    naming ``name`` otherwise."""
    number = decimal(value) if isinstance(value, str) else value
    if type(number) is not int or not least <= number <= most:
        raise Problem(errors.BAD_REQUEST, f"{name} is an integer from {least} to {most}")
    return number


def text(value: object, name: str, most: int = 200) -> str:
    """``value`` if it is a string of 1 to ``most`` characters that UTF-8 can carry."""
    if not isinstance(value, str) or not 0 < len(value) <= most or not encodable(value):
        raise Problem(errors.BAD_REQUEST, f"{name} is a string of 1 to {most} characters")
    return value


def encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:  # a lone surrogate (aiohttp keeps undecodable bytes as those)
        return False
    return True
