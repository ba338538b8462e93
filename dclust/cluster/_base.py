"""Estimator base: scikit-learn conventions (keyword-only constructor, get/set_params, learned ``attr_``) and the
shared centroid-model methods (predict, transform, score) built on the fused kernels."""

from __future__ import annotations

import inspect
import os
from typing import Any

import dask.array as da
import numpy as np

from .._dask.passes import block_offsets, map_labels, map_reduce
from .._fit import NoCheckpoint
from .._validation import InputInfo, _Kind, check_array, validate_params
from ..errors import InvalidDataError, InvalidParameterError, NotFittedError, message
from ..kernels.distances import block_stats, nearest
from ..kernels.stats import ClusterStats

__all__ = ["BaseEstimator", "CentroidMixin", "clone", "raise_if_bad_block", "CHECKPOINT"]

#: Constraint of the ``checkpoint`` parameter: a local directory (str or os.PathLike, or a file:// URL), or None.
CHECKPOINT = _Kind("None or a path (str or os.PathLike) of a checkpoint directory",
                   lambda v: v is None or isinstance(v, (str, os.PathLike)))


_NO_GRAPH = object()  # _checkpointer(constraints=...) not given: an estimator without side information


class BaseEstimator:
    """Parameters are the keyword arguments of ``__init__``, stored unchanged; validation happens in ``fit``."""

    _parameter_constraints: dict = {}
    #: learned attributes that are not saved by :func:`dclust.save` (large or derived).
    _transient_attributes: tuple[str, ...] = ()

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values() if p.name != "self" and p.kind == p.KEYWORD_ONLY]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters, as a dict."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> "BaseEstimator":
        """Set constructor parameters; unknown names raise and list the valid ones."""
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise InvalidParameterError(
                    message(f"{type(self).__name__}.set_params", "one of " + ", ".join(valid), repr(name),
                            "Check the parameter's spelling.")
                )
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {
            p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"
        }
        shown = []
        for k, v in self.get_params().items():
            d = defaults.get(k, inspect.Parameter.empty)
            if isinstance(v, np.ndarray) or isinstance(d, np.ndarray) or not _equal(v, d):
                shown.append(f"{k}={'array' + str(v.shape) if isinstance(v, np.ndarray) else repr(v)}")
        return f"{type(self).__name__}({', '.join(shown)})"

    def _validate_params(self) -> None:
        validate_params(self)

    def _checkpointer(self, X=None, sample_weight=None, *, fingerprint: bool = True, constraints=_NO_GRAPH):
        """The checkpoint of this fit (``dclust.io._checkpoint``), or a no-op object when ``checkpoint`` is None.

        ``X`` (and ``sample_weight``), dask arrays, are fingerprinted so that a checkpoint of other data is refused;
        so is the ``constraints`` graph of the estimators that take one (None too: a fit without links).
        """
        path = getattr(self, "checkpoint", None)
        if path is None:
            return NoCheckpoint()
        # io is above this layer: imported lazily
        from ..io._checkpoint import Checkpointer, data_fingerprint, graph_fingerprint

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


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd types compare as different
        return False


def clone(estimator: BaseEstimator) -> BaseEstimator:
    """A new unfitted estimator with the same parameters."""
    return type(estimator)(**estimator.get_params())


def raise_if_bad_block(stats: ClusterStats, X: da.Array, name: str = "X") -> None:
    """Raise :class:`InvalidDataError` naming the first chunk that held NaN or inf."""
    if stats.bad_block < 0:
        return
    b = stats.bad_block
    start = int(block_offsets(X.chunks[0])[b])
    raise non_finite_error(name, b, start, start + X.chunks[0][b] - 1, "fit")


def non_finite_error(name: str, block: int, first: int, last: int, verb: str) -> InvalidDataError:
    """The error for NaN/inf rows found inside a pass, naming the chunk and its rows."""
    return InvalidDataError(
        message(name, "finite values", f"NaN or infinity in chunk {block} (rows {first}..{last})",
                f"Drop or impute those rows (e.g. X[da.isfinite(X).all(axis=1)]) and {verb} again.")
    )


def wrap_output(result: da.Array, info: InputInfo, name: str) -> Any:
    """Shape a per-sample result like the input: ndarray for numpy, lazy dask for dask, DataArray for xarray."""
    if info.kind == "numpy":
        return result.compute()
    if info.kind == "xarray":
        out = info.template.copy(data=result)
        if result.ndim == 2:  # transform: add a cluster dimension
            out = out.expand_dims({"cluster": result.shape[1]}, axis=1).copy(data=result)
        return out.rename(name)
    return result


def _labels_kernel(Xb, *, offset, block_index, centers):
    labels = nearest(Xb, centers)[0]
    if labels.size and labels.min() < 0:  # a row with NaN or inf has no nearest centre: never a silent -1
        raise non_finite_error("X", block_index, offset, offset + len(labels) - 1, "predict")
    return labels


def _distances_kernel(Xb, centers):
    Xb = np.asarray(Xb, dtype=np.float64)
    d = (Xb * Xb).sum(axis=1)[:, None] - 2.0 * (Xb @ centers.T) + (centers * centers).sum(axis=1)[None, :]
    return np.maximum(d, 0.0, out=d)


def _cost_partial(Xb, wb, *, offset, block_index, centers):
    return block_stats(Xb, centers, wb, offset=offset, block_index=block_index)


class CentroidMixin:
    """predict / transform / score / fit_predict for models with ``cluster_centers_``."""

    def _input(self, X) -> tuple[da.Array, InputInfo]:
        self._check_fitted()
        return check_array(X, n_features=self.cluster_centers_.shape[1])

    def predict(self, X):
        """Index of the nearest centre for every row (lowest index on ties).

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input and a DataArray carrying the
        sample coordinate for xarray input.
        """
        arr, info = self._input(X)
        labels = map_labels(_labels_kernel, arr, centers=np.asarray(self.cluster_centers_, dtype=np.float64))
        return wrap_output(labels, info, "labels")

    def transform(self, X):
        """Squared Euclidean distance of every row to every centre, shape (n_samples, n_clusters)."""
        arr, info = self._input(X)
        c = np.asarray(self.cluster_centers_, dtype=np.float64)
        out = arr.map_blocks(_distances_kernel, c, dtype=np.float64, chunks=(arr.chunks[0], (c.shape[0],)))
        return wrap_output(out, info, "distances")

    def score(self, X, y=None, sample_weight=None) -> float:
        """Opposite of the weighted sum of squared distances to the nearest centre (higher is better)."""
        from .._validation import check_sample_weight

        arr, _ = self._input(X)
        w = check_sample_weight(sample_weight, arr)
        c = np.asarray(self.cluster_centers_, dtype=np.float64)
        stats = map_reduce(_cost_partial, ClusterStats.merge_all, arr, w, centers=c).compute()[()]
        raise_if_bad_block(stats, arr)
        return -float(stats.cost)

    def fit_predict(self, X, y=None, sample_weight=None):
        """``fit(X)`` then ``predict(X)``."""
        return self.fit(X, sample_weight=sample_weight).predict(X)
