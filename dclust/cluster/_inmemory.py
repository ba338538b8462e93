"""The base of the in-memory reference estimators (ALGORITHMS.md 7, 10.1): each accepts numpy, dask, zarr or
xarray input, checks the size from metadata against ``max_samples`` (a clear
:class:`~dclust.errors.InvalidDataError` above it) and only then computes the data into memory.
"""

from __future__ import annotations

import numpy as np

from .._dask.passes import block_offsets
from .._fit import ProgressEvent, emit
from .._validation import _Kind, check_array
from ..errors import InvalidDataError, message
from ._base import BaseEstimator, finite_rows


__all__: list[str] = []

_VECTOR = _Kind(
    "a 1-D array of length n_features", lambda v: isinstance(v, (list, tuple, np.ndarray)) and np.ndim(v) == 1
)


class _InMemory(BaseEstimator):
    """Shared input handling: size check from metadata, then one compute into a float64 ndarray."""

    #: what makes the estimator memory- or time-bound, for the size-limit message.
    _cost_note = ""

    def _load(self, X, *, min_samples: int = 1):
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
        Xn = np.ascontiguousarray(np.asarray(arr.compute(), dtype=np.float64))
        bad = ~np.isfinite(Xn).all(axis=1)
        if bad.any():
            row = int(np.argmax(bad))
            offsets = block_offsets(arr.chunks[0])
            b = int(np.searchsorted(offsets, row, side="right") - 1)
            start, stop = int(offsets[b]), int(offsets[b]) + arr.chunks[0][b]
            raise InvalidDataError(
                message("X", "finite values", f"NaN or infinity in chunk {b} (rows {start}..{stop - 1}; first at "
                        f"row {row})", "Drop or impute those rows (e.g. X[np.isfinite(X).all(axis=1)]) and fit again.")
            )
        return Xn, info

    def _memory_checkpointer(self, X: np.ndarray):
        """``(checkpoint, state)`` of an in-memory fit of the computed rows ``X`` (see :mod:`dclust.io._checkpoint`).

        Without ``checkpoint=`` a no-op object and None. Otherwise the checkpoint is resumed (its estimator,
        parameters and the fingerprint of ``X`` checked) and the one-cluster statistics of ``X`` (cheap: ``X`` is
        in memory) are compared with the interrupted run's, so other data of the same shape is refused.
        """
        if getattr(self, "checkpoint", None) is None:
            return self._checkpointer(), None
        import dask.array as da

        ck = self._checkpointer(da.from_array(X, chunks=X.shape))
        state = ck.resume()
        mean = X.mean(axis=0)
        ck.check_content(float(X.shape[0]), mean, float(((X - mean) ** 2).sum()))
        return ck, state

    def _restore_done(self, ck, state) -> bool:
        """Set the model of a finished fit's checkpoint (True), or False when the state is not a finished fit."""
        if state is None or state.get("phase") != "done":
            return False
        ck.restore_attributes(self, state)
        k = getattr(self, "n_clusters_", getattr(self, "n_latent_features_", 0))
        emit(ProgressEvent(type(self).__name__, "done", int(getattr(self, "n_iter_", 0)),
                           float(getattr(self, "objective_", float("nan"))), int(k), 0.0))
        return True

    def _new_input(self, X, attribute: str):
        self._check_fitted(attribute)
        arr, info = check_array(X, n_features=self.n_features_in_)
        return finite_rows(arr, "predict"), info


def _first_appearance(labels: np.ndarray) -> np.ndarray:
    """Relabel to 0..K-1 in order of first appearance in the rows."""
    uniq, first = np.unique(labels, return_index=True)
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(uniq.size)
    return rank[np.searchsorted(uniq, labels)]
