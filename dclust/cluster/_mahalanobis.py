"""Covariance-penalised (Mahalanobis) k-means of [MB] Appendix E on Dask: one pass over the data per iteration."""

from __future__ import annotations

import warnings
from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.init import kmeans_plusplus_sample
from .._fit import ProgressEvent, Stopwatch, emit, logger
from .._dask.passes import compute, map_labels, map_reduce, persist_if_fits
from .._registry import register
from .._validation import COUNT, POSITIVE, SEED, Interval, Options, as_generator, check_array, constrain
from ..errors import ConvergenceWarning, InvalidDataError, message
from ..kernels.gmpr import GaussianStats
from ..kernels.mahalanobis import covariance_step, mahalanobis_labels, mahalanobis_stats
from ._base import BaseEstimator, finite_rows, raise_if_bad_block, wrap_output
from ..typing import ArrayLike, Ignored, PersistMode, SeedLike

__all__ = ["MahalanobisKMeans"]


@register
class MahalanobisKMeans(BaseEstimator):
    """k-means with a covariance per cluster and a penalty on its size ([MB] Appendix E), distributed like KMeans.

    Minimises the small-variance limit of a Gaussian mixture with an inverse-Wishart prior on the covariances,

    ``J = sum_k [ sum_{n in k} (x_n - mu_k)' Sigma_k^{-1} (x_n - mu_k) + lam log|Sigma_k| ]``

    (``lam`` is the paper's ``lambda^2``), by alternating: one pass assigns every row to the cluster of smallest
    Mahalanobis distance and tree-reduces each cluster's count, mean and scatter ``S_k`` (Chan's rule); the driver
    then sets ``mu_k`` to the mean and ``Sigma_k = S_k / lam`` (the exact minimiser, with every eigenvalue floored at
    ``reg_covar`` times the data's mean feature variance, which keeps a cluster of few rows from collapsing to
    ``log|Sigma| = -inf``). Each step lowers ``J``. The first pass uses ``Sigma_k = I`` (a Lloyd step from
    k-means++ seeds on a sample). Stops when ``J`` changes by at most ``tol |J|``; of ``n_init`` seedings the lowest
    ``J`` is kept. An empty cluster keeps its parameters (its term of ``J`` is ``lam log|Sigma_k|``).

    ``J`` is unbounded below as a cluster shrinks onto a few rows (``log|S_k| -> -inf``; the eigenvalue floor bounds
    it), and since ``Sigma_k = n_k C_k / lam`` for a cluster of ``n_k`` rows with sample covariance ``C_k``, a
    cluster smaller than ``lam`` rows has a shrunk covariance, loses rows and may empty: set ``lam`` near the
    expected cluster size (then ``Sigma_k`` is close to the clusters' sample covariances).

    Parameters
    ----------
    n_clusters : int, default 8
    lam : float, default 1.0
        Penalty on ``log|Sigma_k|`` (``lambda^2`` of [MB]); larger values shrink the covariances
        (``Sigma_k = S_k / lam``), so ``lam`` near a cluster's size gives its sample covariance.
    reg_covar : float, default 1e-6
        Floor of the covariances' eigenvalues, relative to the mean feature variance of X.
    n_init : int, default 1
    max_iter : int, default 100
    tol : float, default 1e-6
    init_sample_size : int, default 10000
        Rows sampled for the k-means++ seeding.
    random_state : int, Generator or None
    persist : {"auto", True, False}, default "auto"
        As in :class:`KMeans`.
    split_every : int or None
        Fan-in of the tree reduction.

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    covariances_ : ndarray (n_clusters, n_features, n_features)
    cluster_sizes_ : ndarray (n_clusters,)
    objective_ : float
        ``J`` at the final parameters.
    objective_history_ : list of float
        ``J`` after every iteration (non-increasing).
    n_iter_ : int
    converged_ : bool
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(0, [3.0, 0.2], (200, 2)), rng.normal([0, 10], [0.2, 3.0], (200, 2))])
    >>> m = dclust.MahalanobisKMeans(n_clusters=2, lam=200.0, random_state=0).fit(X)
    >>> sorted(np.round(m.cluster_centers_[:, 1]).tolist()), m.cluster_sizes_.tolist()
    ([0.0, 10.0], [200, 200])

    References
    ----------
    T. Broderick, B. Kulis and M. I. Jordan. MAD-Bayes: MAP-based asymptotic derivations from Bayes. ICML 2013,
    Appendix E ([MB]).
    """

    _parameter_constraints = {
        **constrain(COUNT, "n_clusters", "n_init", "max_iter", "init_sample_size"),
        **constrain(POSITIVE, "lam", "reg_covar"),
        "tol": [Interval("real", 0, None)],
        "random_state": [SEED],
        "persist": [Options(("auto", True, False))],
        "split_every": [Interval("int", 2, None), Options((None,))],
    }

    def __init__(
        self, *, n_clusters: int = 8, lam: float = 1.0, reg_covar: float = 1e-6, n_init: int = 1, max_iter: int = 100,
        tol: float = 1e-6, init_sample_size: int = 10_000, random_state: SeedLike = None, persist: PersistMode = "auto",
        split_every: int | None = None,
    ) -> None:
        self.n_clusters, self.lam, self.reg_covar, self.n_init = n_clusters, lam, reg_covar, n_init
        self.max_iter, self.tol, self.init_sample_size = max_iter, tol, init_sample_size
        self.random_state, self.persist, self.split_every = random_state, persist, split_every

    def _pass(self, arr: da.Array, means: np.ndarray, covs: np.ndarray) -> GaussianStats:
        whiten = np.array([np.linalg.inv(np.linalg.cholesky(c)) for c in covs])
        stats: GaussianStats = compute(map_reduce(mahalanobis_stats, GaussianStats.merge_all, arr, means=means,
                                                  whiten=whiten, split_every=self.split_every))[0][()]
        raise_if_bad_block(stats, arr)  # type: ignore[arg-type]  # duck: it reads only .bad_block
        return stats

    def _run(self, arr: da.Array, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float], int, bool]:
        k, d = self.n_clusters, arr.shape[1]
        means = kmeans_plusplus_sample(arr, None, k, rng, self.init_sample_size)
        covs = np.repeat(np.eye(d)[None], k, axis=0)
        floor, history, converged, watch = None, [], False, Stopwatch()
        it = 0
        for it in range(1, self.max_iter + 1):
            stats = self._pass(arr, means, covs)
            if floor is None:  # reg_covar times the data's mean feature variance (from the first pass's sums)
                grand = stats.weight @ stats.mean / stats.weight.sum()
                spread = np.trace(stats.scatter, axis1=1, axis2=2).sum() + stats.weight @ ((stats.mean - grand) ** 2
                                                                                            ).sum(axis=1)
                floor = self.reg_covar * max(float(spread) / (stats.weight.sum() * d), 1e-300)
            full = stats.weight > 0
            means = np.where(full[:, None], stats.mean, means)
            J = 0.0
            for c in range(k):
                if full[c]:
                    covs[c], value = covariance_step(stats.scatter[c], float(self.lam), floor)
                else:  # an empty cluster keeps its parameters: its term is lam log|Sigma_k|
                    value = float(self.lam) * float(np.linalg.slogdet(covs[c])[1])
                J += value
            history.append(J)
            emit(ProgressEvent("MahalanobisKMeans", "iter", it, J, int(full.sum()), watch.lap()))
            if len(history) > 1 and abs(history[-2] - J) <= self.tol * abs(J):
                converged = True
                break
        return means, covs, stats.weight, history, it, converged

    def fit(self, X: ArrayLike, y: Ignored = None) -> "MahalanobisKMeans":
        """Cluster ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        if self.n_clusters > n:
            raise InvalidDataError(
                message("MahalanobisKMeans(n_clusters=...)", f"at most n_samples={n} clusters",
                        f"n_clusters={self.n_clusters}", "Lower n_clusters or pass more data.")
            )
        rng = as_generator(self.random_state)
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        best = None
        for _ in range(self.n_init):
            run = self._run(arr, rng)
            if best is None or run[3][-1] < best[3][-1]:
                best = run
        assert best is not None  # n_init >= 1
        means, covs, sizes, history, n_iter, converged = best
        self.cluster_centers_ = means
        self.covariances_ = covs
        self.cluster_sizes_ = sizes.astype(np.int64)
        self.objective_ = float(history[-1])
        self.objective_history_ = [float(v) for v in history]
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        self.n_features_in_ = d
        if not converged:
            warnings.warn(f"MahalanobisKMeans stopped at max_iter={self.max_iter} before J settled (tol="
                          f"{self.tol}); increase max_iter.", ConvergenceWarning, stacklevel=2)
        emit(ProgressEvent("MahalanobisKMeans", "done", self.n_iter_, self.objective_, self.n_clusters, 0.0))
        return self

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Cluster of smallest Mahalanobis distance for every row. Returns an ndarray for numpy input, a lazy dask
        array for dask/zarr input."""
        self._check_fitted()
        arr, info = check_array(X, n_features=self.cluster_centers_.shape[1])
        whiten = np.array([np.linalg.inv(np.linalg.cholesky(c)) for c in self.covariances_])
        labels = map_labels(_labels, finite_rows(arr, "predict"), means=np.asarray(self.cluster_centers_),
                            whiten=whiten)
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X: ArrayLike, y: Ignored = None) -> ArrayLike:
        """``fit(X).predict(X)``."""
        return self.fit(X).predict(X)


def _labels(Xb: npt.NDArray[Any], *, offset: int, block_index: int, means: np.ndarray, whiten: np.ndarray
            ) -> np.ndarray:
    return mahalanobis_labels(Xb, means, whiten)[0].astype(np.int32)
