"""Assignment kernels of the in-memory constrained k-means references of [TV] 5.2: MPCK-means (Bilenko, Basu and
Mooney 2004) and LCVQE (Pelleg and Baras 2007, as described by Covoes, Hruschka and Ghosh 2013), and the sweep of
COP-KMeans (Wagstaff et al. 2001).

Pure numpy/numba: arrays in, arrays out. The MPCK-means and LCVQE kernels have a plain-numpy twin (``*_numpy``)
used as the test oracle.
"""

from __future__ import annotations

import numba
import numpy as np

from .coloring import mark_neighbor_labels
from .distances import row_sq_dist

__all__ = ["cop_sweep", "mpck_sweep", "mpck_sweep_numpy", "lcvqe_assign", "lcvqe_assign_numpy", "symmetric_links"]


def symmetric_links(n: int, i: np.ndarray, j: np.ndarray, must: np.ndarray):
    """CSR adjacency of the links in both directions: ``(indptr, nbr, is_must)`` (int64, int64, bool)."""
    a = np.concatenate([i, j]).astype(np.int64)
    b = np.concatenate([j, i]).astype(np.int64)
    m = np.concatenate([must, must]).astype(np.bool_)
    order = np.lexsort((b, a))
    a, b, m = a[order], b[order], m[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(indptr, a + 1, 1)
    return np.cumsum(indptr), b, m


@numba.njit(cache=True, nogil=True)
def mpck_sweep(X, centers, A, logdet, maxsep, order, indptr, nbr, is_must, labels):
    """One ICM sweep of MPCK-means (diagonal metrics): every row in ``order`` takes the cluster ``h`` minimising

    ``||x_i - mu_h||^2_{A_h} - log det A_h + sum_{must j, z_j != h} (||x_i-x_j||^2_{A_h} + ||x_i-x_j||^2_{A_zj}) / 2
    + sum_{cannot j, z_j == h} max(maxsep_h - ||x_i-x_j||^2_{A_h}, 0)``

    with the current labels of its neighbours (Gauss-Seidel). ``labels`` is updated in place; returns the number of
    rows that changed cluster."""
    n, d = X.shape
    k = centers.shape[0]
    cost = np.empty(k)
    changed = 0
    for t in range(order.size):
        i = order[t]
        for h in range(k):
            c = -logdet[h]
            for f in range(d):
                diff = X[i, f] - centers[h, f]
                c += A[h, f] * diff * diff
            cost[h] = c
        for p in range(indptr[i], indptr[i + 1]):
            j = nbr[p]
            lj = labels[j]
            if is_must[p]:
                for h in range(k):
                    if h != lj:
                        s = 0.0
                        for f in range(d):
                            diff = X[i, f] - X[j, f]
                            s += 0.5 * (A[h, f] + A[lj, f]) * diff * diff
                        cost[h] += s
            else:
                s = 0.0
                for f in range(d):
                    diff = X[i, f] - X[j, f]
                    s += A[lj, f] * diff * diff
                pen = maxsep[lj] - s
                if pen > 0.0:
                    cost[lj] += pen
        best = 0
        for h in range(1, k):
            if cost[h] < cost[best]:
                best = h
        if best != labels[i]:
            changed += 1
            labels[i] = best
    return changed


def mpck_sweep_numpy(X, centers, A, logdet, maxsep, order, indptr, nbr, is_must, labels):
    """Plain-numpy twin of :func:`mpck_sweep` (the test oracle)."""
    changed = 0
    for i in order:
        cost = (A * (X[i] - centers) ** 2).sum(axis=1) - logdet
        for p in range(indptr[i], indptr[i + 1]):
            j, lj = nbr[p], labels[nbr[p]]
            diff2 = (X[i] - X[j]) ** 2
            if is_must[p]:
                add = 0.5 * ((A + A[lj]) * diff2).sum(axis=1)
                add[lj] = 0.0
                cost = cost + add
            else:
                cost[lj] += max(maxsep[lj] - float((A[lj] * diff2).sum()), 0.0)
        best = int(np.argmin(cost))
        if best != labels[i]:
            changed += 1
            labels[i] = best
    return changed


@numba.njit(cache=True, nogil=True)
def lcvqe_assign(X, centers, li, lj, must, labels, sums, counts):
    """One LCVQE assignment step; fills ``labels`` and the centre update's ``sums`` (k, d) and ``counts`` (k,)
    (zeroed here) and returns the LCVQE cost.

    Every row first takes its nearest centre. Then each link, in the given order, with the labels as updated so
    far: a violated must-link ``(i, j)`` (clusters ``a != b``) picks the cheapest of both in ``a``, both in ``b``
    (each costing half the two squared distances) or keeping the split, which costs ``(d(i,a) + d(j,b) + d(i,b) +
    d(j,a)) / 2``: each row is pulled towards the other's centre (``x_j`` joins ``a``'s update and ``x_i`` joins
    ``b``'s). A violated cannot-link (both in ``a``) moves the row farther from ``mu_a`` to its nearest other centre
    ``r``: keeping the violation would cost that row's distance to ``r`` on top (the linear penalty), so moving is
    never dearer. The centre update then divides by the counts, violations included.
    """
    n, d = X.shape
    k = centers.shape[0]
    for i in range(n):
        best, bd = 0, np.inf
        for h in range(k):
            v = row_sq_dist(X, i, centers, h)
            if v < bd:
                best, bd = h, v
        labels[i] = best
    pull_i = np.full(li.size, -1, dtype=np.int64)  # cluster whose update x_i joins (kept must-link violation)
    pull_j = np.full(li.size, -1, dtype=np.int64)
    for t in range(li.size):
        i, j = li[t], lj[t]
        a, b = labels[i], labels[j]
        if must[t]:
            if a == b:
                continue
            both_a = 0.5 * (row_sq_dist(X, i, centers, a) + row_sq_dist(X, j, centers, a))
            both_b = 0.5 * (row_sq_dist(X, i, centers, b) + row_sq_dist(X, j, centers, b))
            keep = 0.5 * (row_sq_dist(X, i, centers, a) + row_sq_dist(X, j, centers, b)
                          + row_sq_dist(X, i, centers, b) + row_sq_dist(X, j, centers, a))
            if both_a <= both_b and both_a <= keep:
                labels[j] = a
            elif both_b <= keep:
                labels[i] = b
            else:
                pull_i[t] = b
                pull_j[t] = a
        elif a == b and k > 1:
            far = i if row_sq_dist(X, i, centers, a) >= row_sq_dist(X, j, centers, a) else j
            r, rd = -1, np.inf
            for h in range(k):
                if h != a:
                    v = row_sq_dist(X, far, centers, h)
                    if v < rd:
                        r, rd = h, v
            labels[far] = r
    for h in range(k):
        counts[h] = 0.0
        for f in range(d):
            sums[h, f] = 0.0
    cost = 0.0
    for i in range(n):
        h = labels[i]
        counts[h] += 1.0
        cost += 0.5 * row_sq_dist(X, i, centers, h)
        for f in range(d):
            sums[h, f] += X[i, f]
    for t in range(li.size):
        if pull_i[t] >= 0:
            i, j = li[t], lj[t]
            if labels[i] == pull_j[t] and labels[j] == pull_i[t]:
                continue  # a later link joined the pair: no longer a violation
            for row, h in ((i, pull_i[t]), (j, pull_j[t])):
                counts[h] += 1.0
                cost += 0.5 * row_sq_dist(X, row, centers, h)
                for f in range(d):
                    sums[h, f] += X[row, f]
    return cost


def lcvqe_assign_numpy(X, centers, li, lj, must, labels, sums, counts):
    """Plain-numpy twin of :func:`lcvqe_assign` (the test oracle)."""
    k = centers.shape[0]
    D = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2)
    labels[:] = D.argmin(axis=1)
    pulls = []
    for t in range(li.size):
        i, j = int(li[t]), int(lj[t])
        a, b = labels[i], labels[j]
        if must[t]:
            if a == b:
                continue
            both_a = 0.5 * (D[i, a] + D[j, a])
            both_b = 0.5 * (D[i, b] + D[j, b])
            keep = 0.5 * (D[i, a] + D[j, b] + D[i, b] + D[j, a])
            if both_a <= both_b and both_a <= keep:
                labels[j] = a
            elif both_b <= keep:
                labels[i] = b
            else:
                pulls.append((i, j, b, a))
        elif a == b and k > 1:
            far = i if D[i, a] >= D[j, a] else j
            other = D[far].copy()
            other[a] = np.inf
            labels[far] = int(np.argmin(other))
    sums[:] = 0.0
    counts[:] = 0.0
    np.add.at(sums, labels, X)
    counts += np.bincount(labels, minlength=k)
    cost = 0.5 * float(D[np.arange(X.shape[0]), labels].sum())
    for i, j, hi, hj in pulls:
        if labels[i] == hj and labels[j] == hi:
            continue
        for row, h in ((i, hi), (j, hj)):
            counts[h] += 1.0
            cost += 0.5 * D[row, h]
            sums[h] += X[row]
    return cost


@numba.njit(cache=True, nogil=True)
def cop_sweep(P, w, centers, order, indptr, indices, labels):
    """One COP-KMeans assignment sweep (Wagstaff et al. 2001) over the must-link components ``P`` (m, d) in
    ``order``: each goes to its nearest centre among those holding no component it cannot-link to (CSR graph
    ``indptr``/``indices`` over the components), or, if none is feasible, to its nearest one. ``labels`` (m,) is
    overwritten; returns the number of components that had no feasible cluster."""
    m = P.shape[0]
    k = centers.shape[0]
    for t in range(m):
        labels[t] = -1
    forbidden = np.full(k, -1, dtype=np.int64)
    n_bad = 0
    for t in range(order.size):
        c = order[t]
        mark_neighbor_labels(indptr, indices, labels, c, forbidden)
        best, best_d, near, near_d = -1, np.inf, 0, np.inf
        for j in range(k):
            dist = row_sq_dist(P, c, centers, j)
            if dist < near_d:
                near, near_d = j, dist
            if forbidden[j] != c and dist < best_d:
                best, best_d = j, dist
        if best < 0:
            n_bad += 1
            best = near
        labels[c] = best
    return n_bad
