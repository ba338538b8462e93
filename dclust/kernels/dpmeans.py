"""DP-means kernels: the serial assignment step (driver-side prefix and OCC validation; the per-block proposal step
is :func:`dclust.kernels.distances.epoch_stats`), and a plain serial reference implementation used as the test
oracle."""

from __future__ import annotations

import numba
import numpy as np

from .distances import row_sq_dist

__all__ = ["serial_assign", "dpmeans_reference"]


@numba.njit(nogil=True, cache=True)
def _serial_assign(P, C, lam):
    m, d = P.shape
    k0 = C.shape[0]
    centers = np.empty((k0 + m, d))
    centers[:k0] = C
    k = k0
    labels = np.empty(m, dtype=np.int64)
    dist = np.empty(m)
    for i in range(m):
        best = np.inf
        bk = -1
        for c in range(k):
            s = row_sq_dist(P, i, centers, c)
            if s < best:
                best = s
                bk = c
        if k == 0 or best > lam:  # T3: open only when strictly better
            centers[k] = P[i]
            labels[i] = k
            dist[i] = 0.0
            k += 1
        else:
            labels[i] = bk
            dist[i] = best
    return labels, dist, centers[k0:k].copy()


def serial_assign(P: np.ndarray, C: np.ndarray, lam: float):
    """Serial DP-means assignment of the rows of ``P`` in order, against ``C`` plus the centres it opens.

    Returns ``(labels, dist, new_centres)``: labels index ``C`` followed by the new centres.
    """
    P = np.ascontiguousarray(P, dtype=np.float64).reshape(-1, np.shape(C)[1] if np.ndim(C) == 2 else P.shape[1])
    C = np.ascontiguousarray(C, dtype=np.float64).reshape(-1, P.shape[1])
    return _serial_assign(P, C, float(lam))


def dpmeans_reference(X, lam, orders, *, init="mean", max_iter=100, sample_weight=None, max_clusters=None):
    """Serial DP-means (docs/algorithms.md 1.2), plain numpy and Python loops: the oracle of the tests.

    ``orders`` is one permutation (reused every pass) or a list with one permutation per pass. Ties go to the
    lowest centre index; a cluster opens only when every centre is strictly farther than ``lam`` (and, with
    ``max_clusters``, while fewer than ``max_clusters`` centres exist: capped DP-means, docs/algorithms.md 1.5).
    Returns ``(labels, centres, history)`` where history holds ``SSE + lam*K`` after each mean update.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    if isinstance(orders, np.ndarray) and orders.ndim == 1:
        orders = [orders]
    if init == "mean":
        centers = [np.average(X, axis=0, weights=w)]
        z = np.zeros(n, dtype=np.int64)
    else:
        centers = []
        z = np.full(n, -1, dtype=np.int64)
    history = []
    for p in range(max_iter):
        order = orders[min(p, len(orders) - 1)]
        new_z = z.copy()
        for i in order:
            d = [float(((X[i] - c) ** 2).sum()) for c in centers]
            if (max_clusters is None or len(centers) < max_clusters) and (not d or min(d) > lam):
                centers.append(X[i].copy())
                new_z[i] = len(centers) - 1
            else:
                new_z[i] = int(np.argmin(d))
        used = [c for c in range(len(centers)) if (new_z == c).any()]
        remap = {c: r for r, c in enumerate(used)}
        new_z = np.array([remap[c] for c in new_z])
        centers = [np.average(X[new_z == c], axis=0, weights=w[new_z == c]) if w[new_z == c].sum() > 0
                   else X[new_z == c].mean(axis=0) for c in range(len(used))]
        sse = sum(float((w[new_z == c] * ((X[new_z == c] - centers[c]) ** 2).sum(axis=1)).sum())
                  for c in range(len(used)))
        history.append(sse + lam * len(used))
        changed = not np.array_equal(new_z, z)
        z = new_z
        if not changed:
            break
    return z, np.array(centers), history
