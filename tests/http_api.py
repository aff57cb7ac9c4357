"""Talking to a node's HTTP API from a test, with the standard library only (no relay code
on the client side): one call, or a followed response read line by line."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

from relay.runtime.local_cluster import LocalCluster


def base(cluster: LocalCluster, node_id: int) -> str:
    address = cluster.config.node(node_id).http_address
    assert address is not None
    return address


def token_of(cluster: LocalCluster) -> str:
    return (cluster.config.keys_dir() / "client.token").read_text().strip()


def call(
    url: str,
    method: str = "GET",
    token: str | None = None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; redirects are not followed."""
    conn = open_request(url, method, token, body, headers, timeout_s)
    try:
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def call_json(url: str, method: str = "GET", token: str | None = None, **kw: Any) -> Any:
    status, _headers, body = call(url, method, token, **kw)
    assert status == 200, (status, body[:500])
    return json.loads(body)


def open_request(
    url: str,
    method: str = "GET",
    token: str | None = None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = 30,
) -> http.client.HTTPConnection:
    """A connection with the request sent; ``getresponse`` reads the answer."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    conn.request(method, path, body=body, headers=sent)
    return conn


def publish_lines(url: str, token: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
    body = "".join(json.dumps(m) + "\n" for m in messages).encode()
    headers = {"Content-Type": "application/x-ndjson", **kw.pop("headers", {})}
    return call(url, "POST", token, body=body, headers=headers, **kw)
