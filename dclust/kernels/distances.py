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

from .simd import transpose_rows, wide_vectors
from .stats import _GOLDEN, _MIX1, _MIX2, ClusterStats, point_keys

__all__ = [
    "nearest",
    "nearest_numpy",
    "assign_stats",
    "block_stats",
    "epoch_stats",
    "order_keys",
    "seed_mix",
    "assign_stats_numpy",
    "scatter_about_means",
]

_JIT = dict(nogil=True, cache=True, error_model="numpy")


_FAST = dict(_JIT, fastmath={"reassoc", "contract", "arcp", "nsz"})  # keeps NaN/inf semantics
#: Index type of the per-row and per-pair loops of the kernels (k-means, D-Means, GM-PR): numba wraps a negative
#: signed index around (a sign test and an add per access, which LLVM cannot drop for indices read from arrays); an
#: unsigned one is used as it is (5-45 % of those loops' time in interleaved runs). Only for indices that are never
#: negative.
_U = np.uint64


def nearest(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre and its squared distance for every row of ``X`` (lowest index on ties), in memory.

    Returns ``labels`` (int32, -1 for a non-finite row) and ``dist`` (float64, NaN for a non-finite row).

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster import nearest
    >>> labels, dist = nearest(np.array([[0.0, 1.0], [9.0, 9.0]]), np.array([[0.0, 0.0], [10.0, 10.0]]))
    >>> labels.tolist(), dist.tolist()
    ([0, 1], [1.0, 2.0])
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


@numba.njit(inline="always")
def _tile_keys(out, offset, s, m, mix):
    """``out[r] = _key((offset + s + r) ^ mix)`` for the ``m`` rows of a tile from local row ``s``, in one loop the
    compiler vectorizes: ``mix = 0`` gives the rows' keys (fingerprints), a seed's mix its order keys."""
    for r in range(m):
        out[r] = _key((offset + np.uint64(s + r)) ^ mix)


@numba.njit(inline="always")
def row_sq_dist(X, i, C, k):
    """``||X[i] - C[k]||^2`` in float64, feature by feature: the row-to-centre distance of the serial kernels."""
    s = 0.0
    for j in range(X.shape[1]):
        u = np.float64(X[i, j]) - C[k, j]
        s += u * u
    return s


@numba.njit(inline="always")
def row_diff_sq(X, i, C, k, t):
    """``t = X[i] - C[k]`` (float64) and returns ``||t||^2``: the distance of a row whose difference is folded
    into ``w (x - c)`` accumulators next."""
    q = 0.0
    for j in range(X.shape[1]):
        t[j] = np.float64(X[i, j]) - C[k, j]
        q += t[j] * t[j]
    return q


@numba.njit(inline="always")
def fold_row(weight, cost_k, fp, delta, k, wi, q, key, t):
    """Folds one row into slot ``k``'s running accumulators: weight ``wi``, cost ``wi q``, fingerprint ``key``
    and ``wi t`` with ``t = x - c`` (as :func:`row_diff_sq` leaves it)."""
    weight[k] += wi
    cost_k[k] += wi * q
    fp[k] += key
    for j in range(t.shape[0]):
        delta[k, j] += wi * t[j]


#: Rows per tile of the assignment kernel (the tile's distances stay in L1/L2 cache, as in scikit-learn).
_TILE = 256
#: Up to this many features the kernel transposes a tile itself; beyond, BLAS reads it transposed (CPU time per
#: tile, 2-core Xeon: the same at D = 16-32; at D = 8 the own transpose is 1.25 x faster, at D = 64 BLAS 2 x).
_NARROW = 32


@numba.njit(inline="always", **_JIT)
def _tile_buffers(X, k, m):
    """``(G, T, rows)`` for :func:`_tile_products` on tiles of ``m`` rows of ``X`` against ``k`` candidates."""
    d = X.shape[1]
    rows = np.empty(m, dtype=np.intp)
    if d <= _NARROW:
        return np.empty((k, m), dtype=X.dtype), np.empty((d, m), dtype=X.dtype), rows
    return np.empty((k, m), dtype=X.dtype), np.empty((m, d), dtype=X.dtype), rows


@numba.njit(inline="always", **_JIT)
def _tile_products(X, s, m, o, Ck, T, G, rows):
    """``G = Ck @ (X[s : s + m] - o).T`` (candidate-major, ``(k, m)``) in ``X``'s dtype, through the buffer ``T``
    (``rows``: room for the tile's row indices)."""
    d = X.shape[1]
    if d <= _NARROW:  # the centered tile transposed here, in registers (cheap for few columns) ...
        for r in range(m):
            rows[r] = s + r
        transpose_rows(X, rows, m, o, T)
        np.dot(Ck, T, G)
    else:  # ... or centred in place and transposed by BLAS (T.T is T in Fortran order, no copy)
        for r in range(m):
            for j in range(d):
                T[r, j] = X[s + r, j] - o[j]
        np.dot(Ck, T.T, G)


@numba.njit(inline="always", **_JIT)
def _tile_argmin(G, cc, c0, c1, m, best, nearest):
    """Per row ``r < m`` of a tile, the candidate ``c`` in ``[c0, c1)`` of least ``G[c, r] + cc[c]`` (the lowest on
    ties; -1 and inf for an empty range), branch-free over contiguous rows."""
    for r in range(m):
        best[r] = np.inf
        nearest[r] = -1
    for c in range(c0, c1):
        cv = cc[c]
        for r in range(m):
            v = G[c, r] + cv
            closer = v < best[r]
            nearest[r] = c if closer else nearest[r]
            best[r] = v if closer else best[r]


@numba.njit(**_FAST)
def _lloyd_block(X, o, Ck, cc, C, w, has_w, offset, labels, mind, weight, delta, cost_k, fp, ranged, seed_mix,
                 lo, hi, lam, proposals, skip):
    """One read of the block: nearest centre of every row, folded at once into the per-cluster accumulators.

    The candidate distances ``||c - o||^2 - 2 (x - o).(c - o)`` come from one BLAS product per tile of rows,
    ``Ck (K, D) @ (X_tile - o).T (D, rows)``, in the block's dtype (float32 for float32 data, as scikit-learn's
    Lloyd), about the centres' mean ``o`` so that data far from the origin keeps its digits. The product is laid
    out centre by centre (K x rows), so the argmin runs over contiguous rows, branch-free and vectorised (lowest
    index on ties); the chosen distance is then recomputed exactly in float64.
    ``delta`` accumulates ``w (x - c)`` (not ``w x``), so the new means ``c + delta / weight`` keep their digits for
    data with a large offset, and ``cost_k`` the exact ``w ||x - c||^2`` per cluster, from which the scatter about
    the new mean follows without a second read. ``labels``/``mind`` are written only when they are not empty. A
    row with NaN or inf gets no cluster (label -1, distance NaN) and is counted in the returned ``n_bad``.

    DP-means epochs (``ranged``): only rows whose order key (:func:`order_keys`) lies in ``[lo, hi]`` are taken,
    and a row whose nearest centre is farther than ``lam`` is not accumulated but its local index is written to
    ``proposals`` (the first ``len(proposals)`` of them; the count goes on). The rows listed in ``skip`` (sorted
    local indices; RDP-means' linked rows) are not taken. Returns ``(n_bad, n_taken, n_proposed)``.
    """
    wide_vectors()
    n, d = X.shape
    k = Ck.shape[0]
    want_rows = labels.shape[0] > 0
    tile = min(n, _TILE)
    G, T, rows = _tile_buffers(X, k, tile)
    best = np.empty(tile, dtype=X.dtype)
    nearest = np.empty(tile, dtype=np.int64)
    keys = np.empty(tile, dtype=np.uint64)  # the tile's row keys (fingerprint), made in one vectorized loop
    order = np.empty(tile if ranged else 0, dtype=np.uint64)  # and, for an epoch, its order keys
    t = np.empty(d)
    n_bad = 0
    n_taken = 0
    n_prop = 0
    n_skip = skip.shape[0]
    p_skip = 0
    for s in range(0, n, _TILE):
        m = min(n, s + _TILE) - s
        if m < tile:  # the last, short tile (np.dot wants contiguous operands)
            G, T, rows = _tile_buffers(X, k, m)
        _tile_products(X, s, m, o, Ck, T, G, rows)
        _tile_argmin(G, cc, 0, k, m, best, nearest)
        _tile_keys(keys, offset, s, m, np.uint64(0))
        if ranged:
            _tile_keys(order, offset, s, m, seed_mix)
        for r in range(m):
            i = s + r
            if p_skip < n_skip and skip[p_skip] == i:
                p_skip += 1
                continue
            if ranged and (order[r] < lo or order[r] > hi):
                continue
            n_taken += 1
            if nearest[r] < 0:
                n_bad += 1
                continue
            ui, ub = _U(i), _U(nearest[r])  # unsigned: no negative-index wraparound per access
            q = 0.0
            for j in range(d):
                tj = np.float64(X[ui, j]) - C[ub, j]
                t[j] = tj
                q += tj * tj
            if not np.isfinite(q):
                n_bad += 1
                continue
            if q > lam:
                if n_prop < proposals.shape[0]:
                    proposals[n_prop] = i
                n_prop += 1
                continue
            wi = w[ui] if has_w else 1.0
            weight[ub] += wi
            cost_k[ub] += wi * q
            fp[ub] += keys[r]
            for j in range(d):
                delta[ub, j] += wi * t[j]
            if want_rows:
                labels[ui] = ub
                mind[ui] = q
    return n_bad, n_taken, n_prop


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
    """BLAS limited to one thread while any caller in this process is inside (every Dask worker thread already runs
    a kernel; nested BLAS threads would only oversubscribe the cores). Reference-counted, so concurrent callers in
    several threads restore the user's setting exactly once, when the last one leaves."""
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


_NO_RANGE = (False, np.uint64(0), np.uint64(0), np.uint64(0))
_FULL_RANGE = (0, 2**64 - 1)
#: Proposals a block expects at most in an epoch (a larger count reruns the block with room for every row).
_PROPOSAL_ROOM = 1024
_NO_SKIP = np.zeros(0, np.int64)


def _lloyd(X, C, sample_weight, offset, block_index, want_rows, key_range=_NO_RANGE, lam=np.inf, skip=_NO_SKIP):
    """Run :func:`_lloyd_block` on a float block with >= 1 centre; ``(stats, labels, dist, proposals)``."""
    n, d = X.shape
    k = C.shape[0]
    o = C.mean(axis=0)
    Co = C - o
    Ck = np.ascontiguousarray(-2.0 * Co, dtype=X.dtype)
    cc = (Co * Co).sum(axis=1).astype(X.dtype)
    has_w = sample_weight is not None
    w = _weights(n, sample_weight) if has_w else np.empty(0)
    m = n if want_rows else 0
    labels = np.full(m, -1, dtype=np.int32)
    mind = np.full(m, np.nan)
    room = min(n, _PROPOSAL_ROOM) if np.isfinite(lam) else 0
    while True:
        proposals = np.empty(room, dtype=np.int64)
        weight, delta, cost_k = np.zeros(k), np.zeros((k, d)), np.zeros(k)
        fp = np.zeros(k, dtype=np.uint64)
        with _one_blas_thread():
            n_bad, n_taken, n_prop = _lloyd_block(X, o.astype(X.dtype), Ck, cc, C, w, has_w, np.uint64(offset),
                                                  labels, mind, weight, delta, cost_k, fp, *key_range, float(lam),
                                                  proposals, skip)
        if n_prop <= room:
            break
        room = n  # more proposals than expected: once more with room for every row
    safe = np.where(weight > 0, weight, 1.0)
    shift = delta / safe[:, None]
    mean = np.where(weight[:, None] > 0, C + shift, 0.0)
    scatter = np.maximum(cost_k - weight * (shift * shift).sum(axis=1), 0.0)
    stats = ClusterStats(weight, mean, scatter, float(cost_k.sum()), fp, n_taken, block_index if n_bad else -1)
    return stats, labels, mind, proposals[:n_prop]


def order_keys(seed_mix: int, global_index: np.ndarray) -> np.ndarray:
    """The order keys of rows (uint64): serial DP-means visits rows by increasing key. A function of the seed and
    the global row index only, so the order, and the model, do not depend on the chunking (``seed_mix`` comes from
    :func:`seed_mix`)."""
    return point_keys(np.asarray(global_index, dtype=np.uint64) ^ np.uint64(seed_mix))


def seed_mix(seed: int) -> int:
    """The 64-bit mask of a seed's order keys."""
    return int(point_keys(np.array([seed % 2**64], dtype=np.uint64))[0])


def epoch_stats(X, C, lam: float, sample_weight=None, *, offset: int, block_index: int, mix: int, lo: int,
                hi: int, skip=None) -> tuple[ClusterStats, np.ndarray]:
    """One DP-means epoch on one block: the rows whose order key is in ``[lo, hi]`` (inclusive) that are within
    ``lam`` of a centre of ``C`` are folded into statistics; the others are returned as proposals (local row
    indices, in row order). With no centre every taken finite row is a proposal. ``skip`` (sorted local row
    indices) lists rows that are not taken at all."""
    X = _float_block(X)
    C = np.ascontiguousarray(C, dtype=np.float64).reshape(-1, X.shape[1])
    if C.shape[0] == 0:
        keys = order_keys(mix, np.arange(offset, offset + X.shape[0]))
        taken = (keys >= np.uint64(lo)) & (keys <= np.uint64(hi))
        if skip is not None:
            taken[skip] = False
        finite = np.isfinite(X).all(axis=1)
        stats = ClusterStats.identity(0, X.shape[1])
        stats.n_rows = int(taken.sum())
        stats.bad_block = block_index if (taken & ~finite).any() else -1
        return stats, np.flatnonzero(taken & finite).astype(np.int64)
    key_range = _NO_RANGE if (lo, hi) == _FULL_RANGE else (True, np.uint64(mix), np.uint64(lo), np.uint64(hi))
    skip = _NO_SKIP if skip is None else np.ascontiguousarray(skip, dtype=np.int64)
    stats, _, _, proposals = _lloyd(X, C, sample_weight, offset, block_index, False, key_range, lam, skip)
    return stats, proposals


def _nearest(X, C):
    if C.shape[0] == 0:
        return np.full(X.shape[0], -1, np.int32), np.full(X.shape[0], np.inf)
    return _lloyd(X, C, None, 0, 0, True)[1:3]  # the assignment path of assign_stats, so labels agree


def block_stats(X, C, sample_weight=None, *, offset: int = 0, block_index: int = 0) -> ClusterStats:
    """The nearest-centre :class:`ClusterStats` of one block in one read, with no per-row output (the Lloyd step).

    ``X`` (n, D) float32 or float64, ``C`` (K, D) with K >= 1; equal to ``assign_stats(...)[0]``.
    """
    X = _float_block(X)
    C = np.ascontiguousarray(C, dtype=np.float64)
    if C.shape[0] == 0:
        return assign_stats(X, C, sample_weight, offset=offset, block_index=block_index)[0]
    return _lloyd(X, C, sample_weight, offset, block_index, False)[0]


def assign_stats(X, C, sample_weight=None, *, offset: int = 0, block_index: int = 0):
    """Assign every row of one block to its nearest centre and fold it into :class:`ClusterStats`.

    One fused read of the block (distances, argmin, weights, sums, cost, scatter, fingerprint).
    Returns ``(stats, labels, dist)``; ``labels``/``dist`` are O(n) vectors of the block, never n x K.
    Use :func:`block_stats` when the per-row vectors are not needed.
    """
    X = _float_block(X)
    C = np.ascontiguousarray(C, dtype=np.float64)
    if C.shape[0] == 0:
        labels, mind = _nearest(X, C)
        return stats_from_assignment(X, labels, mind, sample_weight, 0, offset, block_index), labels, mind
    return _lloyd(X, C, sample_weight, offset, block_index, True)[:3]


def assign_stats_numpy(X, C, sample_weight=None, *, offset: int = 0):
    """Plain-numpy twin of :func:`assign_stats` (the test oracle)."""
    labels, mind = nearest_numpy(X, C)
    w = _weights(np.shape(X)[0], sample_weight)
    cost = float((w * mind)[labels >= 0].sum())
    stats = ClusterStats.from_labels(X, labels, C.shape[0], w, cost=cost, offset=offset)
    return stats, labels, mind
