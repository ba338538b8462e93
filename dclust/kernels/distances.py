"""Fused squared-distance + argmin (+ accumulate) kernels, with their plain-numpy twins.

Each numba kernel reads one block once: for every row it finds the nearest centre (squared Euclidean distance,
lowest index on ties) and adds the row to that cluster's running statistics, without any N x K temporary.
Inputs may be float32; every accumulator is float64. A row holding NaN or inf has no nearest centre; it is
counted in ``n_bad`` so the caller can name the block.
"""

from __future__ import annotations

import numba
import numpy as np

from .stats import ClusterStats, point_keys

__all__ = [
    "nearest",
    "nearest_numpy",
    "assign_stats",
    "assign_stats_numpy",
    "scatter_about_means",
]

_JIT = dict(nogil=True, cache=True, error_model="numpy")


_FAST = dict(_JIT, fastmath={"reassoc", "contract", "arcp", "nsz"})  # keeps NaN/inf semantics

#: Above this many multiply-adds per row (D x K), distances come from one float GEMM per tile of rows.
GEMM_THRESHOLD = 1024
_TILE = 4096


@numba.njit(**_FAST)
def _nearest_direct(X, CT):
    n, d = X.shape
    k = CT.shape[1]
    labels = np.full(n, -1, dtype=np.int32)
    mind = np.full(n, np.inf)
    dist = np.empty(k)
    for i in range(n):
        dist[:] = 0.0
        for j in range(d):
            xj = np.float64(X[i, j])
            for c in range(k):
                t = xj - CT[j, c]
                dist[c] += t * t
        best = np.inf
        bk = -1
        for c in range(k):
            if dist[c] < best:
                best = dist[c]
                bk = c
        if bk >= 0:
            labels[i] = bk
            mind[i] = best
        elif k > 0:
            mind[i] = np.nan
    return labels, mind


@numba.njit(**_JIT)
def _exact_dist(X, C, labels):
    """Recompute the squared distance to the chosen centre by direct differences (float64)."""
    n, d = X.shape
    out = np.empty(n)
    for i in range(n):
        c = labels[i]
        if c < 0:
            out[i] = np.nan
            continue
        s = 0.0
        for j in range(d):
            t = np.float64(X[i, j]) - C[c, j]
            s += t * t
        out[i] = s
    return out


def _nearest_gemm(X, C):
    """Tiles of rows: ``-2 X C^T + ||C||^2`` by GEMM in X's precision, argmin, exact distance recomputed."""
    n = X.shape[0]
    Cx = C.astype(X.dtype if X.dtype in (np.float32, np.float64) else np.float64)
    m2ct = -2.0 * Cx.T
    cc = (C * C).sum(axis=1).astype(Cx.dtype)
    labels = np.empty(n, dtype=np.int32)
    for s in range(0, n, _TILE):
        xt = X[s : s + _TILE]
        d = xt @ m2ct
        d += cc
        labels[s : s + _TILE] = np.argmin(d, axis=1)
        bad = ~np.isfinite(d).all(axis=1)
        if bad.any():
            labels[s : s + _TILE][bad] = -1
    return labels, _exact_dist(X, C, labels)


def _nearest(X, C):
    if C.shape[0] == 0:
        return np.full(X.shape[0], -1, np.int32), np.full(X.shape[0], np.inf)
    if X.shape[1] * C.shape[0] > GEMM_THRESHOLD:
        return _nearest_gemm(X, C)
    return _nearest_direct(X, np.ascontiguousarray(C.T))


def nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre and its squared distance for every row of ``X``.

    Returns ``labels`` (int32, -1 for a non-finite row) and ``dist`` (float64, NaN for a non-finite row).
    """
    return _nearest(np.ascontiguousarray(X), np.ascontiguousarray(C, dtype=np.float64))


def nearest_numpy(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain-numpy twin of :func:`nearest` (direct differences; the test oracle)."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    if C.shape[0] == 0:
        return np.full(X.shape[0], -1, np.int32), np.full(X.shape[0], np.inf)
    d = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    finite = np.isfinite(d).all(axis=1)
    labels = np.where(finite, np.argmin(np.where(np.isnan(d), np.inf, d), axis=1), -1).astype(np.int32)
    mind = np.where(finite, d[np.arange(X.shape[0]), np.maximum(labels, 0)], np.nan)
    return labels, mind


@numba.njit(**_JIT)
def scatter_about_means(X, labels, w, mean):
    """``sum w ||x - mean[label]||^2`` per cluster, skipping rows with label -1."""
    k, d = mean.shape
    out = np.zeros(k)
    for i in range(X.shape[0]):
        c = labels[i]
        if c < 0:
            continue
        s = 0.0
        for j in range(d):
            t = np.float64(X[i, j]) - mean[c, j]
            s += t * t
        out[c] += w[i] * s
    return out


@numba.njit(**_JIT)
def _accumulate(X, labels, mind, w, k, keys):
    n, d = X.shape
    weight = np.zeros(k)
    sums = np.zeros((k, d))
    fp = np.zeros(k, dtype=np.uint64)
    cost = 0.0
    n_bad = 0
    for i in range(n):
        c = labels[i]
        if c < 0:
            n_bad += 1
            continue
        wi = w[i]
        weight[c] += wi
        cost += wi * mind[i]
        fp[c] += keys[i]
        for j in range(d):
            sums[c, j] += wi * np.float64(X[i, j])
    mean = np.zeros((k, d))
    for c in range(k):
        if weight[c] > 0:
            for j in range(d):
                mean[c, j] = sums[c, j] / weight[c]
    return weight, mean, fp, cost, n_bad


def _weights(n: int, sample_weight) -> np.ndarray:
    if sample_weight is None:
        return np.ones(n)
    return np.ascontiguousarray(sample_weight, dtype=np.float64).reshape(n)


def stats_from_assignment(X, labels, mind, sample_weight, n_clusters, offset, block_index=0) -> ClusterStats:
    """Fold rows whose labels and distances are known into a :class:`ClusterStats` (fused numba loops)."""
    w = _weights(X.shape[0], sample_weight)
    keys = point_keys(np.arange(offset, offset + X.shape[0]))
    weight, mean, fp, cost, n_bad = _accumulate(X, labels, mind, w, n_clusters, keys)
    scatter = scatter_about_means(X, labels, w, mean)
    return ClusterStats(weight, mean, scatter, cost, fp, X.shape[0], block_index if n_bad else -1)


def assign_stats(X, C, sample_weight=None, *, offset: int = 0, block_index: int = 0):
    """Assign every row of one block to its nearest centre and fold it into :class:`ClusterStats`.

    Returns ``(stats, labels, dist)``; ``labels``/``dist`` are O(n) vectors of the block, never n x K.
    """
    X = np.ascontiguousarray(X)
    C = np.ascontiguousarray(C, dtype=np.float64)
    labels, mind = _nearest(X, C)
    stats = stats_from_assignment(X, labels, mind, sample_weight, C.shape[0], offset, block_index)
    return stats, labels, mind


def assign_stats_numpy(X, C, sample_weight=None, *, offset: int = 0):
    """Plain-numpy twin of :func:`assign_stats` (the test oracle)."""
    labels, mind = nearest_numpy(X, C)
    w = _weights(np.shape(X)[0], sample_weight)
    cost = float((w * mind)[labels >= 0].sum())
    stats = ClusterStats.from_labels(X, labels, C.shape[0], w, cost=cost, offset=offset)
    return stats, labels, mind
