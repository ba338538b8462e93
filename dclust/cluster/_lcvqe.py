"""LCVQE (Pelleg and Baras 2007): k-means with a linear penalty for violated links, a baseline of the [TV] UCI
tables (docs/algorithms.md 10.3). An in-memory reference, size-guarded; not a scalable estimator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._fit import ProgressEvent, Stopwatch, emit
from .._registry import register
from .._validation import SEED, Interval
from ..kernels.constrained import lcvqe_assign
from ..kernels.kmeans import kmeans_plusplus
from ._base import CentroidMixin
from ._inmemory import _LinkedInMemory
from ..typing import SeedLike

__all__ = ["LCVQE"]


@register
class LCVQE(CentroidMixin, _LinkedInMemory):
    """LCVQE: Linear-Constrained Vector Quantization Error k-means with soft must/cannot links (a reference).

    Each iteration (Covoes, Hruschka and Ghosh 2013, section 2.3): every row takes its nearest centre; then each
    link in turn, given the labels so far. A violated must-link ``(i, j)`` in clusters ``a != b`` goes to the
    cheapest of "both in a", "both in b" (half the two squared distances each) or "keep the split", which adds the
    linear penalty ``(||x_i - mu_b||^2 + ||x_j - mu_a||^2) / 2`` and pulls each centre towards the other row
    (``x_j`` joins ``a``'s mean and ``x_i`` joins ``b``'s). A violated cannot-link moves the row farther from its
    centre to its nearest other centre (keeping the violation would cost that same distance on top, so moving is
    never dearer). Centres are the means of their rows plus the pulls. Stops when the labels repeat or after
    ``max_iter`` iterations; of ``n_init`` k-means++ starts the one with the lowest cost is kept. The links are
    visited in the graph's (i, j) order every iteration.

    This is a reference for the [TV] tables: it holds the data in memory and refuses more than ``max_samples``
    rows. Use :class:`dclust.RDPMeans` (distributed, soft links) or :class:`dclust.GMPR` at scale.

    Parameters
    ----------
    n_clusters : int, default 8
    n_init : int, default 1
        Seeded k-means++ starts; the lowest final cost is kept.
    max_iter : int, default 100
    max_samples : int, default 100_000
        Largest number of rows accepted.
    random_state : int, Generator or None

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
    cluster_centers_ : ndarray (n_clusters, n_features)
    objective_ : float
        The LCVQE cost (half squared distances plus the penalties of kept must-link violations).
    n_violated_ : ndarray (2,)
        Must-links split and cannot-links joined by ``labels_``.
    n_iter_ : int
    objective_history_ : list of float
        The cost after every iteration of the kept run.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> X = np.array([[0.0], [0.2], [0.4], [10.0], [10.2]])
    >>> G = dclust.ConstraintGraph.from_pairs([0], [2], [False], n_samples=5)
    >>> m = dclust.LCVQE(n_clusters=3, random_state=0).fit(X, constraints=G)
    >>> bool(m.labels_[0] != m.labels_[2])
    True

    References
    ----------
    D. Pelleg and D. Baras. K-means with large and noisy constraint sets. ECML 2007. T. F. Covoes, E. R. Hruschka
    and J. Ghosh. A study of k-means-based algorithms for constrained clustering. Intelligent Data Analysis 17(3),
    2013. Used as a baseline by D. Khashabi et al., Clustering with side information ([TV]).
    """

    _cost_note = "an in-memory reference"
    _parameter_constraints = {
        "n_clusters": [Interval("int", 1, None)],
        "n_init": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "max_samples": [Interval("int", 1, None)],
        "random_state": [SEED],
    }

    def __init__(
        self, *, n_clusters: int = 8, n_init: int = 1, max_iter: int = 100, max_samples: int = 100_000,
        random_state: SeedLike = None,
    ) -> None:
        self.n_clusters, self.n_init, self.max_iter, self.max_samples = n_clusters, n_init, max_iter, max_samples
        self.random_state = random_state

    def _fit_links(self, Xn: np.ndarray, i: np.ndarray, j: np.ndarray, must: np.ndarray, constraints: Any,
                   rng: np.random.Generator) -> None:
        n = Xn.shape[0]
        k = self.n_clusters
        watch = Stopwatch()
        best = None
        for run in range(self.n_init):
            centers = kmeans_plusplus(Xn, np.ones(n), k, rng)
            labels = np.empty(n, dtype=np.int64)
            sums, counts = np.zeros((k, Xn.shape[1])), np.zeros(k)
            prev, cost, it, trace = None, np.inf, 0, []
            for it in range(self.max_iter):
                cost = lcvqe_assign(Xn, centers, i, j, must, labels, sums, counts)
                full = counts > 0
                centers[full] = sums[full] / counts[full, None]
                trace.append(float(cost))
                emit(ProgressEvent("LCVQE", "iter", it + 1, cost, k, watch.lap(), {"init": run}))
                if prev is not None and np.array_equal(prev, labels):
                    break
                prev = labels.copy()
            if best is None or cost < best[0]:
                best = (cost, labels.copy(), centers.copy(), it + 1, trace)
        assert best is not None  # n_init >= 1
        cost, labels, centers, n_iter, trace = best
        self.labels_ = labels
        self.cluster_centers_ = centers
        self.objective_ = float(cost)
        self._set_violations(i, j, must)
        self.n_iter_ = int(n_iter)
        self.objective_history_ = trace
        emit(ProgressEvent("LCVQE", "done", self.n_iter_, self.objective_, k, 0.0))

    fit_predict = _LinkedInMemory.fit_predict  # with constraints=, not ClusterMixin's
