"""Serial in-memory kernels: collapsed DP-means (docs/algorithms.md 1.4) and capped DP-means (1.5), plus plain-Python
references used as test oracles.

Collapsed DP-means is a Hartigan-style descent on ``J_C(z) = sum_k SSE_k + lam*K``: each point, in a fixed
processing order, is removed from its cluster and re-inserted where the exact increase
``n_k/(n_k+1)*||x - xbar_k||^2`` is smallest, or opens a new cluster when every increase is strictly above ``lam``
(tie rules T1 to T3 of section 0; E-MB5 for the exact increment). A point that was alone in its cluster joins the
best cluster when the increase is at most ``lam`` (T3), so with ``lam = 0`` duplicates share one cluster.
"""

from __future__ import annotations

import numba
import numpy as np

from .distances import row_sq_dist
from .dpmeans import dpmeans_reference

__all__ = [
    "collapsed_stats",
    "collapsed_objective",
    "collapsed_pass",
    "collapsed_dpmeans_reference",
    "capped_pass",
    "capped_dpmeans_reference",
    "collapsed_bp_objective",
    "collapsed_bp_pass",
]


def collapsed_stats(X: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``(counts, sums)`` of the clusters ``0..k-1`` from the labels."""
    counts = np.bincount(labels, minlength=k).astype(np.int64)
    sums = np.zeros((k, X.shape[1]))
    np.add.at(sums, labels, X)
    return counts, sums


def collapsed_objective(X: np.ndarray, labels: np.ndarray, lam: float) -> float:
    """``sum_k sum_{z_n=k} ||x_n - xbar_k||^2 + lam*K`` computed directly (two-pass, no cancellation)."""
    X = np.asarray(X, dtype=np.float64)
    ks, z = np.unique(np.asarray(labels), return_inverse=True)
    counts, sums = collapsed_stats(X, z.reshape(-1), ks.size)
    sse = float(((X - (sums / counts[:, None])[z.reshape(-1)]) ** 2).sum())
    return sse + float(lam) * ks.size


@numba.njit(nogil=True, cache=True)
def _increase(x, counts, sums, c):
    m = counts[c]
    s = 0.0
    for j in range(x.shape[0]):
        t = x[j] - sums[c, j] / m
        s += t * t
    return m / (m + 1.0) * s


@numba.njit(nogil=True, cache=True)
def _collapsed_pass(X, order, z, counts, sums, live, k, lam):
    d = X.shape[1]
    moved = 0
    for t in range(order.shape[0]):
        i = order[t]
        x = X[i]
        c = z[i]
        singleton = False
        if c >= 0:
            counts[c] -= 1
            for j in range(d):
                sums[c, j] -= x[j]
            if counts[c] == 0:
                live[c] = False
                singleton = True
                for j in range(d):
                    sums[c, j] = 0.0
        best = np.inf
        bk = -1
        for q in range(k):
            if live[q]:
                delta = _increase(x, counts, sums, q)
                if delta < best:  # T2: lowest index on ties
                    best = delta
                    bk = q
        if c >= 0 and not singleton:
            dc = _increase(x, counts, sums, c)
            if dc <= best:  # T1: stay on ties
                best = dc
                bk = c
        if singleton:
            # the cluster {i} is re-opened only when strictly better (T3), in its old slot. Joining at an increase
            # equal to lam leaves J_C unchanged and lowers K, so (J_C, K) still decreases at every move.
            target = bk if (bk >= 0 and best <= lam) else c
        elif bk < 0 or best > lam:  # T3: open only when strictly better
            target = k
            k += 1
        else:
            target = bk
        counts[target] += 1
        for j in range(d):
            sums[target, j] += x[j]
        live[target] = True
        if target != c:
            moved += 1
        z[i] = target
    return k, moved


def collapsed_pass(X: np.ndarray, order: np.ndarray, labels: np.ndarray, lam: float) -> tuple[np.ndarray, int]:
    """One pass of collapsed DP-means over ``order``.

    ``labels`` holds clusters ``0..K-1`` (every one non-empty) or -1 for unassigned rows. Returns the new labels,
    relabelled ``0..K'-1`` keeping creation order, and the number of rows that changed cluster.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    z = np.asarray(labels, dtype=np.int64).copy()
    k = int(z.max()) + 1 if n and z.max() >= 0 else 0
    cap = k + n
    counts = np.zeros(cap, dtype=np.int64)
    sums = np.zeros((cap, X.shape[1]))
    assigned = z >= 0
    if k:
        c0, s0 = collapsed_stats(X[assigned], z[assigned], k)
        counts[:k], sums[:k] = c0, s0
    live = counts > 0
    k, moved = _collapsed_pass(X, np.asarray(order, dtype=np.int64), z, counts, sums, live, k, float(lam))
    keep = np.flatnonzero(live[:k])
    remap = np.full(k, -1, dtype=np.int64)
    remap[keep] = np.arange(keep.size)
    return remap[z], int(moved)


def collapsed_dpmeans_reference(X, lam, order, *, init="mean", max_iter=100):
    """Collapsed DP-means (docs/algorithms.md 1.4) in plain Python: the oracle of the tests.

    Returns ``(labels, history)``; labels are numbered in creation order, history holds ``J_C`` after each pass.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    clusters: list[list[int] | None] = []  # slot -> members (None once dropped)
    z = [-1] * n
    if init == "mean":
        clusters.append(list(range(n)))
        z = [0] * n
    history = []

    def increase(x, members):
        m = len(members)
        mean = X[members].sum(axis=0) / m if m > 1 else X[members[0]].copy()
        return m / (m + 1.0) * float(sum((x[j] - mean[j]) ** 2 for j in range(x.size)))

    for _ in range(max_iter):
        moved = 0
        for i in order:
            c = z[i]
            singleton = False
            if c >= 0:
                clusters[c].remove(i)
                if not clusters[c]:
                    clusters[c] = None
                    singleton = True
            deltas = [(increase(X[i], mem), q) for q, mem in enumerate(clusters) if mem]
            best, bk = min(deltas) if deltas else (np.inf, -1)
            if c >= 0 and not singleton:
                dc = increase(X[i], clusters[c])
                if dc <= best:
                    best, bk = dc, c
            if singleton:
                target = bk if (bk >= 0 and best <= lam) else c
                if target == c:
                    clusters[c] = []
            elif bk < 0 or best > lam:
                clusters.append([])
                target = len(clusters) - 1
            else:
                target = bk
            clusters[target].append(i)
            moved += target != c
            z[i] = target
        live = [q for q, mem in enumerate(clusters) if mem]
        remap = {q: r for r, q in enumerate(live)}
        z = [remap[q] for q in z]
        clusters = [clusters[q] for q in live]
        history.append(collapsed_objective(X, np.array(z), lam))
        if not moved:
            break
    return np.array(z, dtype=np.int64), history


# ---------------------------------------------------------------------------------------------------------------


@numba.njit(nogil=True, cache=True)
def _capped_pass(X, order, C, z, lam, kmax):
    n, d = X.shape
    k0 = C.shape[0]
    cap = max(k0, min(kmax, k0 + n))
    centers = np.empty((cap, d))
    centers[:k0] = C
    k = k0
    labels = z.copy()
    for t in range(order.shape[0]):
        i = order[t]
        best = np.inf
        bk = -1
        for c in range(k):
            s = row_sq_dist(X, i, centers, c)
            if s < best:  # T2
                best = s
                bk = c
        if k < kmax and (k == 0 or best > lam):  # T3, and never beyond kmax
            centers[k] = X[i]
            labels[i] = k
            k += 1
        else:
            labels[i] = bk
    return labels, centers[:k].copy()


def capped_pass(X: np.ndarray, order: np.ndarray, centers: np.ndarray, labels: np.ndarray, lam: float,
                max_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """One label pass of capped DP-means (1.2 with at most ``max_clusters`` centres), then the mean update.

    Returns ``(labels, centres)`` with empty clusters deleted and the rest numbered in creation order.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    C = np.ascontiguousarray(centers, dtype=np.float64).reshape(-1, X.shape[1])
    z, C = _capped_pass(X, np.asarray(order, dtype=np.int64), C, np.asarray(labels, dtype=np.int64), float(lam),
                        int(max_clusters))
    used = np.flatnonzero(np.bincount(z, minlength=C.shape[0]))
    remap = np.full(C.shape[0], -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    z = remap[z]
    counts, sums = collapsed_stats(X, z, used.size)
    return z, sums / counts[:, None]


def capped_dpmeans_reference(X, lam, order, max_clusters, *, init="mean", max_iter=100):
    """Capped DP-means (docs/algorithms.md 1.5) in plain Python. Returns ``(labels, centres, history)``."""
    return dpmeans_reference(X, lam, order, init=init, max_iter=max_iter, max_clusters=max_clusters)


# ------------------------------------------------------------------------------ collapsed BP-means (2.3)


def collapsed_bp_objective(G: np.ndarray, B: np.ndarray, sq_norm: float, lam: float) -> float:
    """``J_CBP = ||X||^2 - tr(B' pinv(G) B) + lam * K`` ([MB] eq. 10, docs/algorithms.md 2.3) from
    ``(G, B, ||X||^2)``."""
    from .bpmeans import collapsed_objective

    return collapsed_objective(G, B, sq_norm, lam)


@numba.njit(cache=True, nogil=True)
def _cbp_j(G, B, sq_norm, lam, rcond):
    """``||X||^2 - tr(B' pinv(G) B) + lam K`` with the pseudo-inverse from the eigendecomposition of G."""
    K = G.shape[0]
    if K == 0:
        return sq_norm
    w, V = np.linalg.eigh(G)
    cut = rcond * np.max(np.abs(w))
    t = 0.0
    for i in range(K):
        if abs(w[i]) > cut:
            u = V[:, i] @ B
            t += (u @ u) / w[i]
    return sq_norm - t + lam * K


@numba.njit(cache=True, nogil=True)
def _cbp_pass(X, order, Z, K, lam, sq_norm, rcond, tol):
    n, D = X.shape
    cap = Z.shape[1]
    G = np.zeros((cap, cap))
    B = np.zeros((cap, D))
    for i in range(n):
        for a in range(K):
            if Z[i, a]:
                for b in range(K):
                    if Z[i, b]:
                        G[a, b] += 1.0
                for j in range(D):
                    B[a, j] += X[i, j]
    J = _cbp_j(G[:K, :K].copy(), B[:K].copy(), sq_norm, lam, rcond)
    moves = 0
    for n_ in range(n):
        i = order[n_]
        x = X[i]
        for k in range(K):
            # flipping z_ik: G row/column k changes by +-z (with the diagonal by +-1), B row k by +-x
            s = 1.0 if Z[i, k] == 0 else -1.0
            G2 = G[:K, :K].copy()
            for b in range(K):
                if b != k and Z[i, b]:
                    G2[k, b] += s
                    G2[b, k] += s
            G2[k, k] += s
            B2 = B[:K].copy()
            for j in range(D):
                B2[k, j] += s * x[j]
            J2 = _cbp_j(G2, B2, sq_norm, lam, rcond)
            if J2 < J - tol * abs(J):
                Z[i, k] = 1 - Z[i, k]
                G[:K, :K] = G2
                B[:K] = B2
                J = J2
                moves += 1
        # delete empty and duplicate columns (creation order kept)
        dropped = 0
        k = 0
        while k < K:
            dup = G[k, k] == 0.0
            if not dup:
                for l in range(k):
                    if G[l, l] == G[k, k] and G[l, k] == G[k, k]:
                        dup = True
                        break
            if dup:
                for m in range(k, K - 1):
                    Z[:, m] = Z[:, m + 1]
                    G[m, :K] = G[m + 1, :K]
                    B[m] = B[m + 1]
                for m in range(k, K - 1):
                    G[:K, m] = G[:K, m + 1]
                Z[:, K - 1] = 0
                G[K - 1, :] = 0.0
                G[:, K - 1] = 0.0
                B[K - 1] = 0.0
                K -= 1
                dropped += 1
            else:
                k += 1
        if dropped:
            J = _cbp_j(G[:K, :K].copy(), B[:K].copy(), sq_norm, lam, rcond)
            moves += dropped
        single = False
        for k in range(K):
            if Z[i, k] and G[k, k] == 1.0:
                single = True  # a column equal to {i} exists
        if single or K >= cap:
            continue
        G2 = np.zeros((K + 1, K + 1))
        G2[:K, :K] = G[:K, :K]
        for b in range(K):
            if Z[i, b]:
                G2[K, b] = 1.0
                G2[b, K] = 1.0
        G2[K, K] = 1.0
        B2 = np.empty((K + 1, D))
        B2[:K] = B[:K]
        B2[K] = x
        J2 = _cbp_j(G2, B2, sq_norm, lam, rcond)
        if J2 < J - tol * abs(J):
            Z[i, K] = 1
            G[: K + 1, : K + 1] = G2
            B[: K + 1] = B2
            K += 1
            J = J2
            moves += 1
    return K, moves, J


def collapsed_bp_pass(X: np.ndarray, order: np.ndarray, Z: np.ndarray, lam: float, sq_norm: float,
                      *, max_features: int | None = None):
    """One pass of collapsed BP-means (docs/algorithms.md 2.3): A is always ``pinv(Z'Z) Z'X``, so only Z is searched.

    For every row n in ``order``: each bit k (k = 0..K-1) is flipped iff that lowers ``J_CBP`` by more than a
    relative 1e-12 (T1, with a margin for rounding); the flip changes row and column k of ``G`` by ``+-z`` and row
    k of ``B`` by ``+-x``, and ``J_CBP`` is re-solved from ``(G, B)`` by an eigendecomposition (K is small).
    Then empty and duplicate columns are deleted (each deletion lowers ``J_CBP`` by ``lam``; the first of equal
    columns is kept), and the singleton feature ``{n}`` is opened iff no column equals ``{n}`` and opening it
    lowers ``J_CBP``. Every accepted step lowers ``J_CBP``, so it never increases.

    Returns ``(Z, moves, J)``: the new bits, the number of accepted flips, openings and deletions, and ``J_CBP``.
    """
    from .bpmeans import PINV_RCOND

    X = np.ascontiguousarray(X, dtype=np.float64)
    n = X.shape[0]
    K = Z.shape[1]
    cap = n + K if max_features is None else max(int(max_features), K)
    Zw = np.zeros((n, cap), np.uint8)
    Zw[:, :K] = Z
    K, moves, J = _cbp_pass(X, np.asarray(order, dtype=np.int64), Zw, K, float(lam), float(sq_norm), PINV_RCOND,
                            1e-12)
    return np.ascontiguousarray(Zw[:, :K]), int(moves), float(J)
