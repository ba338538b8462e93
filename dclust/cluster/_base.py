"""Estimator base: scikit-learn estimators (keyword-only constructor, get/set_params, learned ``attr_``) and the
shared centroid-model methods (predict, transform, score) built on the fused kernels.

Every dclust estimator is a ``sklearn.base.BaseEstimator`` (clusterers also a ``ClusterMixin``, transformers a
``TransformerMixin``), so ``Pipeline``, ``GridSearchCV`` (through ``score``), ``clone``, ``check_is_fitted`` and
``__sklearn_tags__`` work as for scikit-learn's own; parameters are still validated by dclust in ``fit``, with
``dclust.errors``. One wrapper, installed on every subclass, keeps the input bookkeeping in one place:

- ``n_features_in_`` and ``feature_names_in_`` (the columns of a pandas or dask DataFrame, or the feature
  coordinate of an xarray DataArray) are set by ``fit`` (and a first ``partial_fit``) and checked by
  ``predict`` / ``transform`` / ``predict_proba`` / ``score`` / later ``partial_fit`` calls: reordered, missing or
  extra columns raise :class:`dclust.errors.InvalidDataError`.
- ``labels_`` of a clusterer whose ``fit`` does not compute them is ``predict(X)``: an ndarray for numpy input,
  and for dask, Zarr or dask-DataFrame input a *lazy* dask array with X's row chunks -- nothing of length N is
  computed or held by the driver; ``labels_.compute()`` or ``dclust.write_labels(model.labels_, path)`` stream
  it when wanted. Such lazy labels are not saved by :func:`dclust.save` (that would be a pass over the data).
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any, Callable

import dask.array as da
import numpy as np
import numpy.typing as npt
from sklearn.base import BaseEstimator as _SklearnBaseEstimator
from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, clone
from sklearn.base import TransformerMixin as _SklearnTransformerMixin

from .._dask.passes import block_offsets, compute, map_blocks, map_labels, map_reduce
from .._fit import NoCheckpoint, Step
from .._validation import (
    SEED, InputInfo, Interval, Options, _Kind, check_array, check_feature_names, check_n_features,
    dataframe_to_array, feature_names, refuse_sparse, validate_params,
)
from ..errors import InvalidDataError, InvalidParameterError, NotFittedError, message
from ..kernels.distances import block_stats, nearest
from ..kernels.stats import ClusterStats
from ..typing import ArrayLike, Ignored

__all__ = [
    "BaseEstimator", "CentroidMixin", "ClusterMixin", "TransformerMixin", "clone", "raise_if_bad_block", "CHECKPOINT",
]

#: Constraint of the ``checkpoint`` parameter: a path or fsspec URL, an fsspec mapper (it carries the storage options),
#: or None.
CHECKPOINT = _Kind("None, a path or fsspec URL (str or os.PathLike), or an fsspec mapper (fsspec.get_mapper(url, "
                   "**storage_options)) of a checkpoint store",
                   lambda v: v is None or isinstance(v, (str, os.PathLike))
                   or (hasattr(v, "fs") and isinstance(getattr(v, "root", None), str)))

#: Constraints of the parameters of the distributed passes (persisting X, the reduction's fan-in, the checkpoint),
#: shared by every estimator that takes them: ``_parameter_constraints = {..., **PASS_PARAMETERS}``.
PASS_PARAMETERS: dict[str, list[Any]] = {
    "persist": [Options(("auto", True, False))],
    "split_every": [Interval("int", 2, None), Options((None,))],
    "checkpoint": [CHECKPOINT],
}

#: The optimistic-concurrency estimators' (DP-, RDP-, BP-means): the seed, the serial prefix, the proposal cap and
#: the pass parameters.
OCC_PARAMETERS: dict[str, list[Any]] = {
    "random_state": [SEED],
    "prefix_size": [Interval("int", 0, None)],
    "max_proposals": [Interval("int", 1, None)],
    **PASS_PARAMETERS,
}

#: The in-memory references': the size limit, the seed and the checkpoint.
MEMORY_PARAMETERS: dict[str, list[Any]] = {
    "max_samples": [Interval("int", 1, None)],
    "random_state": [SEED],
    "checkpoint": [CHECKPOINT],
}


class HistoryStep(Step):
    """A fit-loop :class:`~dclust._fit.Step` whose state is a dict with the objective after every pass in
    ``"history"``, True under ``"settled"`` when a pass ends the run, and the model (one row per cluster or feature)
    under :attr:`model_key`. A step whose state says otherwise overrides the method concerned."""

    #: The state's entry with one row per cluster (or feature).
    model_key = "centers"

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return bool(new["settled"])

    def objective(self, s: dict[str, Any]) -> float:
        return float(s["history"][-1])

    def n_clusters(self, s: dict[str, Any]) -> int:
        return int(s[self.model_key].shape[0])


_NO_GRAPH = object()  # _checkpointer(constraints=...) not given: an estimator without side information


class BaseEstimator(_SklearnBaseEstimator):  # type: ignore[misc]  # scikit-learn ships no type hints
    """Parameters are the keyword arguments of ``__init__``, stored unchanged; validation happens in ``fit``.

    A scikit-learn estimator (``sklearn.base.BaseEstimator``: ``get_params``, ``clone``, tags, ``Pipeline`` and
    ``GridSearchCV``), with dclust's own parameter validation and errors. Every subclass's ``fit`` /
    ``partial_fit`` and ``predict`` / ``transform`` / ``predict_proba`` / ``score`` are wrapped once, at class
    creation, by :func:`_api_method` (feature names, ``n_features_in_`` and ``labels_``), so the estimators do
    not repeat that bookkeeping.
    """

    _parameter_constraints: dict[str, Any] = {}
    #: learned attributes that are not saved by :func:`dclust.save` (large or derived).
    _transient_attributes: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in (*_FIT_METHODS, *_CHECKED_METHODS):
            method = getattr(cls, name, None)  # also a mixin's (CentroidMixin.predict): wrapped per estimator class
            if callable(method) and not getattr(method, "_dclust_api", False):
                setattr(cls, name, _api_method(method, name))

    def set_params(self, **params: Any) -> "BaseEstimator":
        """Set constructor parameters; unknown names raise and list the valid ones."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(
                    message(f"{type(self).__name__}.set_params", "one of " + ", ".join(valid), repr(name),
                            "Check the parameter's spelling.")
                )
            setattr(self, name, value)
        return self

    def __repr__(self, N_CHAR_MAX: int = 700) -> str:
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"
        }
        shown = []
        for k, v in self.get_params(deep=False).items():
            d = defaults.get(k, inspect.Parameter.empty)
            if isinstance(v, np.ndarray) or isinstance(d, np.ndarray) or not _equal(v, d):
                shown.append(f"{k}={'array' + str(v.shape) if isinstance(v, np.ndarray) else repr(v)}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def __sklearn_is_fitted__(self) -> bool:
        """Fitted once ``fit`` (or ``partial_fit``) has run: every fit ends by setting ``n_features_in_``."""
        return hasattr(self, "n_features_in_")

    def _validate_params(self) -> None:
        validate_params(self)

    def _checkpointer(self, X: Any = None, sample_weight: Any = None, *, fingerprint: bool = True,
                      constraints: Any = _NO_GRAPH) -> Any:
        """The checkpoint of this fit (``dclust._store._checkpoint``), or a no-op object when ``checkpoint`` is None.

        ``X`` (and ``sample_weight``), dask arrays, are fingerprinted so that a checkpoint of other data is refused;
        so is the ``constraints`` graph of the estimators that take one (None too: a fit without links).
        """
        path = getattr(self, "checkpoint", None)
        if path is None:
            return NoCheckpoint()
        # imported lazily: only fits with a checkpoint need zarr
        from .._store._checkpoint import Checkpointer, data_fingerprint, graph_fingerprint

        fp = data_fingerprint(X, sample_weight) if (fingerprint and X is not None) else None
        if constraints is not _NO_GRAPH:
            fp = {**(fp or {}), "constraints": graph_fingerprint(constraints)}
        return Checkpointer(path, self, fp)

    def _check_fitted(self, attribute: str = "cluster_centers_") -> None:
        if not hasattr(self, attribute):
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet: expected a fitted model; received one "
                f"without '{attribute}'. Call fit(X) before using it."
            )


#: Methods that learn from ``X``: they record ``n_features_in_`` and ``feature_names_in_`` (``partial_fit`` only at
#: its first call; later calls are checked like ``predict``).
_FIT_METHODS = ("fit", "partial_fit")
#: Methods that use a fitted model on new rows: the columns of ``X`` are checked against those seen in fit.
_CHECKED_METHODS = ("predict", "transform", "predict_proba", "score")


class _Busy:
    """Marks ``estimator`` as inside a wrapped method, so that nested wrapped calls skip the bookkeeping."""

    def __init__(self, estimator: Any) -> None:
        self.estimator = estimator

    def __enter__(self) -> None:
        self.estimator.__dict__["_dclust_busy"] = True

    def __exit__(self, *exc: Any) -> None:
        self.estimator.__dict__.pop("_dclust_busy", None)


def _api_method(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    """Wrap a subclass's ``fit``-like or ``predict``-like method with the scikit-learn input bookkeeping.

    Before: DataFrames become arrays (their columns kept as ``feature_names_in_`` by a fit, checked against it
    otherwise) and a fitted model checks the number of features. After a ``fit``: ``n_features_in_`` and
    ``feature_names_in_`` are set, and a clusterer whose ``fit`` left no ``labels_`` gets ``labels_ =
    predict(X)`` (after ``partial_fit``: the labels of that batch) -- an ndarray for numpy input, a lazy dask
    array (never computed, never saved by :func:`dclust.save`) for dask or Zarr input, so N labels are never
    materialised on the driver.
    """
    fitting = name in _FIT_METHODS

    @functools.wraps(method)
    def wrapper(self: Any, X: Any = None, *args: Any, **kwargs: Any) -> Any:
        if self.__dict__.get("_dclust_busy"):
            return method(self, X, *args, **kwargs)
        cls = type(self).__name__
        fitted = self.__sklearn_is_fitted__()
        if fitted and (not fitting or name == "partial_fit"):
            check_feature_names(self.__dict__.get("feature_names_in_"), X, cls)
            if getattr(X, "shape", None) is not None and len(X.shape) == 2:
                check_n_features(int(self.n_features_in_), int(X.shape[1]), estimator=cls)
        if not fitting:
            with _Busy(self):
                return method(self, dataframe_to_array(X), *args, **kwargs)
        refuse_sparse(X)  # before a stream's fit takes it for an iterable of batches
        names = feature_names(X)
        X = dataframe_to_array(X)
        labels_before = self.__dict__.get("labels_")
        with _Busy(self):
            out = method(self, X, *args, **kwargs)
        if not (fitted and name == "partial_fit"):  # a new model: its input's names (or none) are the names
            if names is None:
                self.__dict__.pop("feature_names_in_", None)
            else:
                self.feature_names_in_ = names
            if not hasattr(self, "n_features_in_") and getattr(X, "shape", None) is not None:
                self.n_features_in_ = int(X.shape[1])
        if isinstance(self, ClusterMixin) and self.__dict__.get("labels_") is labels_before:
            _set_labels(self, X)  # partial_fit: the labels of this batch
        return out

    wrapper._dclust_api = True  # type: ignore[attr-defined]
    return wrapper


def _set_labels(estimator: Any, X: Any) -> None:
    """``labels_ = predict(X)`` after a fit that set none; lazy labels (dask input) are transient."""
    with _Busy(estimator):
        labels = estimator.predict(X)
    estimator.labels_ = labels
    lazy = isinstance(getattr(labels, "data", labels), da.Array)
    own = type(estimator)._transient_attributes
    if lazy:
        estimator._transient_attributes = (*own, "labels_")
    else:
        estimator.__dict__.pop("_transient_attributes", None)


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd types compare as different
        return False


def raise_if_bad_block(stats: ClusterStats, X: da.Array, name: str = "X") -> None:
    """Raise :class:`InvalidDataError` naming the first chunk that held NaN or inf."""
    if stats.bad_block < 0:
        return
    b = stats.bad_block
    start = int(block_offsets(X.chunks[0])[b])
    raise non_finite_error(name, b, start, start + X.chunks[0][b] - 1, "fit")


def non_finite_error(name: str, block: int, first: int, last: int, verb: str, row: int | None = None
                     ) -> InvalidDataError:
    """The error for NaN/inf rows found inside a pass, naming the chunk, its rows and (when known) the first bad
    row."""
    at = "" if row is None else f"; first at row {row}"
    return InvalidDataError(
        message(name, "finite values", f"NaN or infinity in chunk {block} (rows {first}..{last}{at})",
                f"Drop or impute those rows (e.g. X[da.isfinite(X).all(axis=1)]) and {verb} again.")
    )


def wrap_output(result: da.Array, info: InputInfo, name: str) -> Any:
    """Shape a per-sample result like the input: ndarray for numpy, lazy dask for dask, DataArray for xarray."""
    if info.kind == "numpy":
        return compute(result)[0]
    if info.kind == "xarray":
        out = info.template.copy(data=result)
        if result.ndim == 2:  # transform: add a cluster dimension
            out = out.expand_dims({"cluster": result.shape[1]}, axis=1).copy(data=result)
        return out.rename(name)
    return result


def _labels_kernel(Xb: npt.NDArray[Any], *, offset: int, block_index: int,
                   centers: npt.NDArray[np.float64]) -> npt.NDArray[Any]:
    labels = nearest(Xb, centers)[0]
    if labels.size and labels.min() < 0:  # a row with NaN or inf has no nearest centre: never a silent -1
        raise non_finite_error("X", block_index, offset, offset + len(labels) - 1, "predict")
    return labels


def _finite_block(Xb: npt.NDArray[Any], verb: str, block_info: Any = None) -> npt.NDArray[Any]:
    if not np.isfinite(Xb).all():
        (first, stop), block = block_info[0]["array-location"][0], block_info[0]["chunk-location"][0]
        raise non_finite_error("X", block, first, stop - 1, verb)
    return Xb


def finite_rows(X: da.Array, verb: str) -> da.Array:
    """``X``, lazily checked block by block: a block with NaN or inf raises (naming it) when it is computed.

    For the per-row outputs whose kernels would otherwise give NaN distances or arbitrary labels silently.
    """
    return map_blocks(X, _finite_block, verb, dtype=X.dtype)


def _distances_kernel(Xb: npt.NDArray[Any], centers: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    Xb = np.asarray(Xb, dtype=np.float64)
    d: npt.NDArray[np.float64] = ((Xb * Xb).sum(axis=1)[:, None] - 2.0 * (Xb @ centers.T)
                                  + (centers * centers).sum(axis=1)[None, :])
    np.maximum(d, 0.0, out=d)
    return d


def _cost_partial(Xb: npt.NDArray[Any], wb: npt.NDArray[Any] | None, *, offset: int, block_index: int,
                  centers: npt.NDArray[np.float64]) -> ClusterStats:
    return block_stats(Xb, centers, wb, offset=offset, block_index=block_index)


class TransformerMixin(_SklearnTransformerMixin):  # type: ignore[misc]  # scikit-learn: no type hints
    """scikit-learn's TransformerMixin (``fit_transform``); dclust's outputs never keep X's dtype: distances are
    float64, feature allocations uint8."""

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = []
        return tags


class CentroidMixin(ClusterMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin):  # type: ignore[misc]  # idem
    """predict / transform / score for models with ``cluster_centers_``; ``fit_predict`` (``labels_``) and
    ``fit_transform`` come from scikit-learn's ClusterMixin and TransformerMixin, the output column names of
    ``transform`` (``kmeans0``, ...) from its ClassNamePrefixFeaturesOutMixin."""

    @property
    def _n_features_out(self) -> int:
        """Number of columns of ``transform``: one distance per centre."""
        return int(self.cluster_centers_.shape[0])

    def _input(self, X: ArrayLike) -> tuple[da.Array, InputInfo]:
        self._check_fitted()
        return check_array(X, n_features=self.cluster_centers_.shape[1])

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Index of the nearest centre for every row (lowest index on ties).

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input and a DataArray carrying the
        sample coordinate for xarray input.
        """
        arr, info = self._input(X)
        labels = map_labels(_labels_kernel, arr, centers=np.asarray(self.cluster_centers_, dtype=np.float64))
        return wrap_output(labels, info, "labels")

    def transform(self, X: ArrayLike) -> ArrayLike:
        """Squared Euclidean distance of every row to every centre, shape (n_samples, n_clusters)."""
        arr, info = self._input(X)
        c = np.asarray(self.cluster_centers_, dtype=np.float64)
        out = map_blocks(finite_rows(arr, "transform"), _distances_kernel, c, dtype=np.float64,
                         chunks=(arr.chunks[0], (c.shape[0],)))
        return wrap_output(out, info, "distances")

    def score(self, X: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> float:
        """Opposite of the weighted sum of squared distances to the nearest centre (higher is better)."""
        from .._validation import check_sample_weight

        arr, _ = self._input(X)
        w = check_sample_weight(sample_weight, arr)
        c = np.asarray(self.cluster_centers_, dtype=np.float64)
        stats = compute(map_reduce(_cost_partial, ClusterStats.merge_all, arr, w, centers=c))[0][()]
        raise_if_bad_block(stats, arr)
        return -float(stats.cost)
