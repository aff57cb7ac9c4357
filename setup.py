"""relay's build: pyproject.toml says everything but this. The typed pure modules of
``relay.compiled.PACKAGES`` are compiled with mypyc into one group when mypyc and a C compiler
are there (pip's isolated build brings mypyc); without them, or with ``RELAY_PURE=1``, the
build is pure Python and runs the same. ``scripts/compile.sh`` builds them beside the sources
(``build_ext --inplace``), which is what the tests and benchmarks run."""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup


def compiled_modules() -> list[object]:
    if os.environ.get("RELAY_PURE") == "1":
        return []
    compiler = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        print(f"relay: no C compiler ({compiler}): a pure Python build", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("relay: no mypyc: a pure Python build", file=sys.stderr)
        return []
    root = Path(__file__).resolve().parent
    compiled = runpy.run_path(str(root / "relay" / "compiled.py"))
    paths = [str(p) for p in compiled["sources"](root)]
    return list(mypycify(paths, opt_level="3", group_name=compiled["GROUP"], multi_file=True))


setup(ext_modules=compiled_modules())
