"""The HTTP API on a running 3-node cluster: every endpoint, the bounds (body size, responses
followed per client, a slow reader, a client that goes away), bearer tokens and their grants,
redirects to a replica, and a node killed under an open chunked response."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from http_api import base, call, call_json, open_request, publish_lines, token_of
from waits import until

from relay.auth.tokens import new_token, token_hash
from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

LIMITED = new_token()  # a [[client]] table's token: publish and read allowed.* only
BLOCKS = f"""
[[stream]]
pattern = "pinned.*"
nodes = [1, 2]

[[client]]
name = "limited"
tokens = ["{token_hash(LIMITED)}"]
publish = ["allowed.*"]
consume = ["allowed.*"]
"""
OVERRIDES = {
    "allow_small_replication": True,
    "http_body_bytes_max": 65536,
    "http_streams_per_client_max": 2,
    "http_requests_max": 4,
    "http_write_ms_max": 1000,
    "dedup_window_ms": 60000,
}


@pytest.fixture(scope="module")
def http3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("http")
    with LocalCluster(folder, nodes=3, overrides=OVERRIDES, streams=BLOCKS, admin=True) as c:
        c.start()
        c.wait_serving()
        yield c


def lines_of(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line]


def metric(cluster: LocalCluster, node_id: int, name: str) -> float:
    """The sum of a metric's samples on a node's /metrics."""
    port = cluster.config.node(node_id).metrics_port
    _status, _h, body = call(f"http://127.0.0.1:{port}/metrics")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in body.decode().splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


def test_health_and_ready_need_no_token_and_a_fence_is_waited_out(http3: LocalCluster) -> None:
    url = base(http3, 3)
    assert call_json(f"{url}/health") == {"status": "ok", "node": 3, "state": "serving"}
    assert call_json(f"{url}/ready")["status"] == "ready"
    http3.fault(3, block_from=[1, 2])
    http3.fault(1, block_from=[3])
    http3.fault(2, block_from=[3])
    posted: list[tuple[int, dict[str, str], bytes]] = []
    publish = threading.Thread(
        target=lambda: posted.append(
            call(f"{url}/streams/fence.a/messages", "POST", token_of(http3), b"f")
        )
    )
    try:
        status, _h, body = until(lambda: call(f"{url}/ready"), lambda r: r[0] == 503, 10)
        assert status == 503 and b"fenced" in body, body
        assert call(f"{url}/health")[0] == 200  # alive, only not ready
        publish.start()  # refused while fenced: the node's HTTP API waits that out a while
        time.sleep(0.5)  # not a wait: the publish stays fenced out this long before the heal
    finally:
        http3.heal()
    publish.join(30)
    assert posted and posted[0][0] == 200, posted
    assert until(lambda: call(f"{url}/ready")[0], lambda s: s == 200, 15) == 200


def test_tokens_refuse_strangers_and_grants_bound_what_a_token_may_do(
    http3: LocalCluster,
) -> None:
    url = base(http3, 1)
    assert call(f"{url}/streams")[0] == 401
    status, headers, body = call(f"{url}/streams", token="not-a-token")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert b"not one this cluster knows" in body
    status, _h, body = call(f"{url}/streams", headers={"Authorization": "Basic eDp5"})
    assert status == 401 and b"Bearer" in body
    assert call(f"{url}/streams/allowed.a/messages", "POST", LIMITED, body=b"x")[0] == 200
    status, _h, body = call(f"{url}/streams/orders/messages", "POST", LIMITED, body=b"x")
    assert status == 403 and b"limited" in body and b"allowed.*" in body
    status, _h, body = call(f"{url}/streams/orders/messages?follow=false", token=LIMITED)
    assert status == 403
    got = call_json(f"{url}/streams/allowed.a/messages?follow=false", token=LIMITED)
    assert got["payload"] == "x"
    sse = f"{url}/streams/allowed.a/messages?follow=false&format=sse&access_token={LIMITED}"
    status, _h, events = call(sse)  # as an EventSource, which cannot set a header, sends it
    assert status == 200 and b'"payload": "x"' in events


def test_publish_one_or_many_retries_never_duplicate_and_reads_come_back_in_every_format(
    http3: LocalCluster,
) -> None:
    token, url = token_of(http3), base(http3, 2)
    status, _h, body = call(
        f"{url}/streams/pub.a/messages?key=k1&header=trace:abc", "POST", token, body=b"\x00\xffraw"
    )
    assert status == 200, body
    first = json.loads(body)["results"][0]
    messages = [
        {"payload": "text"},
        {"payload": {"json": [1, 2]}, "key": "k2", "headers": {"kind": "order"}},
        {"payload_b64": "AAE=", "headers": [{"name": "h", "value_b64": "/w=="}]},
    ]
    status, _h, body = publish_lines(f"{url}/streams/pub.a/messages", token, messages)
    assert status == 200, body
    seqs = [first["seq"]] + [r["seq"] for r in json.loads(body)["results"]]
    got = lines_of(call(f"{url}/streams/pub.a/messages?follow=false", token=token)[2])
    assert [g["seq"] for g in got] == seqs and [g["index"] for g in got] == [0, 1, 2, 3]
    assert got[0]["payload_b64"] == "AP9yYXc=" and got[0]["key"] == "k1"
    assert got[0]["headers"] == [{"name": "trace", "value": "abc"}]
    assert got[1]["payload"] == "text" and got[2]["payload"] == '{"json":[1,2]}'
    assert got[3]["headers"] == [{"name": "h", "value_b64": "/w=="}]
    raw = call(
        f"{url}/streams/pub.a/messages?follow=false&limit=1&format=raw&separator=", token=token
    )
    assert raw[2] == b"\x00\xffraw" and raw[1]["Content-Type"] == "application/octet-stream"
    last2 = lines_of(
        call(f"{url}/streams/pub.a/messages?follow=false&from_index=-2", token=token)[2]
    )
    assert [g["index"] for g in last2] == [2, 3]
    upto = lines_of(call(f"{url}/streams/pub.a/messages?follow=false&to={seqs[1]}", token=token)[2])
    assert [g["seq"] for g in upto] == seqs[:2]
    sse = call(
        f"{url}/streams/pub.a/messages?follow=false",
        token=token,
        headers={"Accept": "text/event-stream", "Last-Event-ID": seqs[2]},
    )
    assert sse[1]["Content-Type"] == "text/event-stream"
    assert sse[2].decode().startswith(f"id: {seqs[3]}\nevent: message\ndata: {{")

    named = {"Relay-Producer-Id": "billing-1"}
    batch = [{"payload": f"n{i}", "id": i} for i in range(1, 4)]
    once = publish_lines(f"{url}/streams/pub.b/messages", token, batch, headers=named)
    again = publish_lines(f"{base(http3, 3)}/streams/pub.b/messages", token, batch, headers=named)
    assert once[0] == again[0] == 200 and json.loads(once[2]) == json.loads(again[2])
    changed = [{"payload": "other", "id": 2}]
    status, _h, body = publish_lines(f"{url}/streams/pub.b/messages", token, changed, headers=named)
    assert status == 409 and json.loads(body)["results"][0]["error"]["code"] == "conflict"
    unnamed = publish_lines(
        f"{url}/streams/pub.b/messages",
        token,
        [{"payload": "x", "id": 1}],
        headers={**named, "Relay-Producer-Id": ""},
    )
    assert unnamed[0] == 400
    assert len(lines_of(call(f"{url}/streams/pub.b/messages?follow=false", token=token)[2])) == 3


def settle(seq: object, delivery: object) -> bytes:
    return json.dumps({"member": "m", "jobs": [{"seq": seq, "delivery": delivery}]}).encode()


def test_bad_requests_are_refused_naming_the_problem(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 1)
    cases = [
        ("GET", "/streams/a/messages?from=yesterday", None, b"ISO 8601"),
        ("GET", "/streams/a/messages?limit=0", None, b"limit"),
        ("GET", "/streams/a/messages?format=xml", None, b"format"),
        ("GET", "/streams/a/messages?after=99999999999999999999", None, b"after"),
        ("POST", "/streams/a/messages", b"{not json\n", b"line 1 is not JSON"),
        ("POST", "/streams/a/messages", b'{"payload": "x", "extra": 1}\n', b"unknown key"),
        ("POST", "/streams/a/messages", b'{"payload_b64": "@@"}\n', b"not base64"),
        ("POST", "/streams/a/messages", b"[1]\n", b"not a JSON object"),
        ("POST", "/streams/a b/messages", b"x", b"stream name"),
        ("POST", "/streams/a/queues/w/claim", None, b"member"),
        ("POST", "/streams/a/queues/w/explode", b"{}", b"action"),
        ("POST", "/streams/a/groups/g/commit", b'{"seq": "1", "digest": "00"}', b"no verified"),
        ("GET", "/streams/a/messages?after=%C2%B2", None, b"after"),  # a superscript two
        ("GET", "/streams/a/messages?from_index=1e3", None, b"from_index"),
        ("POST", "/streams/a/messages", b"[" * 100_00 + b"\n", b"not JSON"),
        ("POST", "/streams/a/messages", b'{"payload": "\\ud800"}\n', b"not valid UTF-8"),
        ("POST", "/streams/a/messages", b'{"payload": "x", "headers": {"h": 1}}\n', b"header"),
        ("POST", "/streams/a/queues/w/claim?member=m&count=0000000000001000000", None, b"count"),
        (
            "POST",
            "/streams/a/queues/w/ack",
            b'{"member": "m", "jobs": [{"seq": 1, "delivery": 18446744073709551616}]}',
            b"delivery",
        ),
        (
            "POST",
            "/streams/a/queues/w/ack",
            b'{"member": "m", "jobs": [{"seq": "\xc2\xb2", "delivery": 1}]}',
            b"seq",
        ),
        ("PUT", "/streams/a/queues/w", b'{"lease_ms": 18446744073709551617}', b"cannot be sent"),
    ]
    for method, path, body, why in cases:
        headers = {"Content-Type": "application/x-ndjson"} if body and b"\n" in body else {}
        status, _h, answer = call(f"{url}{path.replace(' ', '%20')}", method, token, body, headers)
        assert status == 400, (path, status, answer)
        assert why in answer, (path, answer)
        assert b'"code": "bad_request"' in answer  # of the request, or of each message
    empty = call(f"{url}/streams/empty.a/messages", "POST", token, b"")
    assert empty[0] == 200, empty  # an empty payload is a message
    named = {"Relay-Producer-Id": "p", "Relay-Message-Id": "\u00b2"}
    assert call(f"{url}/streams/a/messages", "POST", token, b"x", named)[0] == 400


def test_only_the_cluster_nodes_pages_may_call_from_a_browser(http3: LocalCluster) -> None:
    token, url, other = token_of(http3), base(http3, 1), base(http3, 2)
    evil = {"Origin": "http://evil.example"}
    status, _h, body = call(f"{url}/streams/cors.a/messages", "POST", token, b"x", evil)
    assert status == 403 and b"evil.example" in body
    status, headers, _b = call(f"{url}/streams", "OPTIONS", headers={"Origin": other})
    assert status == 204 and headers["Access-Control-Allow-Origin"] == other
    assert "Authorization" in headers["Access-Control-Allow-Headers"]
    status, headers, _b = call(f"{url}/streams", token=token, headers={"Origin": other})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == other
    post = call(f"{url}/streams/cors.a/messages?access_token={token}", "POST", body=b"x")
    assert post[0] == 401  # a token in the URL only for an EventSource's GET


def test_a_non_replica_redirects_to_a_replicas_http_port(http3: LocalCluster) -> None:
    token = token_of(http3)
    status, headers, _b = call(f"{base(http3, 3)}/streams/pinned.x/messages", "POST", token, b"p")
    assert status == 307
    assert headers["Location"].startswith(base(http3, 1) + "/streams/pinned.x/messages")
    assert call(headers["Location"], "POST", token, b"p")[0] == 200
    status, headers, _b = call(
        f"{base(http3, 3)}/streams/pinned.x/messages?follow=false", token=token
    )
    assert status == 307 and headers["Location"].endswith("/streams/pinned.x/messages?follow=false")
    assert call(f"{base(http3, 3)}/streams/pinned.x/groups", token=token)[0] == 307


def test_a_body_over_the_limit_is_refused_with_or_without_a_length(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 1)
    big = b"x" * 70_000
    status, _h, body = call(f"{url}/streams/big/messages", "POST", token, big)
    assert status == 413 and b"http_body_bytes_max" in body
    conn = open_request(
        f"{url}/streams/big/messages",
        "POST",
        token,
        iter([big[:40_000]] * 2),  # no length: http.client sends it chunked
    )
    try:
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    assert call(f"{url}/streams/big/messages?follow=false", token=token)[2] == b""


def test_followed_responses_per_client_are_bounded_and_freed_when_a_client_goes_away(
    http3: LocalCluster,
) -> None:
    token, url = token_of(http3), base(http3, 1)
    follow = f"{url}/streams/follow.a/messages?from=latest"
    opened = [open_request(follow, token=token) for _ in range(2)]
    for conn in opened:
        assert conn.getresponse().status == 200
    status, _h, body = call(follow, token=token)
    assert status == 429 and b"http_streams_per_client_max" in body
    for conn in opened:  # gone without a word: the node notices and frees the slots
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
    assert until(lambda: metric(http3, 1, "relay_http_following"), lambda v: v == 0, 10) == 0
    conn = open_request(follow, token=token)
    assert conn.getresponse().status == 200
    conn.close()


def test_requests_at_once_are_bounded_per_node(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 3)
    opened = [
        open_request(f"{url}/streams/{stream}/messages?from=latest", token=who)
        for who, stream in ((token, "busy.a"), (token, "busy.a"), (LIMITED, "allowed.b"))
    ]
    try:
        for conn in opened:
            assert conn.getresponse().status == 200
        assert call(f"{url}/health")[0] == 200  # the fourth
        opened.append(open_request(f"{url}/streams/allowed.b/messages", token=LIMITED))
        assert opened[-1].getresponse().status == 200
        status, headers, body = call(f"{url}/health")
        assert status == 503 and b"http_requests_max" in body and headers["Retry-After"]
    finally:
        for conn in opened:
            conn.close()
    assert until(lambda: call(f"{url}/health")[0], lambda s: s == 200, 10) == 200


def test_a_slow_reader_is_cut_and_holds_no_more_than_a_fetch(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 2)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
    sock.connect(("127.0.0.1", http3.config.node(2).http_port or 0))
    sock.sendall(
        f"GET /streams/slow.a/messages HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {token}\r\n\r\n".encode()
    )
    assert until(lambda: metric(http3, 2, "relay_http_following"), lambda v: v == 1, 5) == 1
    payload = "y" * 4000
    published = 0
    while metric(http3, 2, "relay_http_following") and published < 200:  # 12 MB at most
        msgs = [{"payload": payload}] * 15  # the reader reads nothing
        assert publish_lines(f"{url}/streams/slow.a/messages", token, msgs)[0] == 200
        published += 1
    assert until(lambda: metric(http3, 2, "relay_http_following"), lambda v: v == 0, 5) == 0
    sock.settimeout(5)
    got = b""
    try:
        while chunk := sock.recv(1 << 16):
            got += chunk
    except OSError:
        pass
    sock.close()
    assert 0 < len(got) < published * 15 * 4000  # cut short: it was not all buffered for it


def test_groups_read_with_commit_and_commit_what_was_processed(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 1)
    msgs = [{"payload": f"g{i}"} for i in range(5)]
    assert publish_lines(f"{url}/streams/grp.a/messages", token, msgs)[0] == 200
    group = f"{url}/streams/grp.a/groups/billing"
    assert call_json(group, token=token) == {
        "stream": "grp.a",
        "group": "billing",
        "committed": None,
        "lag": 5,
    }
    first = lines_of(call(f"{group}/messages?limit=2&commit=true", token=token)[2])
    assert [m["payload"] for m in first] == ["g0", "g1"]
    described = call_json(group, token=token)
    assert described["committed"]["seq"] == first[-1]["seq"] and described["lag"] == 3
    peek = lines_of(call(f"{group}/messages?limit=2", token=token)[2])
    assert [m["payload"] for m in peek] == ["g2", "g3"]  # read, not committed
    assert call_json(group, token=token)["lag"] == 3
    commit = {"seq": peek[0]["seq"], "digest": peek[0]["digest"]}
    assert call(f"{group}/commit", "POST", token, json.dumps(commit).encode())[0] == 200
    assert call_json(group, token=token)["lag"] == 2
    wrong = {"seq": peek[1]["seq"], "digest": peek[0]["digest"]}
    assert call(f"{group}/commit", "POST", token, json.dumps(wrong).encode())[0] == 400
    listed = call_json(f"{url}/streams/grp.a/groups", token=token)["groups"]
    assert [(g["group"], g["lag"]) for g in listed] == [("billing", 2)]


def test_work_groups_claim_ack_and_nak_jobs(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 3)
    msgs = [{"payload": f"job{i}"} for i in range(3)]
    assert publish_lines(f"{url}/streams/jobs.a/messages", token, msgs)[0] == 200
    queue = f"{url}/streams/jobs.a/queues/workers"
    settings = json.dumps({"lease_ms": 5000, "max_deliveries": 3}).encode()
    assert call(queue, "PUT", token, settings)[0] == 200
    claimed = call_json(f"{queue}/claim?member=w1&count=2&wait_ms=2000", "POST", token)["jobs"]
    assert [j["payload"] for j in claimed] == ["job0", "job1"]
    acked = {"member": "w1", "jobs": [{"seq": claimed[0]["seq"], "delivery": 1}]}
    assert call_json(f"{queue}/ack", "POST", token, body=json.dumps(acked).encode()) == {
        "results": ["settled"]
    }
    naked = {"member": "w1", "jobs": [{"seq": claimed[1]["seq"], "delivery": 1}], "delay_ms": 0}
    assert call_json(f"{queue}/nak", "POST", token, body=json.dumps(naked).encode())["results"] == [
        "settled"
    ]
    info = until(lambda: call_json(queue, token=token), lambda i: i["acked"] == 1, 5)
    assert (info["acked"], info["ready"], info["claimed"]) == (1, 2, 0)
    again = call_json(f"{queue}/claim?member=w2&count=5", "POST", token)["jobs"]
    assert sorted((j["payload"], j["delivery"]) for j in again) == [("job1", 2), ("job2", 1)]
    listed = call_json(f"{url}/streams/jobs.a/queues", token=token)["queues"]
    assert [q["group"] for q in listed] == ["workers"]


def test_streams_cluster_and_metrics(http3: LocalCluster) -> None:
    token, url = token_of(http3), base(http3, 1)
    assert call(f"{url}/streams/info.a/messages", "POST", token, b"i")[0] == 200

    def listed() -> dict[str, Any]:
        found = call_json(f"{url}/streams", token=token)["streams"]
        return next((s for s in found if s["stream"] == "info.a"), {"heads": {}})

    stream = until(listed, lambda s: len(s["heads"]) == 3, 10)  # the third replica may lag
    assert stream["replicas"] == [1, 2, 3] and stream["txs"] == 1
    assert set(stream["heads"]) == {"1", "2", "3"}
    info = call_json(f"{url}/streams/info.a", token=token)
    assert info["settings"]["cleanup"] == "delete" and set(info["nodes"]) == {"1", "2", "3"}
    nodes = call_json(f"{url}/cluster", token=token)["nodes"]
    assert [(n["node"], n["state"]) for n in nodes] == [(i, "serving") for i in (1, 2, 3)]
    limited = call_json(f"{url}/streams", token=LIMITED)["streams"]
    assert all(s["stream"].startswith("allowed.") for s in limited)
    assert metric(http3, 1, 'relay_http_requests_total{route="/streams",status="200"}') >= 2
    assert metric(http3, 1, 'relay_http_requests_total{route="/streams",status="401"}') >= 1


def test_a_reader_cut_off_by_a_killed_node_resumes_on_another_without_gap_or_duplicate(
    http3: LocalCluster,
) -> None:
    token = token_of(http3)
    acked: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        url = base(http3, 2)
        i = 0
        while not stop.is_set():
            messages = [{"payload": f"k{i + j}"} for j in range(5)]
            status, _h, body = publish_lines(f"{url}/streams/kill.a/messages", token, messages)
            if status == 200:
                acked.extend(r["seq"] for r in json.loads(body)["results"])
            i += 5
            time.sleep(0.02)  # not a wait: paces the producer

    producer = threading.Thread(target=produce)
    producer.start()
    seen: list[str] = []
    try:
        conn = open_request(f"{base(http3, 1)}/streams/kill.a/messages", token=token)
        response = conn.getresponse()
        assert response.status == 200
        while len(seen) < 50:
            seen.append(json.loads(response.readline())["seq"])
        http3.stop(1, signal.SIGKILL)
        try:
            while line := response.readline():
                seen.append(json.loads(line)["seq"])
        except (OSError, http.client.HTTPException, ValueError):
            pass  # the node died mid-chunk
        conn.close()
        before = len(acked)  # the producer goes on through the two nodes left
        assert until(lambda: len(acked), lambda n: n >= before + 20, 15) >= before + 20
    finally:
        stop.set()
        producer.join(30)
    last_acked = max(acked, key=int)  # the reader resumes on node 3 and follows up to it
    url = f"{base(http3, 3)}/streams/kill.a/messages?after={seen[-1]}&to={last_acked}"
    seen += [row["seq"] for row in lines_of(call(url, token=token)[2])]
    try:
        assert len(seen) == len(set(seen)), "a duplicate"
        assert sorted(seen, key=int) == seen
        assert set(acked) <= set(seen), "an acknowledged transaction is missing"
    finally:
        http3.start(1)
        http3.wait_serving()
