"""Reference algorithms from the slides and the MAD-Bayes comparisons (ALGORITHMS.md 7, 10.1): in memory, seeded.

``DPMMGibbs`` (collapsed Gibbs for the DP mixture), ``SpectralClustering`` (normalized cut) and ``IBPGibbs``
(collapsed Gibbs for the Indian-buffet linear-Gaussian model). They are slow, exact baselines for small data: each
accepts numpy, dask, zarr or xarray input, checks the size from metadata against ``max_samples`` (a clear
:class:`~dclust.errors.InvalidDataError` above it) and only then computes the data into memory.
"""

from __future__ import annotations

import numpy as np

from .._dask.passes import block_offsets, map_labels
from .._fit import ProgressEvent, Stopwatch, emit, rng_state, set_rng_state
from .._registry import register
from .._validation import SEED, Interval, Options, _Kind, as_generator, check_array
from ..errors import DclustError, InvalidDataError, InvalidParameterError, message
from ..kernels import references as K
from ._base import CHECKPOINT, BaseEstimator, ClusterMixin, TransformerMixin, finite_rows, wrap_output

__all__ = ["DPMMGibbs", "SpectralClustering", "IBPGibbs"]

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


# --------------------------------------------------------------------------------------------------------------


def _dpmm_labels(Xb, *, offset, block_index, counts, means, variances, sigma2):
    return K.dpmm_predict(Xb, counts, means, variances, sigma2)


@register
class DPMMGibbs(ClusterMixin, _InMemory):
    """Collapsed Gibbs sampler for the Dirichlet-process mixture of isotropic Gaussians (ALGORITHMS.md 7).

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
    >>> from dclust.cluster._references import DPMMGibbs
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(0, 0.3, (20, 2)), rng.normal(8, 0.3, (20, 2))])
    >>> g = DPMMGibbs(sigma2=0.1, rho2=50.0, n_iter=10, random_state=0).fit(X)
    >>> g.n_clusters_, g.labels_[:3].tolist(), g.labels_[-3:].tolist()
    (2, [0, 0, 0], [1, 1, 1])
    """

    _parameter_constraints = {
        "alpha": [Interval("real", 0, None, "neither")],
        "sigma2": [Interval("real", 0, None, "neither")],
        "rho2": [Interval("real", 0, None, "neither")],
        "mu0": [_VECTOR, Options((None,))],
        "n_iter": [Interval("int", 1, None)],
        "init": [Options(("sequential", "single"))],
        "keep": [Options(("best", "last"))],
        "max_samples": [Interval("int", 1, None)],
        "random_state": [SEED],
        "checkpoint": [CHECKPOINT],
    }
    _cost_note = "a serial collapsed Gibbs sampler, O(N K D) per sweep"

    def __init__(
        self, *, alpha=1.0, sigma2=1.0, rho2=100.0, mu0=None, n_iter=50, init="sequential", keep="best",
        max_samples=20_000, random_state=None, checkpoint=None,
    ):
        self.alpha = alpha
        self.sigma2 = sigma2
        self.rho2 = rho2
        self.mu0 = mu0
        self.n_iter = n_iter
        self.init = init
        self.keep = keep
        self.max_samples = max_samples
        self.random_state = random_state
        self.checkpoint = checkpoint

    def _prior_mean(self, X: np.ndarray) -> np.ndarray:
        if self.mu0 is None:
            return X.mean(axis=0)
        mu0 = np.asarray(self.mu0, dtype=np.float64)
        if mu0.shape != (X.shape[1],) or not np.isfinite(mu0).all():
            raise InvalidParameterError(
                message("DPMMGibbs(mu0=...)", f"{X.shape[1]} finite numbers (one per feature)",
                        f"shape {mu0.shape}", "Pass a prior mean with one entry per column of X, or None.")
            )
        return mu0

    def fit(self, X, y=None) -> "DPMMGibbs":
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
        history, ks = [], []
        kept, kept_lj = None, -np.inf
        first = 0
        if state is not None:
            with ck.reading():
                first, rng = int(state["sweep"]), set_rng_state(state["rng"])
                if state["phase"] != "sweep" or not 0 < first < self.n_iter:
                    raise ValueError(f"phase {state['phase']!r} at sweep {first} of n_iter={self.n_iter}")
                labels = ck.require_shape("labels", state["labels"], (n,)).astype(np.int64)
                counts = ck.require_shape("counts", state["counts"], (n,)).astype(np.int64)
                if labels.min() < 0 or labels.max() >= n or not np.array_equal(np.bincount(labels, minlength=n),
                                                                               counts):
                    raise ValueError("labels and table counts that do not fit together")
                kept = ck.require_shape("kept sample", state["kept"], (n,)).astype(np.int64)
                kept_lj = float(state["kept_log_joint"])
                history, ks = [float(v) for v in state["history"]], [int(v) for v in state["n_clusters"]]
                if not len(history) == len(ks) == first:
                    raise ValueError(f"histories of {len(history)} and {len(ks)} sweeps; expected {first}")
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
        self.log_joint_ = float(kept_lj)
        self.log_joint_history_ = history
        self.objective_history_ = [-h for h in history]
        self.n_clusters_history_ = ks
        self.n_iter_ = self.n_iter
        self.n_features_in_ = d
        ck.save_done(self)
        emit(ProgressEvent("DPMMGibbs", "done", self.n_iter, -kept_lj, k, 0.0))
        return self

    def predict(self, X):
        """MAP cluster of every row under the posterior predictive of the kept sample (no new clusters):
        ``argmax_k log n_k + log N(x | m_k, (sigma2 + v_k) I)``.

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        arr, info = self._new_input(X, "cluster_centers_")
        labels = map_labels(_dpmm_labels, arr, counts=self.cluster_sizes_, means=self.cluster_centers_,
                            variances=self.cluster_variances_, sigma2=float(self.sigma2))
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X, y=None):
        """``fit(X).labels_``: the sampled clusters of the training rows."""
        return self.fit(X).labels_


# --------------------------------------------------------------------------------------------------------------


def _nn_labels(Xb, *, offset, block_index, train, labels):
    from scipy.spatial import cKDTree

    _, idx = cKDTree(train).query(np.asarray(Xb, dtype=np.float64), k=1)
    return labels[idx].astype(np.int32)


@register
class SpectralClustering(ClusterMixin, _InMemory):
    """Spectral clustering by normalized cut (Shi & Malik; Ng, Jordan & Weiss), in memory (ALGORITHMS.md 7).

    Builds the affinity W (RBF ``exp(-gamma ||x_i - x_j||^2)``, dense, or the symmetrised kNN connectivity,
    sparse), takes the ``n_clusters`` eigenvectors of the symmetric normalised Laplacian
    ``L = I - D^-1/2 W D^-1/2`` with the smallest eigenvalues, normalises the rows of that embedding to unit length
    and runs a seeded k-means on it. With ``assign_labels="sweep"`` (two clusters) it follows the slides instead:
    the second generalised eigenvector ``y = D^-1/2 u_2`` of ``(D - W) y = lam D y`` is thresholded at the split
    that *minimises* Ncut ([SL] errata: the slide says argmax).

    Parameters
    ----------
    n_clusters : int, default 8
    affinity : {"rbf", "nearest_neighbors"}, default "rbf"
        "rbf" costs O(N^2) memory and time; "nearest_neighbors" is sparse, O(N n_neighbors).
    gamma : float, default 1.0
        RBF scale, ``1 / sigma_X^2`` of the slides.
    n_neighbors : int, default 10
        Neighbours (the row itself included) for the kNN affinity.
    assign_labels : {"kmeans", "sweep"}, default "kmeans"
        k-means on the row-normalised embedding, or the two-way Ncut threshold sweep (needs n_clusters=2).
    n_init : int, default 10
        k-means restarts on the embedding (the lowest inertia is kept).
    max_iter : int, default 300
        Lloyd iterations per restart.
    max_samples : int, default 5000
        Largest N accepted: the RBF affinity alone is ``8 N^2`` bytes (200 MB at 5000).
    random_state : int, Generator or None
        Seeds the eigensolver's start vector and k-means.
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`. With ``assign_labels="kmeans"`` the spectral embedding
        (eigenvectors, eigenvalues, degrees) is saved once the eigensolver is done, then the k-means stage's
        state (restart, centres, labels, histories, best run so far and the generator's exact state) after every
        Lloyd pass: an interrupted fit skips the eigensolver and resumes k-means at the next pass, with the
        identical result. ("sweep" has no loop: only the final model is saved.) A finished fit's checkpoint holds
        the model and a rerun returns it at once.

    Attributes
    ----------
    labels_ : ndarray (n_samples,) int64
        Clusters numbered by first appearance.
    embedding_ : ndarray (n_samples, n_clusters)
        Eigenvectors of L (before row normalisation), eigenvector signs fixed deterministically.
    eigenvalues_ : ndarray (n_clusters,)
        The smallest eigenvalues of L, ascending.
    ncut_ : float
        ``sum_k cut(A_k, rest) / vol(A_k)`` of the result (for two clusters, the slides' Ncut(A, B)).
    objective_history_ : list of float
        k-means inertia on the embedding after every label pass of the kept restart ("kmeans"), or ``[ncut_]``
        ("sweep").
    n_clusters_ : int
        Non-empty clusters found.
    fit_X_ : ndarray (n_samples, n_features)
        The training rows, used by :meth:`predict`.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> from dclust.cluster._references import SpectralClustering
    >>> t = np.linspace(0, 2 * np.pi, 60, endpoint=False)
    >>> X = np.concatenate([np.c_[np.cos(t), np.sin(t)], 4 * np.c_[np.cos(t), np.sin(t)]])
    >>> sc = SpectralClustering(n_clusters=2, affinity="nearest_neighbors", n_neighbors=5, random_state=0).fit(X)
    >>> np.bincount(sc.labels_).tolist(), len(set(sc.labels_[:60].tolist()))
    ([60, 60], 1)
    """

    _parameter_constraints = {
        "n_clusters": [Interval("int", 1, None)],
        "affinity": [Options(("rbf", "nearest_neighbors"))],
        "gamma": [Interval("real", 0, None, "neither")],
        "n_neighbors": [Interval("int", 2, None)],
        "assign_labels": [Options(("kmeans", "sweep"))],
        "n_init": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "max_samples": [Interval("int", 2, None)],
        "random_state": [SEED],
        "checkpoint": [CHECKPOINT],
    }
    _cost_note = "the affinity matrix and its eigenvectors are held in memory"

    def __init__(
        self, *, n_clusters=8, affinity="rbf", gamma=1.0, n_neighbors=10, assign_labels="kmeans", n_init=10,
        max_iter=300, max_samples=5000, random_state=None, checkpoint=None,
    ):
        self.n_clusters = n_clusters
        self.affinity = affinity
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.assign_labels = assign_labels
        self.n_init = n_init
        self.max_iter = max_iter
        self.max_samples = max_samples
        self.random_state = random_state
        self.checkpoint = checkpoint

    def fit(self, X, y=None) -> "SpectralClustering":
        """Cluster ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        if self.assign_labels == "sweep" and self.n_clusters != 2:
            raise InvalidParameterError(
                message("SpectralClustering(assign_labels='sweep')", "n_clusters=2 (the sweep splits in two)",
                        f"n_clusters={self.n_clusters}", "Use assign_labels='kmeans' for more than two clusters.")
            )
        X, _ = self._load(X)
        n, d = X.shape
        if n <= self.n_clusters:
            raise InvalidDataError(
                message("SpectralClustering(n_clusters=...)", f"fewer clusters than samples (n_samples={n})",
                        f"n_clusters={self.n_clusters}", "Lower n_clusters or pass more data.")
            )
        ck, state = self._memory_checkpointer(X)
        if self._restore_done(ck, state):
            return self
        rng = as_generator(self.random_state)
        watch = Stopwatch()
        W = K.rbf_affinity(X, self.gamma) if self.affinity == "rbf" else K.knn_affinity(X, self.n_neighbors)
        k = self.n_clusters
        lloyd, passes = None, 0
        if state is None:
            vals, U, degree = K.spectral_embedding(W, k, rng)
            emb = {"eigenvalues": vals, "embedding": U, "degree": degree}
            if ck.active and self.assign_labels == "kmeans":
                ck.save({"phase": "embedding", "rng": rng_state(rng), **emb})
            emit(ProgressEvent("SpectralClustering", "init", 0, float("nan"), k, watch.lap()))
        else:
            with ck.reading():
                if state["phase"] not in ("embedding", "kmeans"):
                    raise ValueError(f"phase {state['phase']!r}")
                rng = set_rng_state(state["rng"])
                vals = ck.require_shape("eigenvalues", state["eigenvalues"], (k,)).astype(np.float64)
                U = ck.require_shape("embedding", state["embedding"], (n, k)).astype(np.float64)
                degree = ck.require_shape("degrees", state["degree"], (n,)).astype(np.float64)
                emb = {"eigenvalues": vals, "embedding": U, "degree": degree}
                if state["phase"] == "kmeans":
                    lloyd, passes = state["lloyd"], int(state["n_passes"])
                    if lloyd["centres"] is not None:  # inside a run (None: at the start of a restart)
                        ck.require_shape("centres", lloyd["centres"], (k, k))
                        ck.require_shape("labels", lloyd["labels"], (n,))
                        if not 0 < len(lloyd["history"]) < self.max_iter:
                            raise ValueError(f"a run after {len(lloyd['history'])} passes (max_iter={self.max_iter})")
                    if lloyd["best"] is not None:
                        ck.require_shape("best labels", lloyd["best"]["labels"], (n,))
                        ck.require_shape("best centres", lloyd["best"]["centres"], (k, k))
                    if not 0 <= int(lloyd["restart"]) < self.n_init:
                        raise ValueError(f"restart {lloyd['restart']} of n_init={self.n_init}")
        if self.assign_labels == "sweep":
            labels, ncuts = K.ncut_sweep(W, U[:, 1] / np.sqrt(degree), degree)
            history = [float(ncuts.min())]
        else:
            E = U / np.maximum(np.linalg.norm(U, axis=1), np.finfo(float).tiny)[:, None]
            count = [passes]

            def step(s, inertia):  # after every Lloyd pass: save (when the run goes on), then announce it
                count[0] += 1
                if s is not None and ck.active:
                    ck.save({"phase": "kmeans", "rng": rng_state(rng), **emb, "n_passes": count[0], "lloyd": s})
                emit(ProgressEvent("SpectralClustering", "iter", count[0], inertia, k, watch.lap()))

            labels, _, _, history = K.kmeans_lloyd(E, k, rng, n_init=self.n_init, max_iter=self.max_iter,
                                                   state=lloyd, step=step)
        self.labels_ = _first_appearance(labels)
        self.n_clusters_ = int(self.labels_.max()) + 1
        self.embedding_ = U
        self.eigenvalues_ = vals
        self.ncut_ = K.ncut_value(W, self.labels_, degree)
        self.objective_history_ = history
        self.fit_X_ = X
        self.n_iter_ = len(history)
        self.n_features_in_ = d
        ck.save_done(self)
        emit(ProgressEvent("SpectralClustering", "done", self.n_iter_, self.ncut_, self.n_clusters_, watch.lap()))
        return self

    def predict(self, X):
        """Label of the nearest training row (spectral clustering has no native out-of-sample rule; this
        extends ``labels_`` by 1-nearest-neighbour, so ``predict(X_train) == labels_``).

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        arr, info = self._new_input(X, "labels_")
        labels = map_labels(_nn_labels, arr, train=self.fit_X_, labels=self.labels_)
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X, y=None):
        """``fit(X).labels_``."""
        return self.fit(X).labels_


# --------------------------------------------------------------------------------------------------------------


def _ibp_codes(Xb, features, probs, sigma_x):
    return K.ibp_map_codes(Xb, features, probs, sigma_x)


@register
class IBPGibbs(TransformerMixin, _InMemory):
    """Collapsed Gibbs sampler for the Indian-buffet linear-Gaussian feature model (Griffiths & Ghahramani 2006),
    the sampler [MB] 5.1 compares BP-means with (ALGORITHMS.md 10.1).

    Model: ``Z ~ IBP(alpha)``, feature means ``A_k ~ N(0, sigma_a^2 I)``, ``x_n ~ N(z_n A, sigma_x^2 I)``.
    *Collapsed*: A is integrated out, as in Griffiths & Ghahramani's sampler. Each sweep visits the rows in a fresh
    random order; every bit of a feature used by another row is drawn from its exact conditional
    (prior ``m_-n,k / N`` times the Gaussian predictive of ``x_n``), features used only by row n are dropped and
    the number of new features for row n is drawn exactly from the Poisson(``alpha / N``) prior times the
    predictive, truncated at ``max_new_features``. The hyperparameters are fixed (not resampled). O(N K^3) per
    sweep, in memory. The sampler starts from no feature. The data are not centred: a feature shared by all rows
    plays the base feature (background) of [MB].

    The collapsed sampler mixes slowly at small noise: a new feature must pay for its variance in every dimension,
    so early "whole image" features persist. ``anneal_factor > 1`` adds a continuation burn-in: during the first
    half of the sweeps ``sigma_x`` is multiplied by a factor that decreases geometrically from ``anneal_factor``
    to 1; only sweeps at the true ``sigma_x`` are eligible for ``keep="best"``. As in [MB] 5.1, features are
    identifiable only up to recodings (a base feature holding an object plus a negative copy of that object).

    Parameters
    ----------
    alpha : float, default 1.0
        IBP mass parameter (the paper's experiment: 1).
    sigma_x : float, default 1.0
        Noise standard deviation.
    sigma_a : float, default 1.0
        Standard deviation of the feature means (the paper's experiment: variance 0.5).
    n_iter : int, default 100
        Gibbs sweeps.
    max_new_features : int, default 4
        Truncation of the number of new features proposed per row.
    max_features : int, default 100
        Capacity of Z; exceeding it raises (lower ``alpha`` or raise ``sigma_x``).
    anneal_factor : float, default 1.0
        Initial multiplier of ``sigma_x`` for the continuation burn-in (1 = the plain sampler).
    keep : {"best", "last"}, default "best"
        Report the sample with the highest log joint over all sweeps, or the last one.
    max_samples : int, default 5000
        Largest N accepted.
    random_state : int, Generator or None
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`: the chain (Z, its Gram statistics, the kept sample, histories and
        the generator's exact state) is saved atomically after every sweep; an interrupted fit resumes at the next
        sweep and draws the identical chain, bit for bit.

    Attributes
    ----------
    allocation_ : ndarray (n_samples, n_latent_features_) uint8
        Binary features of the kept sample, columns in left-ordered form (sorted by the binary number they read
        from the first row down).
    features_ : ndarray (n_latent_features_, n_features_in_)
        Posterior mean of A given ``allocation_``: ``(Z^T Z + sigma_x^2/sigma_a^2 I)^-1 Z^T X``.
    feature_counts_ : ndarray (n_latent_features_,) int64
        Rows holding each feature.
    n_latent_features_ : int
        K, the number of features (``n_features_in_`` is D, as in scikit-learn and BPMeans).
    log_joint_ : float
        ``log P(X | Z) + log P([Z])`` of the kept sample.
    log_joint_history_ : list of float
        The log joint (at the true ``sigma_x``) after every sweep.
    objective_history_ : list of float
        ``-log_joint_history_`` (lower is better).
    n_latent_features_history_ : list of int
    n_iter_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster._references import IBPGibbs
    >>> rng = np.random.default_rng(0)
    >>> A = np.array([[4.0, 0, 0, 0], [0, 0, 4.0, 4.0]])
    >>> Z = rng.integers(0, 2, size=(40, 2))
    >>> X = Z @ A + 0.1 * rng.standard_normal((40, 4))
    >>> ibp = IBPGibbs(sigma_x=0.1, sigma_a=3.0, n_iter=40, anneal_factor=10.0, random_state=0).fit(X)
    >>> ibp.n_latent_features_, np.round(ibp.features_, 1).tolist()
    (2, [[4.0, 0.0, 0.1, 0.0], [-0.0, -0.0, 3.9, 4.0]])
    """

    _parameter_constraints = {
        "alpha": [Interval("real", 0, None, "neither")],
        "sigma_x": [Interval("real", 0, None, "neither")],
        "sigma_a": [Interval("real", 0, None, "neither")],
        "n_iter": [Interval("int", 1, None)],
        "max_new_features": [Interval("int", 1, None)],
        "max_features": [Interval("int", 1, None)],
        "anneal_factor": [Interval("real", 1, None)],
        "keep": [Options(("best", "last"))],
        "max_samples": [Interval("int", 1, None)],
        "random_state": [SEED],
        "checkpoint": [CHECKPOINT],
    }
    _cost_note = "a serial collapsed Gibbs sampler, O(N K^3) per sweep"

    def __init__(
        self, *, alpha=1.0, sigma_x=1.0, sigma_a=1.0, n_iter=100, max_new_features=4, max_features=100,
        anneal_factor=1.0, keep="best", max_samples=5000, random_state=None, checkpoint=None,
    ):
        self.alpha = alpha
        self.sigma_x = sigma_x
        self.sigma_a = sigma_a
        self.n_iter = n_iter
        self.max_new_features = max_new_features
        self.max_features = max_features
        self.anneal_factor = anneal_factor
        self.keep = keep
        self.max_samples = max_samples
        self.random_state = random_state
        self.checkpoint = checkpoint

    def fit(self, X, y=None) -> "IBPGibbs":
        """Run the sampler on ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        X, _ = self._load(X)
        n, d = X.shape
        ck, state = self._memory_checkpointer(X)
        if self._restore_done(ck, state):
            return self
        rng = as_generator(self.random_state)
        cap = self.max_features
        Z = np.zeros((n, cap), dtype=np.uint8)
        G = np.zeros((cap, cap))
        B = np.zeros((cap, d))
        m = np.zeros(cap, dtype=np.int64)
        k = 0
        sq_total = float((X * X).sum())
        sx, sa = float(self.sigma_x), float(self.sigma_a)
        history, ks = [], []
        kept, kept_lj = None, -np.inf
        first = 0
        if state is not None:
            with ck.reading():
                first, rng = int(state["sweep"]), set_rng_state(state["rng"])
                if state["phase"] != "sweep" or not 0 < first < self.n_iter:
                    raise ValueError(f"phase {state['phase']!r} at sweep {first} of n_iter={self.n_iter}")
                k = int(state["k"])
                if not 0 <= k <= cap:
                    raise ValueError(f"{k} features with max_features={cap}")
                Z = ck.require_shape("Z", state["Z"], (n, cap)).astype(np.uint8)
                G = ck.require_shape("G", state["G"], (cap, cap)).astype(np.float64)
                B = ck.require_shape("B", state["B"], (cap, d)).astype(np.float64)
                m = ck.require_shape("feature counts", state["m"], (cap,)).astype(np.int64)
                if state["kept"] is not None:
                    kept = ck.require_shape("kept sample", state["kept"], (n, None)).astype(np.uint8)
                kept_lj = float(state["kept_log_joint"])
                history, ks = [float(v) for v in state["history"]], [int(v) for v in state["n_features"]]
                if not len(history) == len(ks) == first:
                    raise ValueError(f"histories of {len(history)} and {len(ks)} sweeps; expected {first}")
        watch = Stopwatch()
        n_anneal = self.n_iter // 2 if self.anneal_factor > 1 else 0
        for it in range(first, self.n_iter):
            order = rng.permutation(n).astype(np.int64)
            scale = float(self.anneal_factor) ** (1.0 - it / n_anneal) if it < n_anneal else 1.0
            k = K.ibp_sweep(X, Z, G, B, m, k, order, float(self.alpha), sx * scale, sa, int(self.max_new_features),
                            rng)
            if k < 0:
                raise DclustError(
                    message(f"IBPGibbs(max_features={cap})", f"at most {cap} features",
                            f"a sweep that needed more (sweep {it + 1})",
                            "Lower alpha, raise sigma_x (the noise level may be underestimated), or raise "
                            "max_features.")
                )
            Zk = Z[:, :k].astype(np.float64)  # re-accumulate exactly
            G[:k, :k] = Zk.T @ Zk
            B[:k] = Zk.T @ X
            m[:k] = Z[:, :k].sum(axis=0)
            lj = K.ibp_log_joint(Z[:, :k], G[:k, :k], B[:k], sq_total, self.alpha, sx, sa)
            history.append(lj)
            ks.append(int(k))
            if it >= n_anneal and (self.keep == "last" or lj > kept_lj):
                kept, kept_lj = Z[:, :k].copy(), lj
            if ck.active and it + 1 < self.n_iter:  # all of Z, G, B, m: the next sweep reads them as they are
                ck.save({"phase": "sweep", "sweep": it + 1, "rng": rng_state(rng), "k": int(k), "Z": Z, "G": G,
                         "B": B, "m": m, "kept": kept, "kept_log_joint": kept_lj, "history": history,
                         "n_features": ks})
            emit(ProgressEvent("IBPGibbs", "iter", it + 1, -lj, int(k), watch.lap()))
        order = np.lexsort(1 - kept[::-1].astype(np.int64)) if kept.shape[1] else np.zeros(0, dtype=np.int64)
        Zk = np.ascontiguousarray(kept[:, order])
        Zf = Zk.astype(np.float64)
        self.allocation_ = Zk
        self.features_ = K.ibp_posterior_features(Zf.T @ Zf, Zf.T @ X, sx, sa)
        self.feature_counts_ = Zk.sum(axis=0).astype(np.int64)
        self.n_latent_features_ = int(Zk.shape[1])
        self.log_joint_ = float(kept_lj)
        self.log_joint_history_ = history
        self.objective_history_ = [-h for h in history]
        self.n_latent_features_history_ = ks
        self.n_iter_ = self.n_iter
        self.n_features_in_ = d
        ck.save_done(self)
        emit(ProgressEvent("IBPGibbs", "done", self.n_iter, -kept_lj, self.n_latent_features_, 0.0))
        return self

    def transform(self, X):
        """Binary codes of rows with the features fixed at ``features_``: the MAP ``z`` under
        ``N(x | z A, sigma_x^2 I)`` and the IBP predictive prior ``m_k / (N + 1)`` per feature (exact enumeration
        up to 10 features, coordinate ascent beyond).

        Returns an (n, n_latent_features_) uint8 ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        arr, info = self._new_input(X, "features_")
        probs = self.feature_counts_ / (self.allocation_.shape[0] + 1.0)
        k = self.n_latent_features_
        out = arr.map_blocks(_ibp_codes, self.features_, probs, float(self.sigma_x), dtype=np.uint8,
                             chunks=(arr.chunks[0], (k,)))
        return wrap_output(out, info, "codes")

    def fit_transform(self, X, y=None):
        """``fit(X).allocation_``: the sampled features of the training rows."""
        return self.fit(X).allocation_

    def predict(self, X):
        """Same as :meth:`transform` (as for BPMeans: the prediction of a feature model is the binary row z)."""
        return self.transform(X)

    def reconstruct(self, Z):
        """``Z @ features_``: the model's reconstruction of rows with allocation ``Z``."""
        self._check_fitted("features_")
        return np.asarray(Z, dtype=np.float64) @ self.features_
