"""GM-PR's link-aware initialisation (docs/algorithms.md 6.5, "link-aware variant"): class seeds from the must-link
closure.

The connected components of the must-links ("chunklets") are units that stay together. Their means, weighted by
their sizes, join a uniform sample of rows (weight 1) as the points of a small constrained k-means on the driver:
D^2 seeding weighted by size, then Lloyd sweeps in which every unit takes its nearest class that holds no unit it is
cannot-linked to (COP-style; the nearest class when none is free). The class centres it ends with seed GM-PR. Only
the linked rows (O(links) of them) and the sample reach the driver.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._dask.init import take_rows
from ..constraints import ConstraintGraph
from ..kernels.kmeans import kmeans_plusplus
from ..kernels.constrained import cop_sweep

__all__ = ["chunklet_centers"]


def chunklet_centers(arr: da.Array, constraints: ConstraintGraph, sample: np.ndarray, n_classes: int,
                     rng: np.random.Generator, n_sweeps: int = 10) -> np.ndarray:
    """Class centres (n_classes, n_features) seeded from the chunklets of ``constraints`` and the row ``sample``.

    Parameters
    ----------
    arr : dask array (n_samples, n_features)
    constraints : ConstraintGraph
        Links over the rows of ``arr`` (at least one).
    sample : ndarray (m, n_features)
        Rows drawn uniformly (the plain initialisation's sample), weight 1 each.
    n_classes : int
    rng : numpy.random.Generator
    n_sweeps : int, default 10
        Constrained Lloyd sweeps after the seeding.
    """
    i, j, sign = constraints.pairs()
    rows = np.unique(np.concatenate([i, j]))
    P_linked = take_rows(arr, rows)
    li, lj = np.searchsorted(rows, i), np.searchsorted(rows, j)
    must = sign > 0
    r = rows.size
    M = sp.coo_matrix((np.ones(int(must.sum())), (li[must], lj[must])), shape=(r, r))
    n_chunk, chunk = connected_components(M, directed=False)
    size = np.bincount(chunk, minlength=n_chunk).astype(np.float64)
    means = np.zeros((n_chunk, P_linked.shape[1]))
    np.add.at(means, chunk, P_linked)
    means /= size[:, None]
    units = np.concatenate([means, sample])
    w = np.concatenate([size, np.ones(sample.shape[0])])
    ca, cb = chunk[li[~must]], chunk[lj[~must]]
    keep = ca != cb  # a cannot-link inside a chunklet (noisy links) constrains nothing here
    ca, cb = ca[keep], cb[keep]
    A = sp.csr_matrix((np.ones(2 * ca.size), (np.concatenate([ca, cb]), np.concatenate([cb, ca]))),
                      shape=(units.shape[0], units.shape[0]))
    indptr, indices = A.indptr.astype(np.int64), A.indices.astype(np.int64)
    centers = kmeans_plusplus(units, w, n_classes, rng, n_local_trials=1)
    order = np.argsort(-w, kind="stable").astype(np.int64)  # large chunklets first: they claim their classes
    labels = np.empty(units.shape[0], dtype=np.int64)
    prev = None
    for _ in range(n_sweeps):
        cop_sweep(units, w, centers, order, indptr, indices, labels)
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, units * w[:, None])
        cnt = np.bincount(labels, weights=w, minlength=n_classes)
        full = cnt > 0
        centers[full] = sums[full] / cnt[full, None]
        if prev is not None and np.array_equal(prev, labels):
            break
        prev = labels.copy()
    return centers
