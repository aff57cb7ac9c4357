"""relay/core stays pure: no I/O, clocks, randomness, logging or metrics.

Two walls, each with a test that shows it catches a breach: what importing every core module
actually loads (in a fresh interpreter, so indirect imports count), and what the core's files
import directly (for the modules the interpreter loads anyway, such as ``time``). The first
wall starts an interpreter, so its tests are slow; the second's run in the fast tier.
"""

import ast
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "relay" / "core"
LOADED_FORBIDDEN = {
    "zmq",
    "socket",
    "threading",
    "logging",
    "random",
    "select",
    "subprocess",
    "asyncio",
    "prometheus_client",
    "datetime",
    "uuid",
    "secrets",
}
IMPORTED_FORBIDDEN = LOADED_FORBIDDEN | {"time", "os"}
PROBE = """
import importlib, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    importlib.import_module(name)
print(" ".join(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


def core_modules() -> list[str]:
    found = [f"relay.core.{p.stem}" for p in sorted(CORE.glob("*.py")) if p.stem != "__init__"]
    assert len(found) > 10, "relay/core has lost its modules"
    return found


def loaded_by(modules: list[str], extra_path: Path | None = None) -> set[str]:
    """Top-level modules a fresh interpreter (no site hooks) loads to import ``modules``."""
    paths = [
        str(ROOT),
        sysconfig.get_paths()["purelib"],
        *([str(extra_path)] if extra_path else []),
    ]
    done = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, *modules],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


@pytest.mark.slow  # a fresh interpreter is the point: a process
def test_importing_every_core_module_loads_nothing_impure() -> None:
    modules = core_modules()
    if loaded_by(modules) & LOADED_FORBIDDEN:  # name the culprits, one module at a time
        culprits = {m: sorted(loaded_by([m]) & LOADED_FORBIDDEN) for m in modules}
        raise AssertionError({m: bad for m, bad in culprits.items() if bad})


@pytest.mark.slow  # a fresh interpreter is the point: a process
def test_the_wall_catches_an_indirect_import(tmp_path: Path) -> None:
    (tmp_path / "leaky.py").write_text("import json\nfrom relay.client import producer\n")
    assert {"zmq", "socket", "threading"} <= loaded_by(["leaky"], tmp_path) & LOADED_FORBIDDEN


def direct_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in IMPORTED_FORBIDDEN]


def test_core_files_import_nothing_impure() -> None:
    offenders = {p.name: direct_imports(p) for p in sorted(CORE.glob("*.py"))}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_direct_check_catches_a_clock(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom zmq import Context\nimport relay.core.digest\n")
    assert direct_imports(bad) == ["time", "zmq"]
