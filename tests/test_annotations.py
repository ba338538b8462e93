"""Every public function and method of dclust's public API carries annotations (issue 18, item 3).

The walk starts from ``dclust.__all__`` and the ``__all__`` of each public subpackage; for a class it covers the
methods defined by dclust itself (``__init__``, ``fit``, ``predict``, ... and every other public method), not the
ones inherited from scikit-learn or the standard library.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

PUBLIC_MODULES = (
    "dclust",
    "dclust.cluster",
    "dclust.stream",
    "dclust.constraints",
    "dclust.io",
    "dclust.metrics",
    "dclust.model_selection",
    "dclust.plot",
    "dclust.datasets",
    "dclust.errors",
)
DUNDERS = ("__init__", "__call__")


def _own(cls):
    """The classes of ``cls``'s MRO that dclust defines (its own methods, not scikit-learn's)."""
    return [k for k in cls.__mro__ if k.__module__.split(".")[0] == "dclust"]


def _callables():
    """(qualified name, function) for every public function and dclust-defined public method."""
    seen: dict[str, object] = {}
    for modname in PUBLIC_MODULES:
        pytest.importorskip(modname.split(".")[0])
        module = importlib.import_module(modname)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                for klass in _own(obj):
                    for attr, raw in vars(klass).items():
                        if attr.startswith("_") and attr not in DUNDERS:
                            continue
                        func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
                        if isinstance(raw, property):
                            func = raw.fget
                        if inspect.isfunction(func) and func.__module__.split(".")[0] == "dclust":
                            seen.setdefault(f"{func.__module__}.{func.__qualname__}", func)
            elif inspect.isfunction(obj) and obj.__module__.split(".")[0] == "dclust":
                seen.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return sorted(seen.items())


def _missing(func) -> list[str]:
    """The parameters (``return`` included) of ``func`` without an annotation; ``self``/``cls`` are exempt."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    gaps = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    if sig.return_annotation is inspect.Signature.empty:
        gaps.append("return")
    return gaps


CALLABLES = _callables()


def test_the_walk_reaches_the_estimators_and_functions():
    names = {name for name, _ in CALLABLES}
    assert "dclust.cluster._kmeans.KMeans.fit" in names
    assert "dclust.io._open.open_array" in names
    assert any(name.endswith("DynamicMeans.partial_fit") for name in names)
    assert len(names) > 100


def test_missing_detects_an_unannotated_parameter_and_return():
    def bare(self, x, y: int = 0):
        return x

    def full(x: int, *args: int, **kw: str) -> int:
        return x

    assert _missing(bare) == ["x", "return"]
    assert _missing(full) == []


@pytest.mark.parametrize(
    "name,func",
    CALLABLES,
    ids=[name for name, _ in CALLABLES],
)
def test_public_callable_is_annotated(name, func):
    gaps = _missing(func)
    assert not gaps, f"{name}: no annotation on {', '.join(gaps)}"
