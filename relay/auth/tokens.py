"""Bearer tokens: what the HTTP API and ``/metrics`` take instead of a CURVE key.

A token is 32 random bytes in URL-safe base64; the cluster file holds only its hex SHA-256
(``client_tokens``, a ``[[client]]`` table's ``tokens``, ``metrics_token_sha256``), as it is
shared, and the token itself stays with its user (``<keys_dir>/client.token``). A token has 256
bits of entropy, so one unsalted hash is enough: nobody can search for a preimage.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path


class TokenFileError(OSError):
    """A token file that cannot be written; the message names it."""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def write(path: Path, token: str) -> None:
    """Write ``token`` to a new owner-only file; ``TokenFileError`` if it exists or cannot be
    made."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise TokenFileError(f"{path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")


def read(path: Path) -> str:
    """The token in ``path`` (its first line); ``TokenFileError`` if it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"{path}: cannot read a token: {exc}") from None
    token = text.strip()
    if not token or "\n" in token:
        raise TokenFileError(f"{path}: expected one token on one line")
    return token
