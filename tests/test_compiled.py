"""relay's compiled group (mypyc) runs only whole and only when current; otherwise, or with
RELAY_PURE=1, every module of it runs from source (relay/compiled.py)."""

import dataclasses
import importlib
import importlib.machinery
import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay import compiled

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def tree(root: Path) -> list[Path]:
    """A package tree with the compiled group's layout: two modules in each package, the
    single modules, and the modules left out (not returned: never compiled)."""
    made = []
    for package in compiled.PACKAGES:
        (root / package).mkdir(parents=True)
        for name in ("__init__", "one"):
            made.append(root / package / f"{name}.py")
            made[-1].write_text("")
    for module in compiled.MODULES:
        made.append(root / module)
        made[-1].write_text("")
    for module in compiled.LEFT_OUT:
        (root / module).write_text("")
    return made


def build(root: Path, sources: list[Path]) -> None:
    """Each source's compiled module, and the group's shared library."""
    (root / f"{compiled.LIBRARY}{SUFFIX}").write_bytes(b"")
    for source in sources:
        source.with_name(source.stem + SUFFIX).write_bytes(b"")


def test_the_group_runs_compiled_only_whole_and_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RELAY_PURE", raising=False)
    sources = tree(tmp_path)
    (tmp_path / "setup.py").write_text("")  # a checkout: file times count
    assert compiled.choose(tmp_path) == "pure: not compiled"
    build(tmp_path, sources[:-1])
    missing = sources[-1].relative_to(tmp_path)
    assert compiled.choose(tmp_path).startswith(f"pure: partly compiled, no compiled {missing}")
    build(tmp_path, sources[-1:])
    assert compiled.choose(tmp_path) == "compiled"
    (tmp_path / f"{compiled.LIBRARY}{SUFFIX}").unlink()
    no_library = f"pure: partly compiled, no compiled {compiled.LIBRARY}"
    assert compiled.choose(tmp_path).startswith(no_library)
    build(tmp_path, sources)
    added = tmp_path / compiled.PACKAGES[0] / "two.py"
    added.write_text("")
    assert compiled.choose(tmp_path).startswith("pure: partly compiled")
    build(tmp_path, [added])
    edited = sources[1]
    later = time.time() + 5
    os.utime(edited, (later, later))
    assert compiled.choose(tmp_path).startswith(f"pure: {edited.relative_to(tmp_path)} is newer")
    (tmp_path / "setup.py").unlink()  # installed: a wheel's file times say nothing
    assert compiled.choose(tmp_path) == "compiled"
    monkeypatch.setenv("RELAY_PURE", "1")
    assert compiled.choose(tmp_path) == "pure: RELAY_PURE=1"


def test_the_source_finder_names_every_module_of_the_group(tmp_path: Path) -> None:
    tree(tmp_path)
    finder = compiled.SourceFinder(tmp_path)
    for package in compiled.PACKAGES:
        name = package.replace("/", ".")
        spec = finder.find_spec(name, None)
        assert spec is not None and spec.origin == str(tmp_path / package / "__init__.py")
        assert spec.submodule_search_locations == [str(tmp_path / package)]
        spec = finder.find_spec(f"{name}.one", None)
        assert spec is not None and spec.origin == str(tmp_path / package / "one.py")
    for module in compiled.MODULES:
        spec = finder.find_spec(module.removesuffix(".py").replace("/", "."), None)
        assert spec is not None and spec.origin == str(tmp_path / module)
    for module in compiled.LEFT_OUT:
        assert finder.find_spec(module.removesuffix(".py").replace("/", "."), None) is None
    assert finder.find_spec("relay.client.producer", None) is None


@pytest.mark.slow
def test_relay_pure_runs_every_module_of_the_group_from_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a fresh interpreter: with RELAY_PURE=1 each compiled module comes from its .py;
    without, from what this checkout holds (compiled after scripts/compile.sh)."""
    probe = (
        "import relay, relay.runtime.node, relay.shell, sys;"
        "group = {'.'.join(p.with_suffix('').parts).removesuffix('.__init__')"
        " for p in relay.compiled.sources()};"
        "print(relay.compiled.MODE);"
        "print(*sorted({m.__file__.rsplit('.', 1)[-1] for n, m in sys.modules.items()"
        " if n in group and getattr(m, '__file__', None)}))"
    )
    env = {**os.environ, "RELAY_PURE": "1"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.split("\n")[:2] == ["pure: RELAY_PURE=1", "py"], out.stderr
    env.pop("RELAY_PURE")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    mode, kinds = out.stdout.split("\n")[:2]
    monkeypatch.delenv("RELAY_PURE", raising=False)  # as in the interpreter just run
    assert mode == compiled.choose()
    assert kinds == ("so" if mode == "compiled" else "py"), out.stderr


def written_out_inits() -> list[type]:
    """The dataclasses of the compiled group whose ``__init__`` is written out
    (``init=False``), so that mypyc compiles it."""
    found = []
    for path in compiled.sources():
        module = importlib.import_module(".".join(path.with_suffix("").parts))
        for value in vars(module).values():
            params = getattr(value, "__dataclass_params__", None)
            if isinstance(value, type) and value.__module__ == module.__name__ and params:
                found += [value] if not params.init else []
    return found


@pytest.mark.pure
def test_a_written_out_init_takes_the_fields_in_order_with_their_defaults() -> None:
    """Each written-out ``__init__`` takes exactly the fields, in their order, with their
    annotations and defaults, and sets each from the argument of its name. From source: a
    compiled ``__init__`` (built from the same code) has no signature to read, and checks its
    arguments' types, which the stand-ins here have not."""
    classes = written_out_inits()
    assert len(classes) == 16
    for cls in classes:
        fields = dataclasses.fields(cls)
        assert all(f.default_factory is dataclasses.MISSING for f in fields), cls
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        assert [(p.name, p.kind, p.annotation, p.default) for p in params] == [
            (f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, f.type, f.default)
            if f.default is not dataclasses.MISSING
            else (f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, f.type, inspect.Parameter.empty)
            for f in fields
        ], cls
        given = {f.name: object() for f in fields}
        by_place = cls(*given.values())
        for f in fields:
            assert getattr(by_place, f.name) is given[f.name], (cls, f.name)
