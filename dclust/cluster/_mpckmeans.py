"""MPCK-means (Bilenko, Basu and Mooney 2004): constrained k-means with metric learning, a baseline of the [TV] UCI
tables (docs/algorithms.md 10.3). An in-memory reference, size-guarded; not a scalable estimator.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._fit import ProgressEvent, Stopwatch, emit
from .._dask.passes import map_labels
from .._registry import register
from .._validation import SEED, Interval, Options
from ..kernels.constrained import mpck_sweep, symmetric_links
from ..kernels.kmeans import kmeans_plusplus
from ._base import wrap_output
from ._inmemory import _LinkedInMemory
from ..typing import ArrayLike, SeedLike

__all__ = ["MPCKMeans"]


@register
class MPCKMeans(_LinkedInMemory):
    """MPCK-means: k-means with soft must/cannot links and a learned diagonal metric per cluster (a reference).

    Minimises (Bilenko et al. 2004, eq. 5, with unit link weights)

    ``sum_i (||x_i - mu_{z_i}||^2_{A_{z_i}} - log det A_{z_i}) + sum_{must (i,j), z_i != z_j} f_M(i, j)
    + sum_{cannot (i,j), z_i = z_j} f_C(i, j)``

    where ``f_M = (||x_i - x_j||^2_{A_{z_i}} + ||x_i - x_j||^2_{A_{z_j}}) / 2`` and ``f_C = ||x' - x''||^2_{A_h} -
    ||x_i - x_j||^2_{A_h}`` with ``(x', x'')`` the most separated pair under ``A_h``; here the corners of the data's
    bounding box (``sum_d a_hd range_d^2``, an upper bound that keeps ``f_C >= 0``). Initialisation: the
    neighbourhoods of the must-link closure, then weighted farthest-first over their means (k-means++ seeding fills
    the rest when there are fewer neighbourhoods than clusters). Each iteration assigns the rows one by one in a
    random order (ICM) given the current labels, then sets each centre to its members' mean and each metric
    ``a_hd = |X_h| / (sum_i (x_id - mu_hd)^2 + violation terms)`` (the M-step of the paper, diagonal case).

    This is a reference for the [TV] tables: it holds the data in memory and refuses more than ``max_samples`` rows.
    Use :class:`dclust.RDPMeans` (distributed, soft links) or :class:`dclust.GMPR` at scale.

    Parameters
    ----------
    n_clusters : int, default 8
    metric : {"per_cluster", "shared", "none"}, default "per_cluster"
        A diagonal metric per cluster, one shared by all clusters, or none (``A = I``: PCK-means).
    max_iter : int, default 100
        ICM sweeps; stops earlier when no row changes cluster.
    max_samples : int, default 20_000
        Largest number of rows accepted (each sweep visits the rows one at a time).
    random_state : int, Generator or None

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
    cluster_centers_ : ndarray (n_clusters, n_features)
    metric_weights_ : ndarray (n_clusters, n_features)
        Diagonal of every cluster's metric ``A_h``.
    objective_ : float
        The objective above at the end.
    n_violated_ : ndarray (2,)
        Must-links split and cannot-links joined by ``labels_``.
    n_iter_ : int
    objective_history_ : list of float
        The objective after every iteration.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> X = np.array([[0.0], [1.0], [10.0], [11.0]])
    >>> G = dclust.ConstraintGraph.from_pairs([1], [2], [True], n_samples=4)
    >>> m = dclust.MPCKMeans(n_clusters=2, metric="none", random_state=0).fit(X, constraints=G)
    >>> bool(m.labels_[1] == m.labels_[2])
    True

    References
    ----------
    M. Bilenko, S. Basu and R. J. Mooney. Integrating constraints and metric learning in semi-supervised
    clustering. ICML 2004. Used as a baseline by D. Khashabi et al., Clustering with side information ([TV]).
    """

    _cost_note = "an in-memory reference that visits one row at a time"
    _parameter_constraints = {
        "n_clusters": [Interval("int", 1, None)],
        "metric": [Options(("per_cluster", "shared", "none"))],
        "max_iter": [Interval("int", 1, None)],
        "max_samples": [Interval("int", 1, None)],
        "random_state": [SEED],
    }

    def __init__(
        self, *, n_clusters: int = 8, metric: Literal["per_cluster", "shared", "none"] = "per_cluster",
        max_iter: int = 100, max_samples: int = 20_000, random_state: SeedLike = None,
    ) -> None:
        self.n_clusters, self.metric, self.max_iter, self.max_samples = n_clusters, metric, max_iter, max_samples
        self.random_state = random_state

    def _fit_links(self, Xn: np.ndarray, i: np.ndarray, j: np.ndarray, must: np.ndarray, constraints: Any,
                   rng: np.random.Generator) -> None:
        n, d = Xn.shape
        k = self.n_clusters
        centers = _initial_centers(Xn, i[must], j[must], k, rng)
        A = np.ones((k, d))
        range2 = (Xn.max(axis=0) - Xn.min(axis=0)) ** 2
        indptr, nbr, is_must = symmetric_links(n, i, j, must)
        labels = ((Xn[:, None, :] - centers[None]) ** 2).sum(axis=2).argmin(axis=1).astype(np.int64)
        scale = np.maximum(Xn.var(axis=0), 1e-12)
        watch = Stopwatch()
        n_iter, trace = 0, []
        for it in range(self.max_iter):
            n_iter = it + 1
            logdet = np.log(A).sum(axis=1)
            changed = mpck_sweep(Xn, centers, A, logdet, A @ range2, rng.permutation(n).astype(np.int64), indptr,
                                 nbr, is_must, labels)
            counts = np.bincount(labels, minlength=k)
            full = counts > 0
            sums = np.zeros((k, d))
            np.add.at(sums, labels, Xn)
            centers[full] = sums[full] / counts[full, None]
            if self.metric != "none":
                A = self._metric(Xn, labels, centers, counts, i, j, must, range2, scale, A)
            trace.append(self._objective(Xn, labels, centers, A, i, j, must, range2))
            emit(ProgressEvent("MPCKMeans", "iter", n_iter, trace[-1], k, watch.lap()))
            if changed == 0 and it > 0:
                break
        self.labels_ = labels
        self.cluster_centers_ = centers
        self.metric_weights_ = A
        self.objective_ = self._objective(Xn, labels, centers, A, i, j, must, range2)
        self._set_violations(i, j, must)
        self.n_iter_ = n_iter
        self.objective_history_ = trace
        emit(ProgressEvent("MPCKMeans", "done", n_iter, self.objective_, k, 0.0))

    def _metric(self, X: np.ndarray, labels: np.ndarray, centers: np.ndarray, counts: np.ndarray, i: np.ndarray,
                j: np.ndarray, must: np.ndarray, range2: np.ndarray, scale: np.ndarray, A_old: np.ndarray
                ) -> np.ndarray:
        """The diagonal metrics of the M-step (denominators floored at 1e-6 of each feature's variance)."""
        k, d = centers.shape
        den = np.zeros((k, d))
        np.add.at(den, labels, (X - centers[labels]) ** 2)
        diff2 = (X[i] - X[j]) ** 2
        split = must & (labels[i] != labels[j])
        np.add.at(den, labels[i[split]], 0.5 * diff2[split])
        np.add.at(den, labels[j[split]], 0.5 * diff2[split])
        joined = ~must & (labels[i] == labels[j])
        np.add.at(den, labels[i[joined]], np.maximum(range2 - diff2[joined], 0.0))
        num = counts.astype(np.float64)
        if self.metric == "shared":
            den = np.broadcast_to(den.sum(axis=0), (k, d))
            num = np.full(k, num.sum())
        A = A_old.copy()
        full = num > 0
        A[full] = num[full, None] / np.maximum(den[full], 1e-6 * scale)
        return A

    @staticmethod
    def _objective(X: np.ndarray, labels: np.ndarray, centers: np.ndarray, A: np.ndarray, i: np.ndarray,
                   j: np.ndarray, must: np.ndarray, range2: np.ndarray) -> float:
        data = float((A[labels] * (X - centers[labels]) ** 2).sum() - np.log(A[labels]).sum())
        diff2 = (X[i] - X[j]) ** 2
        li, lj = labels[i], labels[j]
        split = must & (li != lj)
        pen = 0.5 * ((A[li[split]] + A[lj[split]]) * diff2[split]).sum()
        joined = ~must & (li == lj)
        pen += np.maximum((A[li[joined]] * (range2 - diff2[joined])).sum(axis=1), 0.0).sum()
        return data + float(pen)

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Cluster of new rows under the learned metrics (``argmin_h ||x - mu_h||^2_{A_h} - log det A_h``; links
        are not used). Returns an ndarray for numpy input, a lazy dask array for dask/zarr input."""
        arr, info = self._new_input(X, "cluster_centers_")
        labels = map_labels(_metric_labels, arr, centers=self.cluster_centers_, weights=self.metric_weights_)
        return wrap_output(labels, info, "labels")


def _metric_labels(Xb: npt.NDArray[Any], *, offset: int, block_index: int, centers: np.ndarray, weights: np.ndarray
                   ) -> np.ndarray:
    Xb = np.asarray(Xb, dtype=np.float64)
    cost = np.stack([(w * (Xb - c) ** 2).sum(axis=1) - np.log(w).sum() for c, w in zip(centers, weights)], axis=1)
    labels: np.ndarray = cost.argmin(axis=1).astype(np.int32)
    return labels


def _initial_centers(X: np.ndarray, mi: np.ndarray, mj: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Centres from the must-link neighbourhoods: weighted farthest-first over the neighbourhood means (the first
    is the largest neighbourhood); with fewer neighbourhoods than ``k`` (counting only those of two or more rows),
    all of them and k-means++ seeds over the rows for the rest."""
    n = X.shape[0]
    M = sp.coo_matrix((np.ones(mi.size), (mi, mj)), shape=(n, n))
    _, comp = connected_components(M, directed=False)
    size = np.bincount(comp).astype(np.float64)
    means = np.zeros((size.size, X.shape[1]))
    np.add.at(means, comp, X)
    means /= size[:, None]
    hoods = np.flatnonzero(size > 1)
    if hoods.size >= k:
        chosen = [int(hoods[np.argmax(size[hoods])])]
        dmin = ((means[hoods] - means[chosen[0]]) ** 2).sum(axis=1)
        for _ in range(1, k):
            nxt = int(hoods[np.argmax(size[hoods] * dmin)])
            chosen.append(nxt)
            dmin = np.minimum(dmin, ((means[hoods] - means[nxt]) ** 2).sum(axis=1))
        return means[chosen].copy()
    seeds = [means[h] for h in hoods]
    rest = kmeans_plusplus(X, np.ones(n), k, rng)
    for c in rest:
        if len(seeds) == k:
            break
        seeds.append(c)
    return np.ascontiguousarray(np.array(seeds), dtype=np.float64)
