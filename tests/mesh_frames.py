"""A mesh message's topic and body, as a node's frame holds them (joined by a NUL): for tests
that forge or mutate frames."""

from relay.core.messages import MeshMessage
from relay.wire import mesh


def encode(message: MeshMessage) -> tuple[bytes, bytes]:
    frame, start = mesh.framed(message)
    return bytes(frame[: start - 1]), bytes(frame[start:])
