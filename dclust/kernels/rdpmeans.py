"""RDP-means kernels (docs/algorithms.md 5.2, 5.3, 8.4): block steps of a pass, the serial validation of proposals,
and a plain serial reference implementation used as the test oracle.

A pass visits the rows that carry no link first (phase 0: DP-means with optimistic concurrency, their link
terms are 0), then the linked rows one colour class at a time (no two rows of a class share a link, so within a
class every row's link counts depend only on labels fixed before the class started). For a linked row ``i``:
``dist_k = D(x_i, mu_k) - xi * sum_{j ~ i, z_j = k} E_ij`` with ``E_ij = +w`` for a must-link and ``-w`` for a
cannot-link, which is ``D - xi f_k + xi s_k`` for unit weights.
"""

from __future__ import annotations

import numba
import numpy as np

from .distances import _accumulate, _finish, _weights, epoch_stats, order_keys, scatter_about_means
from .divergence import divergence_matrix, divergence_nearest, divergence_rows, smooth_rows
from .dpmeans import serial_assign
from .stats import ClusterStats

__all__ = [
    "rdp_propose",
    "color_phase",
    "link_scores",
    "validate_proposals",
    "link_term",
    "rdpmeans_reference",
]


def _stats_skip(X, labels, mind, skip, k, offset, block_index) -> ClusterStats:
    """Statistics of the rows with ``labels >= 0``; rows with label -1 count as bad unless ``skip``."""
    X = np.ascontiguousarray(X)
    w = _weights(X.shape[0], None)
    weight, mean, fp, cost, _ = _accumulate(X, labels, mind, w, k, np.uint64(offset))
    n_bad = int(np.count_nonzero((labels < 0) & ~skip))
    return _finish(X, labels, w, weight, mean, fp, cost, n_bad, block_index)


def rdp_propose(Xb, wb, linked, *, offset, block_index, mix, lo, hi, centers, lam, kind):
    """One keyed OCC epoch of phase 0 on one block (docs/algorithms.md 8.4): its rows without links whose order key
    (:func:`dclust.kernels.distances.order_keys`) lies in ``[lo, hi]``.

    A row within ``lam`` of a snapshot centre takes its nearest one (final for the pass, folded into the returned
    statistics); the others are proposed. ``linked`` lists the block's linked rows (sorted local indices); ``Xb``
    is already smoothed for KL; ``wb`` is unused (RDP-means has no sample weights). Returns
    ``(stats, n_rows, proposals (local rows), ())``.
    """
    if kind == "euclidean":  # the DP-means epoch kernel, the linked rows left out: one fused read of the block
        stats, proposals = epoch_stats(Xb, centers, lam, offset=offset, block_index=block_index, mix=mix, lo=lo,
                                       hi=hi, skip=np.asarray(linked, dtype=np.int64))
        return stats, stats.n_rows, proposals, ()
    n = Xb.shape[0]
    skip = np.zeros(n, dtype=bool)
    skip[linked] = True
    if (lo, hi) == (0, 2**64 - 1):
        rows = np.flatnonzero(~skip)
    else:
        keys = order_keys(mix, np.arange(offset, offset + n))
        rows = np.flatnonzero(~skip & (keys >= np.uint64(lo)) & (keys <= np.uint64(hi)))
    k = centers.shape[0]
    Xu = Xb if rows.size == n else Xb[rows]
    if k:
        labels, dist = divergence_nearest(Xu, centers, kind)
        finite = ~np.isnan(dist)
        propose = finite & ~(dist <= lam)
    else:
        finite = np.isfinite(np.asarray(Xu, dtype=np.float64)).all(axis=1)
        propose = finite.copy()
        labels, dist = np.zeros(rows.size, np.int64), np.zeros(rows.size)
    keep = ~propose & finite
    full_labels = np.full(n, -1, dtype=np.int32)
    full_dist = np.zeros(n)
    full_labels[rows[keep]] = labels[keep]
    full_dist[rows[keep]] = dist[keep]
    not_here = np.ones(n, dtype=bool)  # rows outside this epoch's non-proposers are skipped, not bad
    not_here[rows[keep]] = False
    not_here[rows[~finite]] = False
    stats = _stats_skip(Xb, full_labels, full_dist, not_here, k, offset, block_index)
    return stats, rows.size, rows[propose].astype(np.int64), ()


def link_scores(indptr: np.ndarray, cols: np.ndarray, vals: np.ndarray, z_nb: np.ndarray, k: int) -> np.ndarray:
    """``L[r, c] = sum of the signed link values of row r to neighbours labelled c`` (f - s for unit weights).

    ``indptr``/``cols``/``vals`` is the CSR of the rows' links, ``cols`` indexing ``z_nb`` (neighbour labels).
    """
    m = indptr.size - 1
    L = np.zeros((m, k))
    if cols.size:
        rows = np.repeat(np.arange(m), np.diff(indptr))
        np.add.at(L, (rows, z_nb[cols]), vals)
    return L


_NJIT = dict(nogil=True, cache=True, error_model="numpy")


#: Most features :func:`_sq_distances` handles: numpy sums up to 128 numbers in one block (beyond, it recurses).
_PAIRWISE_BLOCK = 128


@numba.njit(inline="always")
def _sq_dist(X, i, C, c):
    """``||X[i] - C[c]||^2`` with float64 differences, the squares summed in numpy's order for up to 128 numbers
    (eight partial sums, then the tail), so bit for bit ``((X[i] - C[c]) ** 2).sum()``; no temporary."""
    d = X.shape[1]
    if d < 8:
        res = 0.0
        for j in range(d):
            v = np.float64(X[i, j]) - C[c, j]
            res += v * v
        return res
    v0, v1 = np.float64(X[i, 0]) - C[c, 0], np.float64(X[i, 1]) - C[c, 1]
    v2, v3 = np.float64(X[i, 2]) - C[c, 2], np.float64(X[i, 3]) - C[c, 3]
    v4, v5 = np.float64(X[i, 4]) - C[c, 4], np.float64(X[i, 5]) - C[c, 5]
    v6, v7 = np.float64(X[i, 6]) - C[c, 6], np.float64(X[i, 7]) - C[c, 7]
    r0, r1, r2, r3, r4, r5, r6, r7 = v0 * v0, v1 * v1, v2 * v2, v3 * v3, v4 * v4, v5 * v5, v6 * v6, v7 * v7
    j = 8
    while j < d - d % 8:
        v0, v1 = np.float64(X[i, j]) - C[c, j], np.float64(X[i, j + 1]) - C[c, j + 1]
        v2, v3 = np.float64(X[i, j + 2]) - C[c, j + 2], np.float64(X[i, j + 3]) - C[c, j + 3]
        v4, v5 = np.float64(X[i, j + 4]) - C[c, j + 4], np.float64(X[i, j + 5]) - C[c, j + 5]
        v6, v7 = np.float64(X[i, j + 6]) - C[c, j + 6], np.float64(X[i, j + 7]) - C[c, j + 7]
        r0 += v0 * v0
        r1 += v1 * v1
        r2 += v2 * v2
        r3 += v3 * v3
        r4 += v4 * v4
        r5 += v5 * v5
        r6 += v6 * v6
        r7 += v7 * v7
        j += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while j < d:
        v = np.float64(X[i, j]) - C[c, j]
        res += v * v
        j += 1
    return res


@numba.njit(inline="always")
def _sq_row(X, i, C, out):
    """``out[c] = ||X[i] - C[c]||^2`` (:func:`_sq_dist`) for every centre ``c``: the values of
    :func:`dclust.kernels.divergence.divergence_matrix` bit for bit."""
    for c in range(C.shape[0]):
        out[c] = _sq_dist(X, i, C, c)


@numba.njit(**_NJIT)
def _sq_distances(X, C):
    """``||x_n - c_k||^2`` for all rows and centres, (n, K) float64, without a temporary: the same values as
    :func:`dclust.kernels.divergence.divergence_matrix` (at most ``_PAIRWISE_BLOCK`` features)."""
    out = np.empty((X.shape[0], C.shape[0]))
    for i in range(X.shape[0]):
        _sq_row(X, i, C, out[i])
    return out


_TILE = 512


def _divergences(X: np.ndarray, C: np.ndarray, kind: str) -> np.ndarray:
    """:func:`divergence_matrix`, bit for bit, without its ``n x K x D`` temporary: Euclidean by
    :func:`_sq_distances` (up to ``_PAIRWISE_BLOCK`` features), otherwise the direct form in tiles of ``_TILE``
    rows."""
    C = np.ascontiguousarray(C, dtype=np.float64).reshape(-1, X.shape[1])
    if kind == "euclidean" and X.shape[1] <= _PAIRWISE_BLOCK:
        return _sq_distances(np.ascontiguousarray(X), C)
    D = np.empty((X.shape[0], C.shape[0]))
    for s in range(0, X.shape[0], _TILE):
        D[s : s + _TILE] = divergence_matrix(X[s : s + _TILE], C, kind)
    return D


@numba.njit(inline="always")
def _link_choice(Dr, r, indptr, cols, vals, z, xi, L):
    """The cluster minimising ``Dr - xi * L`` for row ``r`` of the CSR (``L`` its link sums by the labels ``z`` of
    the columns, added in CSR order as ``numpy.add.at`` does; ``L`` is all zeros on entry and on return); lowest
    index on ties, a NaN first, as ``numpy.argmin``. Returns ``(best, value)``."""
    for e in range(indptr[r], indptr[r + 1]):
        L[z[cols[e]]] += vals[e]
    b = 0
    bv = Dr[0] - xi * L[0]
    for c in range(1, Dr.shape[0]):
        v = Dr[c] - xi * L[c]
        if not np.isnan(bv) and (v < bv or np.isnan(v)):
            b, bv = c, v
    for e in range(indptr[r], indptr[r + 1]):
        L[z[cols[e]]] = 0.0
    return b, bv


@numba.njit(**_NJIT)
def _link_argmin(D, indptr, cols, vals, z_nb, xi):
    """Per row ``r`` of ``D`` (n, K): the cluster minimising ``D[r] - xi * L[r]`` (:func:`link_scores`, from the
    CSR rows ``indptr[r]:indptr[r + 1]`` of ``cols``/``vals``; lowest index on ties, a NaN first, as
    ``numpy.argmin``), that value and ``D[r, best]``. The same numbers as the numpy expressions, with no n x K
    temporary: the link sums are added in CSR order, as ``numpy.add.at`` does."""
    n, k = D.shape
    best = np.zeros(n, dtype=np.int64)
    bval = np.empty(n)
    dbest = np.empty(n)
    L = np.zeros(k)
    for r in range(n):
        b, bv = _link_choice(D[r], r, indptr, cols, vals, z_nb, xi, L)
        best[r], bval[r], dbest[r] = b, bv, D[r, b]
    return best, bval, dbest


#: Rows per distance matrix of a colour phase (a few MiB at most).
_ROWS = 16384


@numba.njit(**_NJIT)
def _fold_kept(X, labels, keys, k):
    """Weight, mean and fingerprint per cluster of the rows with ``labels >= 0`` (unit weights; sums in row
    order, as :meth:`ClusterStats.from_labels`); also the number of such rows."""
    d = X.shape[1]
    weight = np.zeros(k)
    sums = np.zeros((k, d))
    fp = np.zeros(k, dtype=np.uint64)
    m = 0
    for i in range(X.shape[0]):
        c = labels[i]
        if c < 0:
            continue
        m += 1
        weight[c] += 1.0
        fp[c] += keys[i]
        for j in range(d):
            sums[c, j] += X[i, j]
    mean = np.zeros((k, d))
    for c in range(k):
        if weight[c] > 0:
            for j in range(d):
                mean[c, j] = sums[c, j] / weight[c]
    return weight, mean, fp, m


def color_phase(X, keys, *,
                indptr, cols, vals, z, centers, lam, xi, kind) -> tuple[np.ndarray, ClusterStats, np.ndarray]:
    """One colour phase over its rows ``X`` (float64, (m, D), in processing order; ``keys`` their
    :func:`~dclust.kernels.stats.point_keys`) against the state ``(centers, z)``.

    The CSR ``(indptr, cols, vals)`` has one row per row of ``X``; ``cols`` index ``z`` (the current labels of
    the linked rows). Each row takes the cluster minimising ``D(x, mu_k) - xi * L[k]`` unless all exceed ``lam``
    (then it is proposed). Returns ``(labels, stats, proposals)``: ``labels`` (m,) int64 with -1 for a proposal,
    the statistics of the other rows, and the positions of the proposals (in processing order).
    """
    m, k = X.shape[0], centers.shape[0]
    best, bval, dbest = np.zeros(m, np.int64), np.full(m, np.inf), np.zeros(m)
    if k:  # (a fused distance + choice kernel measured slower than these two in turn)
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        args = (np.ascontiguousarray(cols, dtype=np.int64), np.ascontiguousarray(vals, dtype=np.float64),
                np.ascontiguousarray(z, dtype=np.int64), float(xi))
        for s in range(0, m, _ROWS):
            e = min(m, s + _ROWS)
            best[s:e], bval[s:e], dbest[s:e] = _link_argmin(_divergences(X[s:e], centers, kind), indptr[s : e + 1],
                                                            *args)
    propose = ~(bval <= lam)
    labels = np.where(propose, -1, best)
    weight, mean, fp, n_kept = _fold_kept(X, labels, keys, k)
    scatter = scatter_about_means(X, labels, np.ones(m), mean)
    cost = float(dbest[~propose].sum())
    return labels, ClusterStats(weight, mean, scatter, cost, fp, int(n_kept)), np.flatnonzero(propose)


def validate_proposals(
    rows: np.ndarray, lam: float, kind: str, centers: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Serial DP-means assignment of ``rows`` in order, with link terms 0, against ``centres`` plus the centres
    it opens (the OCC validation of docs/algorithms.md 8.2 and 8.4).

    For proposals, ``centres`` is empty: every proposal is already farther than ``lam`` from the snapshot (link
    terms included) and its link terms to centres opened in the same validation are 0, since its neighbours are
    not of its colour. Each row opens a centre at itself if every centre is farther than ``lam``, else joins the
    nearest (lowest index on ties). Returns ``(labels, dist, new_centres)``; labels index ``centres`` followed by
    ``new_centres``.
    """
    rows = np.asarray(rows, dtype=np.float64)
    d_ = rows.shape[1] if rows.ndim == 2 else np.shape(centers)[1]
    rows = rows.reshape(-1, d_)
    C = np.empty((0, d_)) if centers is None else np.asarray(centers, dtype=np.float64).reshape(-1, d_)
    if kind == "euclidean":
        return serial_assign(rows, C, lam)
    labels = np.empty(rows.shape[0], dtype=np.int64)
    dist = np.zeros(rows.shape[0])
    allc = list(C)
    for r, x in enumerate(rows):
        if allc:
            d = divergence_matrix(x[None], np.array(allc), kind)[0]
            b = int(np.argmin(d))
        if not allc or d[b] > lam:
            allc.append(x.copy())
            labels[r] = len(allc) - 1
        else:
            labels[r], dist[r] = b, d[b]
    return labels, dist, np.array(allc[C.shape[0]:]).reshape(-1, d_)


def link_term(z_a: np.ndarray, z_b: np.ndarray, value: np.ndarray) -> float:
    """``-sum value_ij [z_i == z_j]`` over the links: ``-#must inside + #cannot inside`` (each pair once)."""
    return -float(np.asarray(value)[np.asarray(z_a) == np.asarray(z_b)].sum())


def rdpmeans_reference(
    X, i, j, value, lam, orders, *, xi0=0.001, xi_rate=2.0, max_xi=None, max_iter=20, divergence="euclidean",
    smoothing=0.3,
):
    """Serial RDP-means (docs/algorithms.md 5.3), plain Python loops: the oracle of the tests.

    Parameters
    ----------
    X : ndarray (n, D)
    i, j, value : ndarray
        Links (each unordered pair once; ``value`` +w must-link, -w cannot-link).
    lam : float
    orders : ndarray or list of ndarray
        One permutation reused in every pass, or one per pass (the last one is reused).
    xi0, xi_rate, max_xi, max_iter, divergence, smoothing
        As in :class:`dclust.RDPMeans`; ``xi0 = 0`` is allowed here. Stops after the pass run at xi when the
        labels did not change and ``xi >= max_xi`` (default ``xi0 * xi_rate**(max_iter - 1)``), or at
        ``max_iter``.

    Returns
    -------
    labels : ndarray (n,)
    centres : ndarray (K, D)
    history : dict
        Lists per iteration: ``xi``, ``start`` (objective before the pass at that xi), ``assign`` (after the
        label pass, empty clusters still counted), ``objective`` (after the mean update), ``changed``.
    """
    X = np.asarray(X, dtype=np.float64)
    if divergence == "kl":
        X = smooth_rows(X, smoothing)
    n = X.shape[0]
    nbrs: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for a, b, v in zip(np.asarray(i), np.asarray(j), np.asarray(value, dtype=np.float64)):
        nbrs[int(a)].append((int(b), float(v)))
        nbrs[int(b)].append((int(a), float(v)))
    if isinstance(orders, np.ndarray) and orders.ndim == 1:
        orders = [orders]
    max_xi = xi0 * xi_rate ** (max_iter - 1) if max_xi is None else max_xi
    centers = [X.mean(axis=0)]
    z = np.zeros(n, dtype=np.int64)
    hist = {"xi": [], "start": [], "assign": [], "objective": [], "changed": []}

    def D(x, c):
        return float(divergence_rows(x[None], c[None], divergence)[0])

    def objective(z, centers, xi, k):
        data = sum(D(X[r], centers[z[r]]) for r in range(n))
        return data + xi * link_term(z[np.asarray(i, int)], z[np.asarray(j, int)], value) + lam * k

    xi = xi0
    for p in range(max_iter):
        order = orders[min(p, len(orders) - 1)]
        hist["xi"].append(xi)
        hist["start"].append(objective(z, centers, xi, len(centers)))
        new_z = z.copy()
        for r in order:
            r = int(r)
            dist = [D(X[r], c) for c in centers]
            for nb, v in nbrs[r]:
                dist[new_z[nb]] -= xi * v
            b = int(np.argmin(dist))
            if dist[b] > lam:
                centers.append(X[r].copy())
                new_z[r] = len(centers) - 1
            else:
                new_z[r] = b
        hist["assign"].append(objective(new_z, centers, xi, len(centers)))
        used = [c for c in range(len(centers)) if (new_z == c).any()]
        remap = np.full(len(centers), -1)
        remap[used] = np.arange(len(used))
        new_z = remap[new_z]
        centers = [X[new_z == c].mean(axis=0) for c in range(len(used))]
        hist["objective"].append(objective(new_z, centers, xi, len(centers)))
        changed = not np.array_equal(new_z, z)
        hist["changed"].append(changed)
        z = new_z
        if not changed and xi >= max_xi:
            break
        xi *= xi_rate
    return z, np.array(centers), hist
