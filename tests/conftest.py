import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay import compiled
from relay.runtime.local_cluster import PORT_RANGE_ENV, LocalCluster, port_range

pytest_plugins = ["process_guard"]  # a test not marked slow starts no process


def _own_port_range() -> None:
    """Under pytest-xdist, each worker (and what it starts) takes ports from its own slice."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    index, workers = int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    first, last = port_range()
    width = (last - first + 1) // max(1, workers)
    os.environ[PORT_RANGE_ENV] = f"{first + index * width}-{first + (index + 1) * width - 1}"


_own_port_range()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``pure`` plant a bug in (or hand a stand-in to) a module that relay
    compiles, which compiled code would not see: they run where relay runs from source
    (scripts/test.sh runs the fast tier once more with RELAY_PURE=1)."""
    if compiled.MODE != "compiled":
        return
    skip = pytest.mark.skip(reason="replaces compiled code: runs in the RELAY_PURE=1 pass")
    for item in items:
        if item.get_closest_marker("pure"):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("c3"), nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


@pytest.fixture(scope="module")
def cluster5(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("c5"), nodes=5) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


@pytest.fixture
def fresh_cluster3(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster a test may break."""
    with LocalCluster(tmp_path / "c", nodes=3) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


@pytest.fixture
def fast_admin_cluster3(tmp_path: Path) -> Iterator[LocalCluster]:
    """A 3-node cluster with short timeouts and admin ports, that a test may break."""
    from test_faults_real import FAST

    with LocalCluster(tmp_path / "c", nodes=3, overrides=FAST, admin=True) as cluster:
        cluster.start()
        cluster.wait_serving()
        yield cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] Spark session for every Spark test (a cold one takes ~8 s)."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    import spark_consumer

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import relay from here
    session = (
        SparkSession.builder.master("local[2]")
        .appName("relay-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_consumer.register(session)
    yield session
    session.stop()
