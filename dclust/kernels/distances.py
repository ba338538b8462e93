"""Fused squared-distance + argmin (+ accumulate) kernels, with their plain-numpy twins.

Each numba kernel reads one block once: for every row it finds the nearest centre (squared Euclidean distance,
lowest index on ties) and adds the row to that cluster's running statistics, without any N x K temporary.
Inputs may be float32; every accumulator is float64. A row holding NaN or inf has no nearest centre; it is
counted in ``n_bad`` so the caller can name the block.
"""

from __future__ import annotations

import contextlib
import threading

import numba
import numpy as np

from .stats import _GOLDEN, _MIX1, _MIX2, ClusterStats

__all__ = [
    "nearest",
    "nearest_numpy",
    "assign_stats",
    "assign_stats_numpy",
    "scatter_about_means",
]

_JIT = dict(nogil=True, cache=True, error_model="numpy")


_FAST = dict(_JIT, fastmath={"reassoc", "contract", "arcp", "nsz"})  # keeps NaN/inf semantics

#: From this many features on, :func:`nearest` and :func:`assign_stats` use BLAS tiles of rows (measured faster
#: from D = 3 on); below, direct differences. The chosen distance is always recomputed exactly.
GEMM_MIN_FEATURES = 3
_GEMM_TILE = 256


@numba.njit(inline="always")
def _row_distances(X, i, CT, dist):
    """``dist[c] = ||X[i] - CT[:, c]||^2`` by direct differences, in float64."""
    dist[:] = 0.0
    for j in range(X.shape[1]):
        xj = np.float64(X[i, j])
        for c in range(CT.shape[1]):
            t = xj - CT[j, c]
            dist[c] += t * t


@numba.njit(inline="always")
def _argmin(dist):
    """Lowest index of the strict minimum (-1 when every entry is NaN or inf), and that minimum."""
    best = np.inf
    bk = -1
    for c in range(dist.shape[0]):
        if dist[c] < best:
            best = dist[c]
            bk = c
    return bk, best


def _nearest(X, C):
    if C.shape[0] == 0:
        return np.full(X.shape[0], -1, np.int32), np.full(X.shape[0], np.inf)
    return _fused(X, C, np.ones(X.shape[0]), 0)[:2]  # the assignment path of assign_stats, so labels agree


def nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre and its squared distance for every row of ``X``.

    Returns ``labels`` (int32, -1 for a non-finite row) and ``dist`` (float64, NaN for a non-finite row).
    """
    return _nearest(_float_block(X), np.ascontiguousarray(C, dtype=np.float64))


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


@numba.njit(inline="always")
def _key(i):
    """splitmix64 of a global row index; equals :func:`dclust.kernels.stats.point_keys`."""
    z = np.uint64(i) * _GOLDEN + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


@numba.njit(**_FAST)
def _assign_accumulate(X, C, CT, m2ct, cc, w, offset, use_gemm, tile):
    """One read of the block: nearest centre of every row, folded at once into weight / sums / cost / fingerprint.

    The direct path computes ``sum_j (x_j - c_j)^2`` for all centres; the GEMM path gets ``-2 x.c + ||c||^2`` from
    one BLAS call per tile of rows and recomputes the chosen distance exactly. A row with NaN or inf gets label -1.
    """
    n, d = X.shape
    k = C.shape[0]
    labels = np.full(n, -1, dtype=np.int32)
    mind = np.full(n, np.nan)
    weight = np.zeros(k)
    sums = np.zeros((k, d))
    fp = np.zeros(k, dtype=np.uint64)
    dist = np.empty(k)
    cost = 0.0
    n_bad = 0
    for s in range(0, n, tile):
        e = min(n, s + tile)
        if use_gemm:
            G = np.dot(X[s:e], m2ct)
        for i in range(s, e):
            if use_gemm:
                for c in range(k):
                    dist[c] = G[i - s, c] + cc[c]
            else:
                _row_distances(X, i, CT, dist)
            bk, best = _argmin(dist)
            if bk >= 0 and use_gemm:
                best = 0.0
                for j in range(d):
                    t = np.float64(X[i, j]) - C[bk, j]
                    best += t * t
            if bk < 0 or not np.isfinite(best):
                n_bad += 1
                continue
            labels[i] = bk
            mind[i] = best
            wi = w[i]
            weight[bk] += wi
            cost += wi * best
            fp[bk] += _key(offset + i)
            for j in range(d):
                sums[bk, j] += wi * np.float64(X[i, j])
    mean = np.zeros((k, d))
    for c in range(k):
        if weight[c] > 0:
            for j in range(d):
                mean[c, j] = sums[c, j] / weight[c]
    return labels, mind, weight, mean, fp, cost, n_bad


@numba.njit(**_JIT)
def _accumulate(X, labels, mind, w, k, offset):
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
        fp[c] += _key(offset + i)
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


def _finish(X, labels, w, weight, mean, fp, cost, n_bad, block_index) -> ClusterStats:
    scatter = scatter_about_means(X, labels, w, mean)
    return ClusterStats(weight, mean, scatter, cost, fp, X.shape[0], block_index if n_bad else -1)


def stats_from_assignment(X, labels, mind, sample_weight, n_clusters, offset, block_index=0) -> ClusterStats:
    """Fold rows whose labels and distances are known into a :class:`ClusterStats` (fused numba loops)."""
    w = _weights(X.shape[0], sample_weight)
    weight, mean, fp, cost, n_bad = _accumulate(X, labels, mind, w, n_clusters, np.uint64(offset))
    return _finish(X, labels, w, weight, mean, fp, cost, n_bad, block_index)


_blas = {"lock": threading.Lock(), "users": 0, "limiter": None, "controller": None}


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS limited to one thread while any kernel in this process is inside (the tiles are small and every Dask
    worker thread already runs a kernel; nested BLAS threads would only oversubscribe the cores). Reference-counted,
    so concurrent kernels in several threads restore the user's setting exactly once, when the last one leaves."""
    with _blas["lock"]:
        if _blas["users"] == 0:
            if _blas["controller"] is None:
                from threadpoolctl import ThreadpoolController

                _blas["controller"] = ThreadpoolController()
            _blas["limiter"] = _blas["controller"].limit(limits=1, user_api="blas")
        _blas["users"] += 1
    try:
        yield
    finally:
        with _blas["lock"]:
            _blas["users"] -= 1
            if _blas["users"] == 0:
                _blas["limiter"].restore_original_limits()
                _blas["limiter"] = None


def _float_block(X) -> np.ndarray:
    X = np.asarray(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return np.ascontiguousarray(X)


def _fused(X, C, w, offset):
    """Run :func:`_assign_accumulate` on a float block with >= 1 centre: BLAS tiles from GEMM_MIN_FEATURES on."""
    use_gemm = X.shape[1] >= GEMM_MIN_FEATURES
    m2ct = np.ascontiguousarray(-2.0 * C.T, dtype=X.dtype)
    cc = (C * C).sum(axis=1)
    tile = _GEMM_TILE if use_gemm else max(X.shape[0], 1)
    with _one_blas_thread() if use_gemm else contextlib.nullcontext():
        return _assign_accumulate(X, C, np.ascontiguousarray(C.T), m2ct, cc, w, np.uint64(offset), use_gemm, tile)


def assign_stats(X, C, sample_weight=None, *, offset: int = 0, block_index: int = 0):
    """Assign every row of one block to its nearest centre and fold it into :class:`ClusterStats`.

    One fused read of the block (distances, argmin, weights, sums, cost, fingerprint) plus one for the scatter.
    Returns ``(stats, labels, dist)``; ``labels``/``dist`` are O(n) vectors of the block, never n x K.
    """
    X = _float_block(X)
    C = np.ascontiguousarray(C, dtype=np.float64)
    n, k = X.shape[0], C.shape[0]
    if k == 0:
        labels, mind = _nearest(X, C)
        return stats_from_assignment(X, labels, mind, sample_weight, 0, offset, block_index), labels, mind
    w = _weights(n, sample_weight)
    labels, mind, weight, mean, fp, cost, n_bad = _fused(X, C, w, offset)
    return _finish(X, labels, w, weight, mean, fp, cost, n_bad, block_index), labels, mind


def assign_stats_numpy(X, C, sample_weight=None, *, offset: int = 0):
    """Plain-numpy twin of :func:`assign_stats` (the test oracle)."""
    labels, mind = nearest_numpy(X, C)
    w = _weights(np.shape(X)[0], sample_weight)
    cost = float((w * mind)[labels >= 0].sum())
    stats = ClusterStats.from_labels(X, labels, C.shape[0], w, cost=cost, offset=offset)
    return stats, labels, mind
