"""Validation from metadata: parameters, arrays (shape, dtype, chunks) and sample weights.

Nothing here reads the data, except :func:`check_sample_weight`, which scans the (N,) weights once.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import dask.array as da
import numpy as np

from ._dask.passes import asarray, astype, compute, compute_chunk_sizes, from_array, rechunk
from ._feature_names import registered_feature_names
from .kernels.dynmeans import reparameterise
from .errors import ChunkingError, InvalidDataError, InvalidParameterError, message
from .typing import SeedLike

__all__ = [
    "Interval",
    "Options",
    "validate_params",
    "check_array",
    "check_sample_weight",
    "as_generator",
    "InputInfo",
    "MAX_FEATURE_CHUNK_BYTES",
    "DEFAULT_BLOCK_BYTES",
    "feature_names",
    "dataframe_to_array",
    "check_feature_names",
    "check_n_features",
    "refuse_sparse",
]

#: A feature axis split in several chunks is merged into one (with a warning) while a block stays below this.
MAX_FEATURE_CHUNK_BYTES = 256 * 2**20
#: Row-chunk size used when a numpy array is wrapped into a dask array.
DEFAULT_BLOCK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Interval:
    """A numeric range; ``kind`` is ``"real"`` or ``"int"``; ``closed`` in {"both", "left", "right", "neither"}."""

    kind: str
    left: float | None
    right: float | None
    closed: str = "both"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind == "int" and not isinstance(value, numbers.Integral):
            return False
        if not math.isfinite(float(value)):
            return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if (value > self.right  # type: ignore[operator]  # typeshed: numbers.Real has no comparisons
                    or (value == self.right and self.closed in ("left", "neither"))):
                return False
        return True

    def __str__(self) -> str:
        lo = "-inf" if self.left is None else self.left
        hi = "inf" if self.right is None else self.right
        lb = "[" if self.closed in ("both", "left") and self.left is not None else "("
        rb = "]" if self.closed in ("both", "right") and self.right is not None else ")"
        return f"{'an integer' if self.kind == 'int' else 'a finite real number'} in {lb}{lo}, {hi}{rb}"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values (compared with ``==``)."""

    values: tuple[Any, ...]

    def accepts(self, value: Any) -> bool:
        return isinstance(value, (str, bool, type(None))) and value in self.values

    def __str__(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)


class _Kind:
    def __init__(self, name: str, test: Callable[[Any], bool]) -> None:
        self.name, self.test = name, test

    def accepts(self, value: Any) -> bool:
        return self.test(value)

    def __str__(self) -> str:
        return self.name


ARRAY = _Kind("an array of shape (n_clusters, n_features)", lambda v: hasattr(v, "shape") and np.ndim(v) == 2)
NONE = _Kind("None", lambda v: v is None)
SEED = _Kind(
    "None, an int >= 0 or a numpy.random.Generator",
    lambda v: v is None
    or isinstance(v, np.random.Generator)
    # typeshed: numbers.Integral has no comparisons
    or (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0),  # type: ignore[operator]
)
CALLABLE = _Kind("a callable", callable)
#: The two commonest constraints: a real number > 0 (penalties, scales, variances) and a count >= 1.
POSITIVE = Interval("real", 0, None, "neither")
COUNT = Interval("int", 1, None)


def constrain(kind: Any, *names: str) -> dict[str, list[Any]]:
    """``{name: [kind]}`` for every name: the entries of a ``_parameter_constraints`` that share one constraint,
    written once (``{**constrain(POSITIVE, "lam", "tol"), ...}``)."""
    return {name: [kind] for name in names}


def validate_params(estimator: Any) -> None:
    """Check every constructor parameter of ``estimator`` against its ``_parameter_constraints`` (what ``fit``
    does first), e.g. before any data is read.

    Raises
    ------
    InvalidParameterError
        The first parameter whose value no constraint accepts.

    Examples
    --------
    >>> import dclust
    >>> from dclust.cluster import validate_params
    >>> validate_params(dclust.KMeans(n_clusters=3))
    >>> try:
    ...     validate_params(dclust.KMeans(n_clusters=0))
    ... except dclust.errors.InvalidParameterError as exc:
    ...     print(str(exc).split(";")[0])
    KMeans(n_clusters=...): expected an integer in [1, inf)
    """
    cls = type(estimator).__name__
    for name, constraints in estimator._parameter_constraints.items():
        value = getattr(estimator, name)
        if any(c.accepts(value) for c in constraints):
            continue
        expected = " or ".join(str(c) for c in constraints)
        raise InvalidParameterError(
            message(f"{cls}({name}=...)", expected, f"{value!r}", f"Pass a valid {name} to {cls}(...).")
        )


def as_generator(seed: SeedLike) -> np.random.Generator:
    """One numpy Generator per fit, from ``random_state``."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


@dataclass
class InputInfo:
    """What an estimator remembers of its input to shape its outputs the same way."""

    kind: str  # "numpy" | "dask" | "xarray"
    template: Any = None  # xarray: X with the feature dimension dropped, used to rebuild a labelled output
    sample_dim: str | None = None


def _is_xarray(X: Any) -> bool:
    return hasattr(X, "dims") and hasattr(X, "coords") and hasattr(X, "variable")


def _is_lazy_array(X: Any) -> bool:
    """Chunked array-likes that dask can wrap: zarr arrays (and h5py datasets) expose .chunks and slicing."""
    return hasattr(X, "shape") and hasattr(X, "dtype") and hasattr(X, "chunks") and hasattr(X, "__getitem__")


def _default_rows(n_features: int, itemsize: int) -> int:
    return max(1, DEFAULT_BLOCK_BYTES // max(1, n_features * itemsize))


def check_array(
    X: Any,
    *,
    name: str = "X",
    n_features: int | None = None,
    min_samples: int = 1,
) -> tuple[da.Array, InputInfo]:
    """Turn any supported input into a row-chunked 2-D floating dask array, from metadata only.

    Accepted: numpy arrays, dask arrays, zarr arrays and xarray DataArrays of shape (n_samples, n_features)
    (for xarray the first dimension is the sample dimension; use :func:`dclust.open_array` with ``sample_dim=``
    for other layouts). Integer data becomes float64, float16 becomes float32, float32/float64 are kept.
    """
    info = InputInfo("dask")
    X = dataframe_to_array(X, name)
    if isinstance(X, (str, os.PathLike)):
        raise InvalidDataError(
            message(name, "an array (numpy, dask, zarr or xarray)", f"the path {os.fspath(X)!r}",
                    f"Open the store first: {name} = dclust.open_array({os.fspath(X)!r}).")
        )
    if _is_xarray(X):
        if X.ndim != 2:
            raise InvalidDataError(
                message(name, "a 2-D DataArray (samples, features)", f"dims {tuple(X.dims)}",
                        "Use dclust.open_array(data_array, sample_dim=...) to stack the other dims as features.")
            )
        info = InputInfo("xarray", X.isel({X.dims[1]: 0}, drop=True), X.dims[0])
        X = X.data
    refuse_sparse(X, name)
    if isinstance(X, da.Array):
        arr = _known_chunks(X, name)
    elif isinstance(X, np.ndarray) or (not _is_lazy_array(X) and not isinstance(X, da.Array)):
        try:
            Xn = np.asarray(X)
        except Exception as exc:  # noqa: BLE001 - anything numpy refuses
            raise InvalidDataError(
                message(name, "an array-like of numbers", f"{type(X).__name__}", "Pass a numeric 2-D array.")
            ) from exc
        if info.kind == "dask":
            info = InputInfo("numpy")
        _check_dtype(Xn.dtype, name)
        _check_shape(Xn.shape, name, min_samples)
        rows = _default_rows(Xn.shape[1], Xn.dtype.itemsize)
        arr = from_array(Xn, (rows, -1))
    else:  # zarr array or another chunked store
        _check_dtype(np.dtype(X.dtype), name)
        _check_shape(tuple(X.shape), name, min_samples)
        chunks = tuple(X.chunks) if getattr(X, "chunks", None) else "auto"
        arr = from_array(X, chunks)
    _check_dtype(arr.dtype, name)
    _check_shape(arr.shape, name, min_samples)
    if n_features is not None:
        check_n_features(n_features, arr.shape[1], name=name)
    arr = _one_feature_chunk(arr, name)
    if arr.dtype.kind in "iu":
        arr = astype(arr, np.float64)
    elif arr.dtype == np.float16:
        arr = astype(arr, np.float32)
    return arr, info


def check_n_features(expected: int, received: int, *, name: str = "X", estimator: str = "the model") -> None:
    """Refuse data with another number of features than the model was fitted on (scikit-learn's wording inside)."""
    if received != expected:
        raise InvalidDataError(
            message(name, f"{expected} features (as seen in fit)",
                    f"{received} features ({name} has {received} features, but {estimator} is expecting {expected} "
                    "features as input)", "Pass data with the same columns the model was fitted on.")
        )


def refuse_sparse(X: Any, name: str = "X") -> None:
    """Sparse matrices (scipy.sparse, pydata sparse, dask arrays of them) are refused with the way out."""
    meta = getattr(X, "_meta", None) if isinstance(X, da.Array) else X
    module = type(meta).__module__ or ""
    if module.startswith(("scipy.sparse", "sparse")) or hasattr(meta, "tocsr") or hasattr(meta, "todense"):
        raise InvalidDataError(
            message(name, "a dense array (numpy, dask, zarr or xarray)", f"a sparse {type(meta).__name__}",
                    "dclust's kernels work on dense row blocks: densify block by block with "
                    f"{name}.map_blocks(lambda b: b.toarray()) for dask, or {name}.toarray() when it fits in memory.")
        )


def _known_chunks(X: da.Array, name: str) -> da.Array:
    """A dask array whose row-chunk sizes are known: unknown ones (a boolean mask, ``to_dask_array()``) are resolved
    in one pass that computes the blocks' lengths only (logged); unknown feature counts are refused."""
    if X.ndim >= 2 and any(math.isnan(c) for c in X.chunks[1]):
        raise InvalidDataError(
            message(f"{name}.shape", "a known number of features", f"{X.shape}",
                    "Give the columns explicitly, e.g. df.to_dask_array(lengths=True) for a dask DataFrame.")
        )
    if not any(math.isnan(c) for c in X.chunks[0]):
        return X
    logging.getLogger("dclust").info("%s has unknown chunk sizes: resolving them in one pass", name)
    return compute_chunk_sizes(X)


def _check_dtype(dtype: np.dtype, name: str) -> None:
    if dtype.kind in "iuf" and dtype.itemsize <= 8:
        return
    hint = {
        "c": "Complex data not supported: complex values have no order for clustering; pass the real and "
             "imaginary parts as two features.",
        "b": "Cast booleans to float first: X.astype('float32').",
    }.get(dtype.kind, "Convert it to float32 or float64 first.")
    raise InvalidDataError(message(f"{name}.dtype", "a real numeric dtype (float or int)", f"{dtype}", hint))


def _check_shape(shape: tuple[int, ...], name: str, min_samples: int) -> None:
    if len(shape) != 2:
        fix = (
            "Reshape your data: a single feature becomes a column with X.reshape(-1, 1)."
            if len(shape) == 1
            else "Stack the trailing dims into features (X.reshape(len(X), -1)), or use "
            "dclust.open_array(data_array, sample_dim=...) for xarray."
        )
        raise InvalidDataError(message(f"{name}.shape", "2 dimensions (n_samples, n_features)", f"{shape}", fix))
    if shape[0] < min_samples:
        raise InvalidDataError(
            message(f"{name}.shape", f"at least {min_samples} sample(s)",
                    f"{shape[0]} sample(s) (shape={shape}) while a minimum of {min_samples} is required",
                    "Pass non-empty data.")
        )
    if shape[1] < 1:
        raise InvalidDataError(
            message(f"{name}.shape", "at least 1 feature",
                    f"0 feature(s) (shape={shape}) while a minimum of 1 is required", "Pass non-empty data.")
        )


def _one_feature_chunk(arr: da.Array, name: str) -> da.Array:
    if len(arr.chunks[1]) == 1:
        return arr
    block_bytes = max(arr.chunks[0]) * arr.shape[1] * arr.dtype.itemsize
    fix = f"Use {name}.rechunk({{1: -1}}) (and fewer rows per chunk if the blocks get too large)."
    text = message(
        f"{name} is chunked along features (chunks={arr.chunks[1]})",
        "one chunk per row block", f"{len(arr.chunks[1])} feature chunks", fix,
    )
    if block_bytes > MAX_FEATURE_CHUNK_BYTES:
        raise ChunkingError(text)
    warnings.warn(text + " dclust rechunked it for you.", UserWarning, stacklevel=3)
    return rechunk(arr, {1: -1})


def check_sample_weight(sample_weight: Any, X: da.Array) -> da.Array | None:
    """Validate ``sample_weight`` (length N, finite, >= 0) and chunk it like X's rows; one scan of the weights."""
    if sample_weight is None:
        return None
    n = X.shape[0]
    w = sample_weight.data if _is_xarray(sample_weight) else sample_weight
    if not isinstance(w, da.Array):
        w = np.asarray(w)
        if w.dtype.kind not in "iuf":
            raise InvalidDataError(message("sample_weight", "numeric weights", f"dtype {w.dtype}", "Pass floats."))
    if w.ndim != 1 or w.shape[0] != n:
        raise InvalidDataError(
            message("sample_weight", f"a 1-D array of length {n} (one weight per row of X)",
                    f"shape {tuple(w.shape)}", "Pass one weight per sample.")
        )
    w = rechunk(astype(asarray(w), np.float64), (X.chunks[0],))
    bad_neg, bad_nonfinite, any_positive = compute((w < 0).any(), ~da.isfinite(w).all(), (w > 0).any())
    if bad_nonfinite or bad_neg:
        raise InvalidDataError(
            message("sample_weight", "finite weights >= 0", "negative or non-finite values",
                    "Drop those samples or give them weight 0.")
        )
    if n and not any_positive:
        raise InvalidDataError(
            message("sample_weight", "at least one weight > 0", "every weight zero (nothing to cluster)",
                    "Give the samples to cluster a positive weight.")
        )
    return w


# ------------------------------------------------------------------------------------------------------------------
# Checks shared by several estimators: one place, one error class each.
# ------------------------------------------------------------------------------------------------------------------


def check_lam_or_n_clusters(name: str, lam: Any, n_clusters: Any, n_samples: int) -> None:
    """Exactly one of ``lam`` and ``n_clusters`` (the DP-means family), and ``n_clusters <= n_samples``."""
    if (lam is None) == (n_clusters is None):
        got = "both" if lam is not None else "neither"
        raise InvalidParameterError(
            message(f"{name}(lam=..., n_clusters=...)", "exactly one of lam and n_clusters", got,
                    "Pass lam (the penalty per cluster) or n_clusters (a target for the lam heuristic).")
        )
    if n_clusters is not None and n_clusters > n_samples:
        raise InvalidParameterError(
            message(f"{name}(n_clusters=...)", f"at most n_samples={n_samples}", f"n_clusters={n_clusters}",
                    "Lower n_clusters or pass more data.")
        )


def check_temporal_pair(name: str, T_Q: Any, k_tau: Any, Q: Any, tau: Any) -> None:
    """Exactly one complete pair of D-Means' temporal parameters: ``(T_Q, k_tau)`` or ``(Q, tau)``."""
    given = [k for k, v in (("T_Q", T_Q), ("k_tau", k_tau), ("Q", Q), ("tau", tau)) if v is not None]
    if sorted(given) not in (["T_Q", "k_tau"], ["Q", "tau"]):
        raise InvalidParameterError(
            message(f"{name}(T_Q, k_tau, Q, tau)", "exactly one complete pair: (T_Q, k_tau) or (Q, tau)",
                    ", ".join(given) or "none",
                    "Give T_Q and k_tau (the paper's eq. 30 turns them into Q and tau), or Q and tau directly.")
        )


def temporal_rates(name: str, lam: float, T_Q: Any, k_tau: Any, Q: Any, tau: Any) -> tuple[float, float]:
    """D-Means' ``(Q, tau)`` from whichever pair was given (:func:`check_temporal_pair`): ``(Q, tau)`` as they are,
    ``(T_Q, k_tau)`` through the paper's eq. 30 at this ``lam``."""
    check_temporal_pair(name, T_Q, k_tau, Q, tau)
    if T_Q is not None:
        return reparameterise(lam, float(T_Q), float(k_tau))
    return float(Q), float(tau)


# ------------------------------------------------------------------------------------------------------------------
# Feature names: kept at fit from the columns of a pandas or dask DataFrame (or the feature coordinate of a 2-D
# xarray DataArray) and checked at predict / transform / score / partial_fit.
# ------------------------------------------------------------------------------------------------------------------


def _is_dataframe(X: Any) -> bool:
    """pandas or dask DataFrame (duck-typed: neither library is imported here)."""
    return hasattr(X, "columns") and hasattr(X, "dtypes") and not _is_xarray(X)


def _is_dask_dataframe(X: Any) -> bool:
    return _is_dataframe(X) and hasattr(X, "to_dask_array") and hasattr(X, "npartitions")


def feature_names(X: Any, name: str = "X") -> np.ndarray | None:
    """The feature (column) names of ``X``, an object array of str, or None when it has none.

    pandas and dask DataFrames name their features by their columns (as scikit-learn, only when every column name
    is a str: integer column labels are positions, not names); a 2-D xarray DataArray by the coordinate of its
    second (feature) dimension, when it has one (its values as str); a dask array that :func:`dclust.open_array`
    made of a table (Parquet, CSV, a DataFrame) by the table's columns. Other arrays, and arrays derived from those
    (``X[:, :1]``, ``X * 2``), have no names.

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
    if _is_xarray(X):
        if X.ndim != 2 or X.dims[1] not in X.coords:
            return None
        return np.asarray([str(v) for v in np.asarray(X.coords[X.dims[1]].values).tolist()], dtype=object)
    if not _is_dataframe(X):
        return None
    columns = list(X.columns)
    kinds = {isinstance(c, str) for c in columns}
    if kinds == {True}:
        return np.asarray(columns, dtype=object)
    if kinds == {True, False}:
        types = sorted({type(c).__name__ for c in columns})
        raise InvalidDataError(
            message(f"{name}.columns", "column names that are all str (feature names) or all non-str (positions)",
                    f"a mix of {', '.join(types)}",
                    f"Name every column with a str, e.g. {name}.columns = {name}.columns.astype(str).")
        )
    return None


def dataframe_to_array(X: Any, name: str = "X") -> Any:
    """A DataFrame's values as an array dclust's estimators take; anything else unchanged.

    A pandas DataFrame becomes an ndarray (numeric columns only). A dask DataFrame becomes a dask array whose
    partitions are its row blocks; their lengths, unknown to dask, are computed here in one pass that returns
    lengths only (never the values to the driver), so the array serves ``fit`` and the lazy ``labels_`` alike.
    """
    if not _is_dataframe(X):
        return X
    bad = [str(c) for c, t in zip(X.columns, X.dtypes) if np.dtype(t).kind not in "iufb"] if all(
        isinstance(t, np.dtype) for t in X.dtypes) else []
    if bad:
        raise InvalidDataError(
            message(f"{name} columns", "numeric columns only", f"non-numeric column(s) {', '.join(bad)}",
                    f"Select the numeric columns (e.g. {name}.select_dtypes('number')) or encode the others.")
        )
    if _is_dask_dataframe(X):
        return X.to_dask_array(lengths=True)
    return X.to_numpy()


def check_feature_names(fitted: np.ndarray | None, X: Any, estimator: str, name: str = "X") -> None:
    """Refuse input whose feature names differ from those seen in fit (reordered, missing or extra columns).

    Data without names given to a model fitted with names (or the reverse) is accepted with a ``UserWarning``, as
    scikit-learn does: an array carries no names to compare.
    """
    given = feature_names(X, name)
    if fitted is None and given is None:
        return
    if fitted is None:
        warnings.warn(f"{name} has feature names, but {estimator} was fitted without feature names",
                      UserWarning, stacklevel=3)
        return
    if given is None:
        warnings.warn(f"{name} does not have valid feature names, but {estimator} was fitted with feature names",
                      UserWarning, stacklevel=3)
        return
    if len(given) == len(fitted) and all(a == b for a, b in zip(given, fitted)):
        return
    missing = [c for c in fitted if c not in set(given)]
    extra = [c for c in given if c not in set(fitted)]
    parts = []
    if missing:
        parts.append("missing " + ", ".join(map(repr, missing)))
    if extra:
        parts.append("extra " + ", ".join(map(repr, extra)))
    if not parts:
        parts.append("the same names in another order")
    raise InvalidDataError(
        message(f"{estimator}: {name} columns (the feature names should match those that were passed during fit)",
                f"the columns {list(fitted)} in that order", f"{list(given)} ({'; '.join(parts)})",
                f"Select the fitted columns in their order: {name}[list(model.feature_names_in_)].")
    )
