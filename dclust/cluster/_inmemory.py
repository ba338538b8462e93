"""The base of the in-memory reference estimators (docs/algorithms.md 7, 10.1): each accepts numpy, dask, zarr or
xarray input, checks the size from metadata against ``max_samples`` (a clear
:class:`~dclust.errors.InvalidDataError` above it) and only then computes the data into memory.
"""

from __future__ import annotations

from typing import Any, Self

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.passes import block_offsets, compute, from_array
from .._fit import ProgressEvent, emit, set_rng_state
from .._validation import InputInfo, _Kind, as_generator, check_array
from ..constraints._check import check_constraints
from ..errors import InvalidDataError, message
from ..typing import ArrayLike, ConstraintsLike, Ignored
from ._base import BaseEstimator, finite_rows, non_finite_error


__all__: list[str] = []

_VECTOR = _Kind(
    "a 1-D array of length n_features", lambda v: isinstance(v, (list, tuple, np.ndarray)) and np.ndim(v) == 1
)


class _InMemory(BaseEstimator):
    """Shared input handling: size check from metadata, then one compute into a float64 ndarray."""

    #: what makes the estimator memory- or time-bound, for the size-limit message.
    _cost_note = ""

    def _load(self, X: ArrayLike, *, min_samples: int = 1) -> tuple[npt.NDArray[np.float64], InputInfo]:
        """``(X as a C-contiguous float64 ndarray, its InputInfo)``; see :meth:`_load_array`."""
        Xn, info, _ = self._load_array(X, min_samples=min_samples)
        return Xn, info

    def _load_array(self, X: ArrayLike, *,
                    min_samples: int = 1) -> tuple[npt.NDArray[np.float64], InputInfo, da.Array]:
        """``(Xn, info, arr)``: ``X`` checked (at most ``max_samples`` rows, from metadata), computed into the
        float64 ndarray ``Xn`` and checked for NaN and infinity; ``arr`` is the checked dask array."""
        arr, info = check_array(X, min_samples=min_samples)
        n = arr.shape[0]
        name = type(self).__name__
        if n > self.max_samples:
            raise InvalidDataError(
                message(f"{name}: X.shape", f"at most max_samples={self.max_samples} rows ({self._cost_note})",
                        f"{n} rows",
                        f"Subsample X (e.g. X[:{self.max_samples}]), raise max_samples if you have the memory and "
                        "time, or use the scalable estimators (KMeans, DPMeans) for large data.")
            )
        Xn = np.ascontiguousarray(np.asarray(compute(arr)[0], dtype=np.float64))
        bad = ~np.isfinite(Xn).all(axis=1)
        if bad.any():
            row = int(np.argmax(bad))
            offsets = block_offsets(arr.chunks[0])
            b = int(np.searchsorted(offsets, row, side="right") - 1)
            start, stop = int(offsets[b]), int(offsets[b]) + arr.chunks[0][b]
            raise non_finite_error("X", b, start, stop - 1, "fit", row)
        return Xn, info, arr

    def _memory_checkpointer(self, X: npt.NDArray[np.float64]) -> tuple[Any, dict[str, Any] | None]:
        """``(checkpoint, state)`` of an in-memory fit of the computed rows ``X`` (see :mod:`dclust.io._checkpoint`).

        Without ``checkpoint=`` a no-op object and None. Otherwise the checkpoint is resumed (its estimator,
        parameters and the fingerprint of ``X`` checked) and the one-cluster statistics of ``X`` (cheap: ``X`` is
        in memory) are compared with the interrupted run's, so other data of the same shape is refused.
        """
        if getattr(self, "checkpoint", None) is None:
            return self._checkpointer(), None
        ck = self._checkpointer(from_array(X, chunks=X.shape))
        state = ck.resume()
        mean = X.mean(axis=0)
        ck.check_content(float(X.shape[0]), mean, float(((X - mean) ** 2).sum()))
        return ck, state

    def _restore_done(self, ck: Any, state: dict[str, Any] | None) -> bool:
        """Set the model of a finished fit's checkpoint (True), or False when the state is not a finished fit."""
        if state is None or state.get("phase") != "done":
            return False
        ck.restore_attributes(self, state)
        k = getattr(self, "n_clusters_", getattr(self, "n_latent_features_", 0))
        emit(ProgressEvent(type(self).__name__, "done", int(getattr(self, "n_iter_", 0)),
                           float(getattr(self, "objective_", float("nan"))), int(k), 0.0))
        return True

    def _start_sweeps(self, ck: Any, state: dict[str, Any] | None, count_key: str,
                      rng: np.random.Generator) -> tuple[int, np.random.Generator, float, list[float], list[int]]:
        """Where a Gibbs sampler's chain starts: the first sweep, the generator, the log joint of the kept sample
        and the histories of the log joint and of ``count_key`` (clusters or features) -- those of a fresh chain
        (with ``rng``) when ``state`` is None, else those of the checkpoint (a damaged one raises through ``ck``)."""
        if state is None:
            return 0, rng, -np.inf, [], []
        with ck.reading():
            first, rng = int(state["sweep"]), set_rng_state(state["rng"])
            if state["phase"] != "sweep" or not 0 < first < self.n_iter:
                raise ValueError(f"phase {state['phase']!r} at sweep {first} of n_iter={self.n_iter}")
            history, ks = [float(v) for v in state["history"]], [int(v) for v in state[count_key]]
            if not len(history) == len(ks) == first:
                raise ValueError(f"histories of {len(history)} and {len(ks)} sweeps; expected {first}")
            return first, rng, float(state["kept_log_joint"]), history, ks

    def _finish_sweeps(self, ck: Any, kept_lj: float, history: list[float], sizes: list[int], sizes_name: str,
                       size: int, n_features: int) -> Self:
        """The end of a Gibbs sampler's fit, once its model is set: the log joint of the kept sample, the histories
        (``sizes``, the clusters or features after every sweep, as ``sizes_name``), the finished checkpoint and the
        "done" event (``size``: the kept sample's). Returns ``self``."""
        self.log_joint_ = float(kept_lj)
        self.log_joint_history_ = history
        self.objective_history_ = [-h for h in history]
        setattr(self, sizes_name, sizes)
        self.n_iter_ = self.n_iter
        self.n_features_in_ = n_features
        ck.save_done(self)
        emit(ProgressEvent(type(self).__name__, "done", self.n_iter, -kept_lj, size, 0.0))
        return self

    def _new_input(self, X: ArrayLike, attribute: str) -> tuple[da.Array, InputInfo]:
        self._check_fitted(attribute)
        arr, info = check_array(X, n_features=self.n_features_in_)
        return finite_rows(arr, "predict"), info


def link_arrays(name: str, constraints: ConstraintsLike,
                n: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``(i, j, must)`` of the links of ``fit(constraints=...)`` (validated), empty arrays for None."""
    graph = check_constraints(name, constraints, n)
    if graph is None:
        e = np.zeros(0, np.int64)
        return e, e, np.zeros(0, np.bool_)
    i, j, s = graph.pairs()
    return i.astype(np.int64), j.astype(np.int64), s > 0


class _LinkedInMemory(_InMemory):
    """An in-memory reference fit under optional must-links and cannot-links: :meth:`fit` checks the parameters,
    reads ``X`` (at least ``n_clusters`` rows where there is such a parameter) and validates the links, then the
    estimator's :meth:`_fit_links` fits."""

    def fit(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> "_LinkedInMemory":
        """Cluster ``X`` (read into memory; at most ``max_samples`` rows) under optional links.

        Parameters
        ----------
        X : array-like (n_samples, n_features)
        y : ignored
        constraints : ConstraintGraph, optional
            Must-links and cannot-links; how they count is in the estimator's description.

        Returns
        -------
        self
        """
        self._validate_params()
        Xn, _ = self._load(X, min_samples=getattr(self, "n_clusters", 1))
        i, j, must = link_arrays(type(self).__name__, constraints, Xn.shape[0])
        self._fit_links(Xn, i, j, must, constraints, as_generator(self.random_state))
        self.n_features_in_ = Xn.shape[1]
        return self

    def _fit_links(self, X: npt.NDArray[np.float64], i: npt.NDArray[np.int64], j: npt.NDArray[np.int64],
                   must: npt.NDArray[np.bool_], constraints: ConstraintsLike, rng: np.random.Generator) -> None:
        """Fit the rows ``X`` (float64, finite) under the links ``(i[t], j[t])``, must-links where ``must[t]``, with
        the fit's one generator ``rng`` (from ``random_state``); :meth:`fit` then sets ``n_features_in_``."""
        raise NotImplementedError

    def _set_violations(self, i: npt.NDArray[np.int64], j: npt.NDArray[np.int64], must: npt.NDArray[np.bool_]) -> None:
        """``n_violated_``: the must-links that ``labels_`` splits and the cannot-links it joins."""
        same = self.labels_[i] == self.labels_[j]
        self.n_violated_ = np.array([int((must & ~same).sum()), int((~must & same).sum())], dtype=np.int64)

    def fit_predict(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> ArrayLike:
        """``fit(X, constraints=constraints).labels_``."""
        return self.fit(X, constraints=constraints).labels_


def _first_appearance(labels: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Relabel to 0..K-1 in order of first appearance in the rows."""
    uniq, first = np.unique(labels, return_index=True)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    return rank[np.searchsorted(uniq, labels)]
