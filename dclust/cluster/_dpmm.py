"""Collapsed Gibbs for the DP mixture (docs/algorithms.md 7, 10.1): the slow, exact reference for DP-means, in memory,
seeded.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._dask.passes import map_labels
from .._fit import ProgressEvent, Stopwatch, emit, rng_state
from .._registry import register
from .._validation import Interval, Options, as_generator
from ..errors import InvalidParameterError, message
from ..kernels import dpmm as K
from ._base import MEMORY_PARAMETERS, ClusterMixin, wrap_output

from ._inmemory import _VECTOR, _InMemory, _first_appearance
from ..typing import ArrayLike, CheckpointLike, Ignored, SeedLike

__all__ = ["DPMMGibbs"]


def _dpmm_labels(Xb: npt.NDArray[Any], *, offset: int, block_index: int, counts: np.ndarray, means: np.ndarray,
                 variances: np.ndarray, sigma2: float) -> np.ndarray:
    return K.dpmm_predict(Xb, counts, means, variances, sigma2)


@register
class DPMMGibbs(ClusterMixin, _InMemory):  # type: ignore[misc]  # scikit-learn ships no type hints
    """Collapsed Gibbs sampler for the Dirichlet-process mixture of isotropic Gaussians (docs/algorithms.md 7).

    Model: ``mu_k ~ N(mu0, rho2 I)``, ``x_n | z_n = k ~ N(mu_k, sigma2 I)`` with ``sigma2`` known, and the CRP with
    concentration ``alpha`` on the partition (new table with probability ``alpha / (alpha + n - 1)`` for the n-th
    customer, [SL] errata). Every sweep visits the rows in a fresh random order; row i is removed and re-seated with
    ``P(k) ∝ n_k,-i N(x_i | m_k, (sigma2 + v_k) I)`` and ``P(new) ∝ alpha N(x_i | mu0, (sigma2 + rho2) I)``.
    The reference sampler for the DP-means limit (``sigma2 -> 0``); O(N K D) per sweep, in memory.

    Parameters
    ----------
    alpha : float, default 1.0
        Concentration of the Dirichlet process.
    sigma2 : float, default 1.0
        Known noise variance per coordinate.
    rho2 : float, default 100.0
        Prior variance per coordinate of the cluster means.
    mu0 : array of shape (n_features,) or None, default None
        Prior mean of the cluster means; None uses the mean of X (an empirical-Bayes choice).
    n_iter : int, default 50
        Gibbs sweeps.
    init : {"sequential", "single"}, default "sequential"
        "sequential" seats the rows one by one (in the first sweep's order), each given the rows before it;
        "single" starts with every row in one cluster.
    keep : {"best", "last"}, default "best"
        Report the sample with the highest log joint over all sweeps, or the last sample.
    max_samples : int, default 20000
        Largest N accepted (the sampler is serial Python-speed numba over rows).
    random_state : int, Generator or None
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`: the chain (labels, table counts, kept sample, histories and the
        generator's exact state) is saved atomically after every sweep; an interrupted fit resumes at the next
        sweep and draws the identical chain, bit for bit.

    Attributes
    ----------
    labels_ : ndarray (n_samples,) int64
        Cluster of every row in the kept sample, numbered by first appearance.
    cluster_centers_ : ndarray (n_clusters_, n_features)
        Posterior means ``m_k`` of the cluster means given the kept sample.
    cluster_sizes_ : ndarray (n_clusters_,) int64
    cluster_variances_ : ndarray (n_clusters_,)
        Posterior variances ``v_k`` (per coordinate) of the cluster means.
    n_clusters_ : int
    mu0_ : ndarray (n_features,)
        The prior mean used.
    log_joint_ : float
        ``log p(X, z)`` of the kept sample.
    log_joint_history_ : list of float
        ``log p(X, z)`` after every sweep.
    objective_history_ : list of float
        ``-log p(X, z)`` after every sweep (lower is better, as for the other estimators).
    n_clusters_history_ : list of int
    n_iter_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> from dclust.cluster import DPMMGibbs
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(0, 0.3, (20, 2)), rng.normal(8, 0.3, (20, 2))])
    >>> g = DPMMGibbs(sigma2=0.1, rho2=50.0, n_iter=10, random_state=0).fit(X)
    >>> g.n_clusters_, g.labels_[:3].tolist(), g.labels_[-3:].tolist()
    (2, [0, 0, 0], [1, 1, 1])
    """

    labels_: npt.NDArray[np.int64]
    cluster_centers_: npt.NDArray[np.float64]
    cluster_sizes_: npt.NDArray[np.int64]
    cluster_variances_: npt.NDArray[np.float64]
    n_clusters_: int
    mu0_: npt.NDArray[np.float64]

    _parameter_constraints = {
        "alpha": [Interval("real", 0, None, "neither")],
        "sigma2": [Interval("real", 0, None, "neither")],
        "rho2": [Interval("real", 0, None, "neither")],
        "mu0": [_VECTOR, Options((None,))],
        "n_iter": [Interval("int", 1, None)],
        "init": [Options(("sequential", "single"))],
        "keep": [Options(("best", "last"))],
        **MEMORY_PARAMETERS,
    }
    _cost_note = "a serial collapsed Gibbs sampler, O(N K D) per sweep"

    def __init__(
        self, *, alpha: float = 1.0, sigma2: float = 1.0, rho2: float = 100.0, mu0: ArrayLike | None = None,
        n_iter: int = 50, init: Literal["sequential", "single"] = "sequential", keep: Literal["best", "last"] = "best",
        max_samples: int = 20_000, random_state: SeedLike = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.alpha, self.sigma2, self.rho2, self.mu0, self.n_iter = alpha, sigma2, rho2, mu0, n_iter
        self.init, self.keep, self.max_samples, self.random_state = init, keep, max_samples, random_state
        self.checkpoint = checkpoint

    def _prior_mean(self, X: np.ndarray) -> np.ndarray:
        if self.mu0 is None:
            mean: np.ndarray = X.mean(axis=0)
            return mean
        mu0 = np.asarray(self.mu0, dtype=np.float64)
        if mu0.shape != (X.shape[1],) or not np.isfinite(mu0).all():
            raise InvalidParameterError(
                message("DPMMGibbs(mu0=...)", f"{X.shape[1]} finite numbers (one per feature)",
                        f"shape {mu0.shape}", "Pass a prior mean with one entry per column of X, or None.")
            )
        return mu0

    def fit(self, X: ArrayLike, y: Ignored = None) -> "DPMMGibbs":
        """Run the sampler on ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        X, _ = self._load(X)
        n, d = X.shape
        mu0 = self._prior_mean(X)
        ck, state = self._memory_checkpointer(X)
        if self._restore_done(ck, state):
            return self
        rng = as_generator(self.random_state)
        labels = np.full(n, -1, dtype=np.int64)
        counts = np.zeros(n, dtype=np.int64)
        sums = np.zeros((n, d))
        if self.init == "single":
            labels[:] = 0
            counts[0] = n
            sums[0] = X.sum(axis=0)
        sq_total = float((X * X).sum())
        first, rng, kept_lj, history, ks = self._start_sweeps(ck, state, "n_clusters", rng)
        kept = None
        if state is not None:
            with ck.reading():
                labels = ck.require_shape("labels", state["labels"], (n,)).astype(np.int64)
                counts = ck.require_shape("counts", state["counts"], (n,)).astype(np.int64)
                if labels.min() < 0 or labels.max() >= n or not np.array_equal(np.bincount(labels, minlength=n),
                                                                               counts):
                    raise ValueError("labels and table counts that do not fit together")
                kept = ck.require_shape("kept sample", state["kept"], (n,)).astype(np.int64)
            sums[:] = 0.0  # as after every sweep: re-accumulated exactly from the labels
            np.add.at(sums, labels, X)
        watch = Stopwatch()
        for it in range(first, self.n_iter):
            order = rng.permutation(n).astype(np.int64)
            k = K.dpmm_sweep(X, labels, counts, sums, order, float(self.alpha), float(self.sigma2),
                             float(self.rho2), mu0, rng)
            sums[:] = 0.0  # re-accumulate exactly (no drift from the in-sweep updates)
            np.add.at(sums, labels, X)
            active = np.flatnonzero(counts)
            lj = K.dpmm_log_joint(counts[active], sums[active], sq_total, n, self.alpha, self.sigma2, self.rho2, mu0)
            history.append(lj)
            ks.append(int(k))
            if self.keep == "last" or lj > kept_lj:
                kept, kept_lj = labels.copy(), lj
            if ck.active and it + 1 < self.n_iter:
                ck.save({"phase": "sweep", "sweep": it + 1, "rng": rng_state(rng), "labels": labels,
                         "counts": counts, "kept": kept, "kept_log_joint": kept_lj, "history": history,
                         "n_clusters": ks})
            emit(ProgressEvent("DPMMGibbs", "iter", it + 1, -lj, int(k), watch.lap()))
        assert kept is not None  # set by the first sweep (kept_lj starts at -inf) or by the checkpoint
        self.labels_ = _first_appearance(kept)
        k = int(self.labels_.max()) + 1
        sizes = np.bincount(self.labels_, minlength=k).astype(np.int64)
        s = np.zeros((k, d))
        np.add.at(s, self.labels_, X)
        v, m = K.dpmm_posterior(sizes, s, self.sigma2, self.rho2, mu0)
        self.cluster_centers_ = m
        self.cluster_sizes_ = sizes
        self.cluster_variances_ = v
        self.n_clusters_ = k
        self.mu0_ = mu0
        self._finish_sweeps(ck, kept_lj, history, ks, "n_clusters_history_", k, d)
        return self

    def predict(self, X: ArrayLike) -> ArrayLike:
        """MAP cluster of every row under the posterior predictive of the kept sample (no new clusters):
        ``argmax_k log n_k + log N(x | m_k, (sigma2 + v_k) I)``.

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        arr, info = self._new_input(X, "cluster_centers_")
        labels = map_labels(_dpmm_labels, arr, counts=self.cluster_sizes_, means=self.cluster_centers_,
                            variances=self.cluster_variances_, sigma2=float(self.sigma2))
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X: ArrayLike, y: Ignored = None) -> ArrayLike:
        """``fit(X).labels_``: the sampled clusters of the training rows."""
        return self.fit(X).labels_


