"""The console page in a real browser: headless Chromium (Debian's) driven by Playwright loads
``/`` from a live 3-node cluster, shows the nodes and the streams, tails a chosen stream and
shows a message published after the page opened, shows the newest chaos report's picture, and
is saved as a screenshot (``RELAY_CONSOLE_SCREENSHOT`` names where, else the test's folder)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_api import base, call, token_of

from relay.runtime.local_cluster import LocalCluster

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHAOS_SAMPLE = Path(__file__).parents[1] / "docs" / "chaos-sample.png"
FLAGS = [
    "--no-sandbox",  # root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # this machine's network is closed: no calls out
    "--disable-component-update",
    "--disable-sync",
]

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("console")
    run = folder / "chaos-runs" / "20261128-n3-seed1"  # a chaos run's folder beside the file
    run.mkdir(parents=True)
    shutil.copy(CHAOS_SAMPLE, run / "report.png")
    with LocalCluster(folder, nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
def test_the_console_shows_nodes_streams_and_a_live_message(
    cluster3: LocalCluster, tmp_path: Path
) -> None:
    url, token = base(cluster3, 1), token_of(cluster3)
    auth = {"Authorization": f"Bearer {token}"}
    for i in range(3):
        status, _h, _b = call(f"{url}/streams/orders.eu/messages", "POST", token, b"order %d" % i)
        assert status == 200
    assert call(f"{url}/streams/orders.eu/queues/pickers/claim?member=m", "POST", token)[0] == 200
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/?stream=orders.eu#token={token}")
            nodes = page.locator("#nodes tbody tr")
            playwright_api.expect(nodes).to_have_count(3, timeout=15_000)
            playwright_api.expect(page.locator("#nodes tbody")).to_contain_text("serving")
            streams = page.locator("#streams tbody")
            playwright_api.expect(streams).to_contain_text("orders.eu", timeout=15_000)
            playwright_api.expect(page.locator("#tail-state")).to_have_text(
                "following", timeout=15_000
            )
            status, _h, _b = call(
                f"{base(cluster3, 2)}/streams/orders.eu/messages",
                "POST",
                headers=auth,
                body=b"live from node 2",
            )
            assert status == 200
            tail = page.locator("#tail tbody")
            playwright_api.expect(tail).to_contain_text("live from node 2", timeout=15_000)
            playwright_api.expect(page.locator("#queues tbody")).to_contain_text("pickers")
            playwright_api.expect(page.locator("#settings tbody")).to_contain_text("cleanup")
            playwright_api.expect(page.locator("#chaos-section")).to_be_visible(timeout=15_000)
            assert page.eval_on_selector("#chaos", "img => img.naturalWidth") > 100
            shot = Path(os.environ.get("RELAY_CONSOLE_SCREENSHOT") or tmp_path / "console.png")
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        finally:
            browser.close()
