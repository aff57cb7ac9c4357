"""relay's build: pyproject.toml says everything but this. The typed pure modules of
``relay.compiled.PACKAGES`` are compiled with mypyc into one group when mypyc and a C compiler
are there (pip's isolated build brings mypyc); without them, with ``RELAY_PURE=1``, or when
compiling fails, the build is pure Python and runs the same. ``scripts/compile.sh`` builds
them beside the sources (``build_ext --inplace``), which is what the tests and benchmarks
run."""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

REQUIRED = os.environ.get("RELAY_COMPILE_REQUIRED") == "1"  # scripts/compile.sh: fail loudly


class OptionalBuildExt(build_ext):
    """A compile that fails leaves a pure Python build, saying why, instead of no build (with
    ``RELAY_COMPILE_REQUIRED=1`` it fails): the modules it did build are removed, so the
    group is never installed in part."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as failure:  # any compiler failure
            if REQUIRED:
                raise
            print(f"relay: compiling failed ({failure}): a pure Python build", file=sys.stderr)
            for extension in self.extensions:
                Path(self.get_ext_fullpath(extension.name)).unlink(missing_ok=True)
            self.extensions = []


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
    try:
        built = mypycify(paths, opt_level="3", group_name=compiled["GROUP"], multi_file=True)
    except (Exception, SystemExit) as failure:  # mypyc exits on a type error
        if REQUIRED:
            raise
        print(f"relay: mypyc failed ({failure}): a pure Python build", file=sys.stderr)
        return []
    return list(built)


setup(ext_modules=compiled_modules(), cmdclass={"build_ext": OptionalBuildExt})
