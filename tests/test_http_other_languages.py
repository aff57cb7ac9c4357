"""The HTTP API from outside Python: curl publishes and follows a stream as the README shows,
and Node.js's built-in fetch publishes JSON lines and reads them back, seqs as strings; the
main job's HTTP step; a followed response ends after ``http_follow_ms_max``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_api import base, open_request, token_of

from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

NODE_SCRIPT = r"""
const [url, token] = process.argv.slice(-2);
const auth = { Authorization: "Bearer " + token };
const lines = [1, 2, 3].map((i) => JSON.stringify({ payload: { n: i }, key: "k" + i })).join("\n");
const published = await fetch(url + "/streams/node.a/messages", {
  method: "POST", headers: { ...auth, "Content-Type": "application/x-ndjson" }, body: lines,
});
if (published.status !== 200) throw new Error("publish: " + published.status);
const { results } = await published.json();
const read = await fetch(url + "/streams/node.a/messages?follow=false", { headers: auth });
const text = await read.text();
const rows = text.trim().split("\n").map((line) => JSON.parse(line));
console.log(JSON.stringify({ acked: results.map((r) => r.seq), rows }));
"""


FOLLOW_MS = 4000  # how long one followed response lives here


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    overrides = {"http_follow_ms_max": FOLLOW_MS}
    with LocalCluster(tmp_path_factory.mktemp("langs"), nodes=3, overrides=overrides) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_publishes_and_follows_a_stream(cluster3: LocalCluster) -> None:
    url, token = base(cluster3, 1), token_of(cluster3)
    auth = ["-H", f"Authorization: Bearer {token}"]
    follower = subprocess.Popen(
        ["curl", "-sN", *auth, f"{base(cluster3, 2)}/streams/curl.a/messages?limit=2"],
        stdout=subprocess.PIPE,
    )
    try:
        for text in ("hello", "world"):
            done = subprocess.run(
                ["curl", "-sf", *auth, "--data-binary", text, f"{url}/streams/curl.a/messages"],
                capture_output=True,
                timeout=30,
                check=True,
            )
            assert json.loads(done.stdout)["results"][0]["seq"].isdigit()
        out, _err = follower.communicate(timeout=30)
    finally:
        follower.kill()
        follower.wait()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r.get("payload") for r in rows] == ["hello", "world"], rows


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_node_fetch_publishes_json_lines_and_reads_them_back(cluster3: LocalCluster) -> None:
    done = subprocess.run(
        ["node", "--input-type=module", "-e", NODE_SCRIPT, base(cluster3, 3), token_of(cluster3)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert [r["seq"] for r in got["rows"]] == got["acked"]
    assert [r["payload"] for r in got["rows"]] == ['{"n":1}', '{"n":2}', '{"n":3}']
    assert [r["key"] for r in got["rows"]] == ["k1", "k2", "k3"]


def test_the_main_jobs_http_step_runs_as_shown(
    cluster3: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    try:
        import demo
    finally:
        sys.path.pop(0)
    demo.show_http(str(cluster3.config_path))
    shown = capsys.readouterr().out
    assert '"results": [{"seq": "' in shown and '"payload": "over http"' in shown


def test_a_followed_response_ends_after_http_follow_ms_max(cluster3: LocalCluster) -> None:
    url, token = base(cluster3, 1), token_of(cluster3)
    started = time.monotonic()
    conn = open_request(f"{url}/streams/long.a/messages", token=token)
    try:
        response = conn.getresponse()
        assert response.status == 200
        assert response.read() == b""  # nothing published: a clean end, no error line
    finally:
        conn.close()
    assert FOLLOW_MS / 1000 <= time.monotonic() - started < FOLLOW_MS / 1000 + 10
