"""The column names of a table, carried with the dask array :func:`dclust.open_array` made of it.

A dask array has no place for column names, so the arrays that :func:`dclust.open_array` builds from Parquet, CSV or
a pandas/dask DataFrame are *registered* here under their dask name (a deterministic token of the graph that
produced them: the same file and columns give the same name). :func:`feature_names` answers for registered arrays,
pandas and dask DataFrames and xarray DataArrays whose feature coordinate holds strings -- the inputs an estimator
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

__all__ = ["feature_names", "register_feature_names", "registered_feature_names"]

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


def _all_str(values: Any) -> np.ndarray | None:
    values = list(values)
    if values and all(isinstance(v, str) for v in values):
        return np.asarray(values, dtype=object)
    return None


def feature_names(X: Any) -> np.ndarray | None:
    """The feature (column) names of ``X``, or None when it has none.

    Parameters
    ----------
    X : dask array, pandas or dask DataFrame, xarray DataArray, or any array
        A dask array returned by :func:`dclust.open_array` for a table (Parquet, CSV, pandas or dask DataFrame)
        knows its columns; a DataFrame has its ``columns``; a 2-D DataArray the coordinate of its second dimension.

    Returns
    -------
    numpy.ndarray of str (object dtype) or None
        As scikit-learn's ``feature_names_in_``: names only when every one is a string.

    Examples
    --------
    >>> import pandas as pd, dclust
    >>> from dclust.io import feature_names
    >>> X = dclust.open_array(pd.DataFrame({"a": [0.0, 1.0], "b": [2.0, 3.0]}))
    >>> feature_names(X).tolist()
    ['a', 'b']
    >>> feature_names(X[:, :1]) is None
    True
    """
    if isinstance(X, da.Array):
        return registered_feature_names(X)
    columns = getattr(X, "columns", None)
    if columns is not None and hasattr(X, "dtypes"):
        return _all_str(columns)
    if hasattr(X, "dims") and hasattr(X, "coords") and getattr(X, "ndim", 0) == 2:
        dim = X.dims[1]
        if dim in X.coords and X.coords[dim].ndim == 1:
            return _all_str(X.coords[dim].values.tolist())
    return None
