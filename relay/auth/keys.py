"""CURVE key pairs, made, written and read as ZeroMQ certificate files.

A node's secret key lives in ``<keys_dir>/node-<id>.key_secret``, a client's in
``client.key_secret`` and an operator's in ``admin.key_secret``, each with its public half in
a ``.key`` file beside it. Only public keys go into the shared cluster file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth

from relay.auth import tokens

KEY_FILE_BYTES_MAX = 64 << 10


class KeyFileError(ValueError):
    """A key file that is missing, unreadable or does not hold a matching key pair."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    public: str
    secret: str

    def __repr__(self) -> str:  # a secret never reaches a log
        return f"KeyPair(public={self.public!r})"


def generate() -> KeyPair:
    public, secret = zmq.curve_keypair()
    return KeyPair(public.decode(), secret.decode())


def secret_file(folder: Path, name: str) -> Path:
    return folder / f"{name}.key_secret"


def write(folder: Path, name: str) -> KeyPair:
    """A new pair in ``folder/name.key`` and ``folder/name.key_secret`` (readable by the owner
    only); ``KeyFileError`` if a secret key of that name is already there."""
    target = secret_file(folder, name)
    if target.exists():
        raise KeyFileError(f"{target} already exists; keeping it (delete it to make a new one)")
    folder.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)
    try:
        zmq.auth.create_certificates(folder, name)
    finally:
        os.umask(old)
    return read(target)


def read(path: Path) -> KeyPair:
    """The pair in a ``.key_secret`` file; ``KeyFileError`` says what is wrong with it."""
    try:
        if path.stat().st_size > KEY_FILE_BYTES_MAX:
            raise KeyFileError(f"{path}: {path.stat().st_size} bytes is not a key file")
        public, secret = zmq.auth.load_certificate(path)
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file (make one with `relay keys gen`)") from None
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: not a key file: {exc}") from None
    if secret is None:
        raise KeyFileError(f"{path}: holds no secret key (the .key_secret file is needed)")
    try:
        derived = zmq.curve_public(secret)
    except (zmq.ZMQError, ValueError):
        raise KeyFileError(f"{path}: the secret key is not a valid Z85 CURVE key") from None
    if derived != public:
        raise KeyFileError(f"{path}: its public and secret keys do not belong together")
    return KeyPair(public.decode(), secret.decode())


def client_pair(keys_dir: Path | None, key_file: str | Path | None = None) -> KeyPair:
    """A client's pair: ``key_file`` if given, else ``keys_dir/client.key_secret`` if there,
    else a new one (enough where ``client_auth = "none"``)."""
    if key_file is not None:
        return read(Path(key_file))
    if keys_dir is not None and secret_file(keys_dir, "client").exists():
        return read(secret_file(keys_dir, "client"))
    return generate()


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """The public keys a new cluster file lists; the secret halves are in files."""

    nodes: dict[int, str]
    client: str
    admin: str
    client_token_sha256: str  # the hash of the HTTP API's token in client.token


def write_cluster(folder: Path, node_ids: list[int]) -> ClusterKeys:
    """A pair for every node, one for clients and one for the operator, and a bearer token for
    the HTTP API's clients (``client.token``), in ``folder`` (what is already there is kept)."""

    def pair(name: str) -> str:
        path = secret_file(folder, name)
        return (read(path) if path.exists() else write(folder, name)).public

    token_file = folder / "client.token"
    if not token_file.exists():
        tokens.write(token_file, tokens.new_token())
    return ClusterKeys(
        {i: pair(f"node-{i}") for i in node_ids},
        pair("client"),
        pair("admin"),
        tokens.token_hash(tokens.read(token_file)),
    )
