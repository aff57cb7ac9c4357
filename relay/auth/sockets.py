"""CURVE options on a ZeroMQ socket: a server that admits through the ZAP handler, or a
client that accepts only the server holding the secret half of the key it expects."""

from __future__ import annotations

from typing import Any

import zmq

from relay.auth.keys import KeyPair

MESH_DOMAIN = "mesh"
CLIENT_DOMAIN = "client"
ADMIN_DOMAIN = "admin"


def serve(sock: zmq.Socket[Any], pair: KeyPair, domain: str) -> None:
    """Before bind: encrypt, and let the ZAP handler decide who may connect under ``domain``."""
    sock.setsockopt(zmq.CURVE_SECRETKEY, pair.secret.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, pair.public.encode())
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.ZAP_DOMAIN, domain.encode())


def connect_to(sock: zmq.Socket[Any], server_public: str, pair: KeyPair) -> None:
    """Before connect: talk only to the holder of ``server_public``'s secret key."""
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_public.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, pair.public.encode())
    sock.setsockopt(zmq.CURVE_SECRETKEY, pair.secret.encode())
