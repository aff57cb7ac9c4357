"""relay/core stays pure: no I/O, clocks, randomness, logging or metrics."""

import ast
from pathlib import Path

FORBIDDEN = {
    "zmq",
    "time",
    "random",
    "asyncio",
    "socket",
    "logging",
    "prometheus_client",
    "threading",
    "os",
    "subprocess",
    "datetime",
    "uuid",
    "secrets",
}
CORE = Path(__file__).resolve().parent.parent / "relay" / "core"


def test_core_imports_nothing_impure() -> None:
    offenders = []
    files = sorted(CORE.glob("*.py"))
    assert files, "relay/core has no modules"
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_the_wall_would_catch_an_impure_import(tmp_path: Path) -> None:
    bad = ast.parse("import time\nfrom zmq import Context\n")
    found = [n for n in ast.walk(bad) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert len(found) == 2
