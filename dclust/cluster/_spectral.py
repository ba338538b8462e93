"""Spectral clustering by normalized cut (docs/algorithms.md 7): an in-memory, seeded reference.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._dask.passes import map_labels
from .._fit import ProgressEvent, Stopwatch, emit, rng_state, set_rng_state
from .._registry import register
from .._validation import SEED, Interval, Options, as_generator
from ..errors import InvalidDataError, InvalidParameterError, message
from ..kernels import spectral as K
from ._base import CHECKPOINT, ClusterMixin, wrap_output

from ._inmemory import _InMemory, _first_appearance
from ..typing import ArrayLike, CheckpointLike, Ignored, SeedLike

__all__ = ["SpectralClustering"]


def _nn_labels(Xb: npt.NDArray[Any], *, offset: int, block_index: int, train: np.ndarray, labels: np.ndarray
               ) -> np.ndarray:
    from scipy.spatial import cKDTree

    _, idx = cKDTree(train).query(np.asarray(Xb, dtype=np.float64), k=1)
    nearest: np.ndarray = labels[idx].astype(np.int32)  # (scipy has no stubs)
    return nearest


@register
class SpectralClustering(ClusterMixin, _InMemory):  # type: ignore[misc]  # scikit-learn ships no type hints
    """Spectral clustering by normalized cut (Shi & Malik; Ng, Jordan & Weiss), in memory (docs/algorithms.md 7).

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
    >>> from dclust.cluster import SpectralClustering
    >>> t = np.linspace(0, 2 * np.pi, 60, endpoint=False)
    >>> X = np.concatenate([np.c_[np.cos(t), np.sin(t)], 4 * np.c_[np.cos(t), np.sin(t)]])
    >>> sc = SpectralClustering(n_clusters=2, affinity="nearest_neighbors", n_neighbors=5, random_state=0).fit(X)
    >>> np.bincount(sc.labels_).tolist(), len(set(sc.labels_[:60].tolist()))
    ([60, 60], 1)
    """

    labels_: npt.NDArray[np.int64]
    n_clusters_: int
    embedding_: npt.NDArray[np.float64]
    eigenvalues_: npt.NDArray[np.float64]
    ncut_: float
    objective_history_: list[float]
    fit_X_: npt.NDArray[np.float64]
    n_iter_: int
    n_features_in_: int

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
        self, *, n_clusters: int = 8, affinity: Literal["rbf", "nearest_neighbors"] = "rbf", gamma: float = 1.0,
        n_neighbors: int = 10, assign_labels: Literal["kmeans", "sweep"] = "kmeans", n_init: int = 10,
        max_iter: int = 300, max_samples: int = 5000, random_state: SeedLike = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.n_clusters, self.affinity, self.gamma, self.n_neighbors = n_clusters, affinity, gamma, n_neighbors
        self.assign_labels, self.n_init, self.max_iter = assign_labels, n_init, max_iter
        self.max_samples, self.random_state, self.checkpoint = max_samples, random_state, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "SpectralClustering":
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

            # after every Lloyd pass: save (when the run goes on), then announce it
            def step(s: dict[str, Any] | None, inertia: float) -> None:
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

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Label of the nearest training row (spectral clustering has no native out-of-sample rule; this
        extends ``labels_`` by 1-nearest-neighbour, so ``predict(X_train) == labels_``).

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        arr, info = self._new_input(X, "labels_")
        labels = map_labels(_nn_labels, arr, train=self.fit_X_, labels=self.labels_)
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X: ArrayLike, y: Ignored = None) -> ArrayLike:
        """``fit(X).labels_``."""
        return self.fit(X).labels_


