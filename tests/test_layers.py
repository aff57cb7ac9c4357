"""The import layers of docs/design.md, declared in pyproject.toml for import-linter: the tree
keeps them, and an upward import planted in a copy of it breaks them; every core module has
a layer. The import-linter runs are processes (the copy's packages would collide with this
interpreter's): slow. The fast tier has scripts/test.sh run lint-imports over the tree before
pytest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("relay", "spark_consumer", "chaos")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the packages under ``root``, with its pyproject.toml."""
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def copy_of_tree(to: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, to / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", to / "pyproject.toml")
    return to


@pytest.mark.slow
def test_the_tree_keeps_its_layers() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_every_core_module_has_a_layer() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (core,) = [c for c in config["contracts"] if c.get("containers") == ["relay.core"]]
    layered = {m.strip() for layer in core["layers"] for m in layer.split("|")}
    modules = {p.stem for p in (ROOT / "relay" / "core").glob("*.py") if p.stem != "__init__"}
    assert modules == layered


@pytest.mark.slow
def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    root = copy_of_tree(tmp_path)
    timer = root / "relay" / "core" / "timer.py"
    source = timer.read_text()
    planted = "from relay.runtime import node as _planted  # noqa: F401\n"
    timer.write_text(
        source.replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n" + planted,
            1,
        )
    )
    result = lint_imports(root)
    assert result.returncode != 0
    assert "relay.core is not allowed to import relay.runtime" in result.stdout
    assert "relay.core.timer -> relay.runtime.node" in result.stdout


@pytest.mark.slow
def test_an_import_up_the_core_breaks_its_layers(tmp_path: Path) -> None:
    root = copy_of_tree(tmp_path)
    lane = root / "relay" / "core" / "lane.py"
    planted = "from relay.core import stream as _planted  # noqa: F401\n"
    lane.write_text(
        lane.read_text().replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n" + planted,
            1,
        )
    )
    result = lint_imports(root)
    assert result.returncode != 0
    assert "relay.core.lane -> relay.core.stream" in result.stdout
