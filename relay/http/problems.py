"""How the HTTP API says no: a status, the relay error code and a message naming the problem,
as a JSON body ``{"error": {"code": ..., "message": ...}}``."""

from __future__ import annotations

import json

from aiohttp import web

from relay import errors

DATA_LOSS = "data_loss"
UNAUTHORIZED = "unauthorized"
TOO_LARGE = "too_large"
TOO_MANY = "too_many"
NOT_FOUND = "not_found"
NO_HTTP = "no_http"

STATUS_OF = {
    errors.BAD_REQUEST: 400,
    UNAUTHORIZED: 401,
    errors.FORBIDDEN: 403,
    NOT_FOUND: 404,
    errors.NO_REPLICAS: 404,
    errors.CONFLICT: 409,
    errors.FENCED: 409,
    DATA_LOSS: 410,
    TOO_LARGE: 413,
    TOO_MANY: 429,
    errors.BUSY: 429,
    errors.PROTOCOL: 502,
    errors.UNAVAILABLE: 503,
    errors.NOT_COMMITTED: 503,
    NO_HTTP: 503,
    errors.TIMEOUT: 504,
    errors.STORAGE: 507,
}
RETRY_AFTER_S = {429: 1, 503: 1, 507: 5}


class Problem(web.HTTPException):
    """A refusal; aiohttp answers it as a response."""

    def __init__(self, code: str, message: str, status: int | None = None) -> None:
        self.status_code = status or STATUS_OF.get(code, 500)
        headers = {"Content-Type": "application/json"}
        if self.status_code in RETRY_AFTER_S:
            headers["Retry-After"] = str(RETRY_AFTER_S[self.status_code])
        if self.status_code == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="relay"'
        body = json.dumps({"error": {"code": code, "message": message}})
        super().__init__(headers=headers, text=body, content_type=None)
        self.code = code
        self.message = message


def error_line(code: str, message: str) -> bytes:
    """A refusal after a followed response began: its last line."""
    return (json.dumps({"error": {"code": code, "message": message}}) + "\n").encode()
