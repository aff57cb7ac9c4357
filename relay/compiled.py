"""Which of relay's modules run compiled (mypyc), and the fallback to their sources.

``setup.py`` compiles the modules ``sources`` lists (the packages of ``PACKAGES`` but
``LEFT_OUT``, and ``MODULES``) with mypyc into one group when mypyc and a C compiler are there
(``scripts/compile.sh`` builds them beside their sources); a build without them, or with
``RELAY_PURE=1``, is pure Python. At import (``relay/__init__.py``),
``choose`` decides for the whole group: the compiled modules run only if every one of them is
there and, in a checkout (where ``setup.py`` is; an installed wheel's file times say nothing),
none is older than its source; otherwise, and whenever ``RELAY_PURE=1`` is set, a finder loads
each of them from its ``.py``. All or nothing, because compiled code calls the
functions of its group directly: one module run from its edited source would leave the others
calling its stale compiled copy.

This module imports nothing of relay (``setup.py`` runs it before relay is installed).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# A node's loop: the core and the work groups, and the shell that runs them (its sockets, its
# disk, the codecs between them).
PACKAGES = ("relay/core", "relay/queue", "relay/wire", "relay/storage", "relay/runtime")
MODULES = ("relay/shell.py",)
LEFT_OUT = frozenset(  # of those packages: off a node's loop, and not compilable as they are
    {
        "relay/runtime/metrics_server.py",  # its classes subclass the standard library's server
        "relay/runtime/launcher.py",  # the tools that start nodes
        "relay/runtime/local_cluster.py",
        "relay/runtime/netns.py",
    }
)
GROUP = "relay_native"  # the group's shared library: the module relay_native__mypyc, a file
# beside the relay package (mypyc computes its modules' package paths from there)
LIBRARY = f"{GROUP}__mypyc"
ROOT = Path(__file__).resolve().parent.parent  # the folder that holds the relay package


def sources(root: Path = ROOT) -> list[Path]:
    """The source files compiled, relative to ``root``."""
    found = [p.relative_to(root) for d in PACKAGES for p in (root / d).glob("*.py")]
    kept = [p for p in found if p.as_posix() not in LEFT_OUT]
    return sorted([*kept, *map(Path, MODULES)])


def _compiled(source: Path) -> Path | None:
    """The extension module built from ``source``, if any."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        built = source.with_name(source.stem + suffix)
        if built.exists():
            return built
    return None


def choose(root: Path = ROOT) -> str:
    """ "compiled", or why the group runs from its sources."""
    if os.environ.get("RELAY_PURE") == "1":
        return "pure: RELAY_PURE=1"
    built = {relative: _compiled(root / relative) for relative in sources(root)}
    library = _compiled(root / f"{LIBRARY}.py")
    missing = [relative for relative, module in built.items() if module is None]
    if library is None and len(missing) == len(built):
        return "pure: not compiled"
    checkout = (root / "setup.py").exists()
    hint = " (scripts/compile.sh)" if checkout else ""
    if library is None or missing:
        absent = LIBRARY if library is None else str(missing[0])
        return f"pure: partly compiled, no compiled {absent}{hint}"
    if checkout:
        for relative, module in built.items():
            if module is not None and module.stat().st_mtime < (root / relative).stat().st_mtime:
                return f"pure: {relative} is newer than its compiled module{hint}"
    return "compiled"


class SourceFinder:
    """Loads the compiled group's modules from their ``.py`` files (a finder of
    ``sys.meta_path``; not an ``importlib.abc.MetaPathFinder``, whose module loads
    ``tempfile`` and ``random`` into every process, the pure core's among them)."""

    def __init__(self, root: Path) -> None:
        self.names = {".".join(p.with_suffix("").parts): root / p for p in sources(root)}
        for name in list(self.names):
            if name.endswith(".__init__"):
                self.names[name.removesuffix(".__init__")] = self.names.pop(name)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        source = self.names.get(fullname)
        if source is None:
            return None
        loader = importlib.machinery.SourceFileLoader(fullname, str(source))
        package = source.name == "__init__.py"
        return importlib.util.spec_from_file_location(
            fullname,
            source,
            loader=loader,
            submodule_search_locations=[str(source.parent)] if package else None,
        )


def _load_library() -> None:
    """The group's shared library, from beside the relay package: a process whose path does
    not hold that folder (a script of a checkout, which finds relay through its editable
    install) would not find it when the first compiled module asks for it."""
    if LIBRARY in sys.modules:
        return
    built = _compiled(ROOT / f"{LIBRARY}.py")
    spec = importlib.util.spec_from_file_location(LIBRARY, built) if built else None
    if spec is None or spec.loader is None:
        raise ImportError(f"relay: no {LIBRARY} beside the relay package")
    library = importlib.util.module_from_spec(spec)
    sys.modules[LIBRARY] = library
    spec.loader.exec_module(library)


MODE = "unset"  # what ``install`` chose, for relay's status and the tests


def install() -> str:
    """Decide once per process (``relay/__init__.py``); say what was chosen."""
    global MODE
    if MODE == "unset":
        MODE = choose()
        if MODE == "compiled":
            _load_library()
        else:
            sys.meta_path.insert(0, SourceFinder(ROOT))
        if MODE.startswith(("pure: partly", "pure: relay/")):
            print(f"relay: running from source: {MODE.removeprefix('pure: ')}", file=sys.stderr)
    return MODE
