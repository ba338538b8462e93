"""The layers of docs/architecture.md, checked on the source: every import of every module of ``dclust`` (parsed
with ``ast``, lazy imports inside functions included) points down the layer table, and ``dclust.apps`` and
``dclust._cli`` use only dclust's public API.

The layer table below is the one of docs/architecture.md (keep the two in step). A module may import modules of
its own layer or of a layer below; there are no exceptions, lazy imports included.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "dclust"

#: Layer of every package (lowest first). A package is ``dclust.<name>`` (a subpackage or a top-level module);
#: ``dclust`` itself is the public facade (its ``__init__``).
LAYERS: list[tuple[str, set[str]]] = [
    ("foundation", {"dclust.errors", "dclust.typing", "dclust._feature_names", "dclust._version",
                    "dclust._registry"}),
    ("kernels", {"dclust.kernels"}),
    ("storage", {"dclust._store"}),
    ("orchestration", {"dclust._dask"}),
    ("fit loop", {"dclust._fit", "dclust._validation"}),
    ("estimators", {"dclust.cluster", "dclust.stream", "dclust.constraints", "dclust.datasets"}),
    ("io and analysis", {"dclust.io", "dclust.metrics", "dclust.model_selection", "dclust.plot"}),
    ("facade", {"dclust"}),
    ("applications", {"dclust.apps", "dclust._cli", "dclust.__main__"}),
]
LEVEL = {pkg: i for i, (_, pkgs) in enumerate(LAYERS) for pkg in pkgs}

#: The public modules: the facade and the public packages (and the public modules of apps). An import of dclust
#: from apps/ or _cli/ must name one of them, and only names in its ``__all__``.
PUBLIC = ["dclust", "dclust.errors", "dclust.cluster", "dclust.stream", "dclust.constraints", "dclust.datasets",
          "dclust.io", "dclust.io.video", "dclust.io.pointcloud", "dclust.metrics", "dclust.model_selection",
          "dclust.plot", "dclust.apps", "dclust.apps.video", "dclust.apps.pointcloud"]
#: Packages that may import only the public API (besides their own modules).
PUBLIC_ONLY = ("dclust.apps", "dclust._cli")


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """``dclust.<first component>``, or ``dclust`` for the facade."""
    return ".".join(module.split(".")[:2])


def imports(source: str, module: str, is_package: bool) -> Iterator[tuple[str, tuple[str, ...], int]]:
    """``(imported module, imported names, line)`` of every import of dclust in ``source``; relative imports are
    resolved against ``module``. ``import a.b`` gives ``("a.b", ())``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "dclust" or alias.name.startswith("dclust."):
                    yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "dclust" or target.startswith("dclust."):
                yield target, tuple(a.name for a in node.names), node.lineno


def _resolve(target: str, names: tuple[str, ...]) -> list[str]:
    """The modules an import reaches: ``from a import b`` reaches ``a.b`` when b is a submodule, else ``a``."""
    out = []
    for name in names or ("",):
        sub = f"{target}.{name}" if name else target
        is_module = name and ((ROOT.parent / sub.replace(".", "/")).with_suffix(".py").exists()
                              or (ROOT.parent / sub.replace(".", "/") / "__init__.py").exists())
        out.append(sub if is_module else target)
    return out


def modules() -> Iterator[tuple[str, pathlib.Path]]:
    for path in sorted(ROOT.rglob("*.py")):
        yield module_name(path), path


def upward_imports() -> dict[tuple[str, str], int]:
    found = {}
    for module, path in modules():
        for target, names, line in imports(path.read_text(), module, path.name == "__init__.py"):
            for reached in _resolve(target, names):
                a, b = package_of(module), package_of(reached)
                if a != b and LEVEL[b] > LEVEL[a]:
                    found[(module, reached)] = line
    return found


def public_api_violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports of ``source`` (a module of apps/ or _cli/) that reach past dclust's public API."""
    own = package_of(module)
    bad = []
    for target, names, line in imports(source, module, is_package):
        if package_of(target) == own and own != "dclust":  # the package's own modules
            continue
        if target not in PUBLIC:
            bad.append(f"{module}:{line}: imports the private module {target}")
            continue
        exported = set(importlib.import_module(target).__all__)
        for name in names:
            if name not in exported and f"{target}.{name}" not in PUBLIC:
                bad.append(f"{module}:{line}: imports {name!r} from {target}, which is not in its __all__")
    return bad


def private_attributes(source: str, module: str) -> list[str]:
    """``dclust._x`` / ``dclust.io._y`` attribute chains in ``source`` (private API reached through ``import
    dclust``)."""
    tree = ast.parse(source)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:  # whole chains only
            chain, root = [node.attr], node.value
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            names = list(reversed(chain))
            if isinstance(root, ast.Name) and root.id == "dclust" and any(
                    n.startswith("_") and not (n.startswith("__") and n.endswith("__")) for n in names):
                bad.append(f"{module}:{node.lineno}: uses dclust.{'.'.join(names)}")
    return sorted(set(bad))


def test_every_package_has_a_layer():
    unknown = {package_of(m) for m, _ in modules()} - set(LEVEL)
    assert not unknown, f"add these packages to the layer table (and to docs/architecture.md): {unknown}"


def test_imports_point_down_the_layers():
    found = upward_imports()
    assert not found, "upward imports (a layer importing a layer above it): " + "; ".join(
        f"{a} (line {line}) imports {b}" for (a, b), line in sorted(found.items()))


@pytest.mark.parametrize("package", PUBLIC_ONLY)
def test_apps_and_cli_use_only_the_public_api(package):
    bad = []
    for module, path in modules():
        if module == package or module.startswith(package + "."):
            bad += public_api_violations(path.read_text(), module, path.name == "__init__.py")
            bad += private_attributes(path.read_text(), module)
    assert not bad, "\n".join(bad)


def test_the_cli_has_no_import_circles_and_nothing_imports_its_main():
    """main.py imports every command module and registers its commands; no module imports main (so ``python -m
    dclust._cli.main`` builds the same app as ``dclust``) and the modules of _cli import each other without
    circles."""
    graph: dict[str, set[str]] = {}
    for module, path in modules():
        if module.startswith("dclust._cli"):
            found = imports(path.read_text(), module, path.name == "__init__.py")
            graph[module] = {reached for target, names, _ in found for reached in _resolve(target, names)
                             if reached.startswith("dclust._cli.")}
    assert not [m for m, deps in graph.items() if "dclust._cli.main" in deps]
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import circle: " + " -> ".join(path + (module,))
        if module in done:
            return
        for dep in graph.get(module, ()):
            visit(dep, path + (module,))
        done.add(module)

    for module in graph:
        visit(module, ())


@pytest.mark.parametrize("source, needle", [
    ("from dclust.kernels import distances", "private module dclust.kernels"),
    ("from dclust.kernels.kmeans import lloyd", "private module dclust.kernels.kmeans"),
    ("from ..kernels.distances import nearest", "private module dclust.kernels.distances"),
    ("from .._fit import emit", "private module dclust._fit"),
    ("import dclust._dask.passes", "private module dclust._dask.passes"),
    ("from dclust.io import _write", "'_write' from dclust.io"),
    ("from dclust import KMeans, _fit", "'_fit' from dclust"),
])
def test_the_check_catches_a_private_import(source, needle):
    """The check itself: a private import added to an app is reported (and a public one is not)."""
    found = public_api_violations(source, "dclust.apps.video")
    assert len(found) == 1 and needle in found[0], found
    assert public_api_violations("from dclust.io import open_array\nimport dclust\nfrom . import _scenes",
                                 "dclust.apps.video") == []
    assert private_attributes("import dclust\ndclust._fit.emit(e)\ndclust.io.open_array(p)", "dclust._cli.x") == [
        "dclust._cli.x:2: uses dclust._fit.emit"]


def test_the_check_catches_an_upward_import():
    found = [(t, names) for t, names, _ in imports("from ..cluster import KMeans", "dclust._dask.passes", False)]
    assert found == [("dclust.cluster", ("KMeans",))]
    assert LEVEL[package_of(_resolve(*found[0])[0])] > LEVEL["dclust._dask"]
