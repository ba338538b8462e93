"""The column names of a table, carried with the dask array :func:`dclust.open_array` made of it.

A dask array has no place for column names, so the arrays that :func:`dclust.open_array` builds from Parquet, CSV or
a pandas/dask DataFrame are *registered* here under their dask name (a deterministic token of the graph that
produced them: the same file and columns give the same name). :func:`dclust._validation.feature_names` (public as
:func:`dclust.io.feature_names`) answers for registered arrays, DataFrames and DataArrays -- the inputs an estimator
can keep ``feature_names_in_`` from. An array derived from a registered one (``X[:, :2]``, ``X.rechunk(...)``,
``X * 2``) has another name and no feature names: they describe the array as opened, nothing else. ``persist()``
keeps the name, and so the feature names.

This module sits at the bottom of the package (next to ``errors`` and ``_validation``): the io layer registers names,
estimators read them, neither imports the other.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Sequence

import dask.array as da
import numpy as np

__all__ = ["register_feature_names", "registered_feature_names"]

#: how many opened tables are remembered (names only: a few bytes per column)
_CAPACITY = 4096
_NAMES: "OrderedDict[str, tuple[str, ...]]" = OrderedDict()
_LOCK = threading.Lock()


def register_feature_names(arr: Any, names: Sequence[Any]) -> Any:
    """Remember ``names`` as the columns of the dask array ``arr`` (only when they are all strings, as
    scikit-learn's ``feature_names_in_``); return ``arr``."""
    names = tuple(names)
    if names and all(isinstance(n, str) for n in names) and len(names) == arr.shape[-1]:
        with _LOCK:
            _NAMES[arr.name] = names
            _NAMES.move_to_end(arr.name)
            while len(_NAMES) > _CAPACITY:
                _NAMES.popitem(last=False)
    return arr


def registered_feature_names(X: Any) -> np.ndarray | None:
    """The column names registered for the dask array ``X`` (object array of str), or None."""
    if not isinstance(X, da.Array):
        return None
    with _LOCK:
        found = _NAMES.get(X.name)
    return np.asarray(found, dtype=object) if found is not None else None
