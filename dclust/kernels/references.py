"""In-memory reference samplers and spectral pieces (ALGORITHMS.md section 7; [MB] 5.1): pure numpy/numba/scipy.

Three families, each a slow but exact reference for the scalable algorithms:

- collapsed Gibbs for the Dirichlet-process mixture with a Normal-Normal conjugate model (known isotropic
  variance ``sigma2``, prior ``N(mu0, rho2 I)`` on the means, concentration ``alpha``);
- normalized-cut spectral clustering: affinities, the symmetric normalised embedding, a seeded numpy k-means, and
  the two-way threshold sweep that takes ``argmin Ncut`` ([SL] errata);
- collapsed Gibbs for the Indian-buffet linear-Gaussian model (Griffiths & Ghahramani 2006, the sampler [MB] 5.1
  compares BP-means with): the feature means ``A`` are integrated out.

No dask, zarr, validation or I/O here. Randomness comes only from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh
from scipy.spatial import cKDTree
from scipy.special import gammaln

from .kmeans import kmeans_plusplus, lloyd_pass

__all__ = [
    "dpmm_sweep",
    "dpmm_log_joint",
    "dpmm_posterior",
    "dpmm_predict",
    "rbf_affinity",
    "knn_affinity",
    "spectral_embedding",
    "kmeans_lloyd",
    "ncut_value",
    "ncut_sweep",
    "ibp_sweep",
    "ibp_log_joint",
    "ibp_posterior_features",
    "ibp_map_codes",
]

_JIT = dict(nogil=True, cache=True)
_LOG_2PI = math.log(2.0 * math.pi)


# --------------------------------------------------------------------------------------------------------------
# DP mixture, Normal-Normal conjugate, collapsed Gibbs ([SL]; ALGORITHMS.md 7)
# --------------------------------------------------------------------------------------------------------------


@numba.njit(**_JIT)
def dpmm_sweep(X, labels, counts, sums, order, alpha, sigma2, rho2, mu0, rng):
    """One collapsed Gibbs sweep over the rows in ``order`` (in place); returns the number of clusters.

    Parameters
    ----------
    X : ndarray (N, D) float64
    labels : ndarray (N,) int64
        Cluster slot of every row; ``-1`` means "not yet seated" (the first sweep of a sequential start, where
        the row is seated given the rows seated before it).
    counts : ndarray (N,) int64 and sums : ndarray (N, D) float64
        Per-slot size and sum of the seated rows. A slot with count 0 is free; a new cluster takes the lowest free
        slot.
    order : ndarray (N,) int64
        Visiting order.
    alpha, sigma2, rho2 : float
        Concentration, noise variance and prior variance of the means.
    mu0 : ndarray (D,) float64
        Prior mean.
    rng : numpy.random.Generator
        Only ``rng.random()`` is drawn, one uniform per row.

    Notes
    -----
    With row i removed, ``P(z_i = k) ∝ n_k N(x_i | m_k, (sigma2 + v_k) I)`` and
    ``P(new) ∝ alpha N(x_i | mu0, (sigma2 + rho2) I)``, where ``v_k = (1/rho2 + n_k/sigma2)^-1`` and
    ``m_k = v_k (mu0/rho2 + s_k/sigma2)``. The common normaliser ``alpha + N - 1`` of the CRP cancels.
    """
    n, d = X.shape
    cap = counts.shape[0]
    logp = np.empty(cap + 1)
    hi = 0  # one past the highest used slot
    for k in range(cap):
        if counts[k] > 0:
            hi = k + 1
    log_alpha = math.log(alpha)
    s_new = sigma2 + rho2
    for t in range(n):
        i = order[t]
        old = labels[i]
        if old >= 0:
            counts[old] -= 1
            for j in range(d):
                sums[old, j] -= X[i, j]
            if counts[old] == 0:
                for j in range(d):
                    sums[old, j] = 0.0
        best = -np.inf
        for k in range(hi):
            if counts[k] == 0:
                logp[k] = -np.inf
                continue
            v = 1.0 / (1.0 / rho2 + counts[k] / sigma2)
            s2 = sigma2 + v
            r = 0.0
            for j in range(d):
                m = v * (mu0[j] / rho2 + sums[k, j] / sigma2)
                r += (X[i, j] - m) ** 2
            logp[k] = math.log(counts[k]) - 0.5 * d * math.log(s2) - 0.5 * r / s2
            if logp[k] > best:
                best = logp[k]
        r = 0.0
        for j in range(d):
            r += (X[i, j] - mu0[j]) ** 2
        lnew = log_alpha - 0.5 * d * math.log(s_new) - 0.5 * r / s_new
        if lnew > best:
            best = lnew
        total = 0.0
        for k in range(hi):
            if counts[k] > 0:
                total += math.exp(logp[k] - best)
        total += math.exp(lnew - best)
        u = rng.random() * total
        chosen = -1
        acc = 0.0
        for k in range(hi):
            if counts[k] > 0:
                acc += math.exp(logp[k] - best)
                if u < acc:
                    chosen = k
                    break
        if chosen < 0:  # the new table (also catches rounding at the top end)
            chosen = 0
            while chosen < cap and counts[chosen] > 0:
                chosen += 1
        labels[i] = chosen
        counts[chosen] += 1
        for j in range(d):
            sums[chosen, j] += X[i, j]
        if chosen + 1 > hi:
            hi = chosen + 1
    K = 0
    for k in range(cap):
        if counts[k] > 0:
            K += 1
    return K


def dpmm_posterior(counts, sums, sigma2, rho2, mu0):
    """Posterior variance ``v_k`` (K,) and mean ``m_k`` (K, D) of the cluster means (non-empty slots given)."""
    counts = np.asarray(counts, dtype=np.float64)
    v = 1.0 / (1.0 / rho2 + counts / sigma2)
    m = v[:, None] * (np.asarray(mu0)[None, :] / rho2 + np.asarray(sums) / sigma2)
    return v, m


def dpmm_log_joint(counts, sums, sq_total, n_samples, alpha, sigma2, rho2, mu0):
    """``log p(X, z)`` of the DP mixture: the CRP EPPF times the per-cluster marginal likelihoods.

    Parameters
    ----------
    counts : ndarray (K,) and sums : ndarray (K, D)
        Statistics of the non-empty clusters.
    sq_total : float
        ``||X||_F^2``.
    n_samples : int
    alpha, sigma2, rho2, mu0
        As in :func:`dpmm_sweep`.

    Returns
    -------
    float
        ``K log alpha + sum_k log Gamma(n_k) + log Gamma(alpha) - log Gamma(alpha + N) + sum_k log p(X_k)``, with
        ``log p(X_k) = -n_k D/2 log(2 pi sigma2) + D/2 log(v_k/rho2) + ||m_k||^2/(2 v_k) - ||mu0||^2/(2 rho2)``
        summed, minus ``||X||^2 / (2 sigma2)``.
    """
    counts = np.asarray(counts, dtype=np.float64)
    mu0 = np.asarray(mu0, dtype=np.float64)
    K, D = len(counts), mu0.size
    crp = K * math.log(alpha) + gammaln(counts).sum() + gammaln(alpha) - gammaln(alpha + n_samples)
    v, m = dpmm_posterior(counts, sums, sigma2, rho2, mu0)
    lik = (
        -0.5 * n_samples * D * math.log(2.0 * math.pi * sigma2)
        + 0.5 * D * np.log(v / rho2).sum()
        + ((m * m).sum(axis=1) / (2.0 * v)).sum()
        - K * float(mu0 @ mu0) / (2.0 * rho2)
        - sq_total / (2.0 * sigma2)
    )
    return float(crp + lik)


def dpmm_predict(Xb, counts, means, variances, sigma2):
    """MAP cluster of every row under the posterior predictive: ``argmax_k log n_k + log N(x | m_k, (sigma2+v_k)I)``.

    Returns int32 labels (lowest index on ties).
    """
    Xb = np.asarray(Xb, dtype=np.float64)
    s2 = sigma2 + np.asarray(variances)
    d2 = (Xb * Xb).sum(axis=1)[:, None] - 2.0 * Xb @ means.T + (means * means).sum(axis=1)[None, :]
    d2 = np.maximum(d2, 0.0)
    score = np.log(np.asarray(counts, dtype=np.float64))[None, :] - 0.5 * Xb.shape[1] * np.log(s2)[None, :]
    score = score - 0.5 * d2 / s2[None, :]
    return np.argmax(score, axis=1).astype(np.int32)


# --------------------------------------------------------------------------------------------------------------
# normalized cut ([SL]; ALGORITHMS.md 7)
# --------------------------------------------------------------------------------------------------------------


def rbf_affinity(X, gamma):
    """Dense ``W_ij = exp(-gamma ||x_i - x_j||^2)`` (``gamma = 1/sigma_X^2`` of [SL]); ``W_ii = 1``."""
    X = np.asarray(X, dtype=np.float64)
    sq = (X * X).sum(axis=1)
    d2 = np.maximum(sq[:, None] - 2.0 * (X @ X.T) + sq[None, :], 0.0)
    np.fill_diagonal(d2, 0.0)
    return np.exp(-gamma * d2)


def knn_affinity(X, n_neighbors):
    """Sparse symmetric kNN connectivity ``(C + C^T) / 2``, each row of C marking the row itself and its
    ``n_neighbors - 1`` nearest other rows (scikit-learn's ``include_self=True`` convention)."""
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    k = min(n_neighbors, n)
    _, idx = cKDTree(X).query(X, k=k)
    idx = np.asarray(idx).reshape(n, k)
    rows = np.repeat(np.arange(n), k)
    C = sp.csr_matrix((np.ones(n * k), (rows, idx.ravel())), shape=(n, n))
    return (0.5 * (C + C.T)).tocsr()


def _sign_flip(U):
    """Make the largest-magnitude entry of every column positive (deterministic eigenvector signs)."""
    top = np.argmax(np.abs(U), axis=0)
    signs = np.sign(U[top, np.arange(U.shape[1])])
    signs[signs == 0] = 1.0
    return U * signs


def spectral_embedding(W, n_components, rng):
    """The ``n_components`` smallest eigenpairs of the symmetric normalised Laplacian
    ``L_sym = I - D^-1/2 W D^-1/2``.

    Computed as the largest eigenpairs of ``D^-1/2 W D^-1/2`` (dense ``eigh`` for small N, else ARPACK ``eigsh``
    started from a vector drawn from ``rng``); eigenvector signs are fixed deterministically.

    Returns
    -------
    eigenvalues : ndarray (n_components,)
        Eigenvalues of ``L_sym``, ascending.
    U : ndarray (N, n_components)
        Orthonormal eigenvectors of ``L_sym`` (columns in the same order).
    degree : ndarray (N,)
        ``D = W 1``.
    """
    n = W.shape[0]
    degree = np.asarray(W.sum(axis=1)).ravel()
    inv_sqrt = 1.0 / np.sqrt(degree)
    if sp.issparse(W):
        S = sp.diags(inv_sqrt) @ W @ sp.diags(inv_sqrt)
    else:
        S = inv_sqrt[:, None] * W * inv_sqrt[None, :]
    k = n_components
    if n <= 600 or k >= n - 1:
        dense = S.toarray() if sp.issparse(S) else S
        vals, vecs = eigh(dense, subset_by_index=[n - k, n - 1])
    else:
        v0 = rng.uniform(-1.0, 1.0, size=n)
        vals, vecs = eigsh(S, k=k, which="LA", v0=v0, tol=1e-12)
    order = np.argsort(-vals, kind="stable")
    vals, vecs = vals[order], vecs[:, order]
    return 1.0 - vals, _sign_flip(vecs), degree


def kmeans_lloyd(P, k, rng, *, n_init=10, max_iter=300, state=None, step=None):
    """Seeded in-memory k-means (k-means++ then Lloyd), best of ``n_init`` runs by inertia.

    Checkpoints: ``step(s, inertia)``, when given, is called after every label pass with the loop state ``s`` (a
    dict of arrays and JSON scalars: the run after that pass, or, when the pass ends a run, the next restart with
    ``centres`` None), or None after the last pass of the last run. ``state`` (such an ``s``) resumes from there;
    ``rng`` must then be the generator as it was when ``s`` was made.

    Returns
    -------
    labels : ndarray (N,) int64
    centres : ndarray (k, D)
    inertia : float
    history : list of float
        Inertia after every label pass of the kept run.
    """
    P = np.ascontiguousarray(P, dtype=np.float64)
    w = np.ones(P.shape[0])
    best, first = None, 0
    if state is not None:
        first = int(state["restart"])
        if state["best"] is not None:
            b = state["best"]
            best = (np.asarray(b["labels"], np.int64), np.asarray(b["centres"], np.float64), float(b["inertia"]),
                    [float(v) for v in b["history"]])
    for j in range(first, n_init):
        if state is not None and state["centres"] is not None:
            C, history = np.asarray(state["centres"], np.float64), [float(v) for v in state["history"]]
            labels = np.asarray(state["labels"], np.int64)
        else:
            C, history, labels = kmeans_plusplus(P, w, k, rng), [], None
        state = None
        for _ in range(len(history), max_iter):
            new, moved, cost = lloyd_pass(P, None, C)
            history.append(cost)
            done = labels is not None and np.array_equal(new, labels)
            if not done:
                labels, C = new, moved
                done = len(history) >= max_iter
            if done and (best is None or history[-1] < best[2]):
                best = (labels, C, history[-1], history)
            if step is not None:
                saved = None if best is None else {"labels": best[0], "centres": best[1], "inertia": best[2],
                                                   "history": best[3]}
                if not done:
                    s = {"restart": j, "centres": C, "labels": labels, "history": history, "best": saved}
                elif j + 1 < n_init:
                    s = {"restart": j + 1, "centres": None, "labels": None, "history": [], "best": saved}
                else:
                    s = None
                step(s, history[-1])
            if done:
                break
    return best


def ncut_value(W, labels, degree):
    """``sum_k cut(A_k, complement) / vol(A_k)``; for two classes this is [SL]'s ``Ncut(A, B)``."""
    labels = np.asarray(labels)
    k = int(labels.max()) + 1
    Y = np.zeros((labels.size, k))
    Y[np.arange(labels.size), labels] = 1.0
    inner = (Y * np.asarray(W @ Y)).sum(axis=0)
    vol = np.bincount(labels, weights=degree, minlength=k)
    cut = vol - inner
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.where(vol > 0, cut / vol, 0.0).sum())


def ncut_sweep(W, y, degree):
    """Two-way normalized cut by threshold sweep over ``y`` (the second generalised eigenvector).

    Sorts the rows by ``y``, evaluates ``Ncut(A_t, B_t) = cut/vol(A_t) + cut/vol(B_t)`` for every split of the
    sorted order into the first ``t`` rows and the rest, and takes ``argmin`` ([SL] errata: the slide says argmax).

    Returns
    -------
    labels : ndarray (N,) int64
        1 for the rows above the best threshold, 0 below.
    ncuts : ndarray (N - 1,)
        Ncut of every split; ``ncuts.min()`` is the value achieved.
    """
    n = y.size
    order = np.argsort(y, kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    C = sp.coo_matrix(W)
    top = np.maximum(rank[C.row], rank[C.col])  # the edge is inside the prefix of length t iff top < t
    inner = np.cumsum(np.bincount(top, weights=C.data, minlength=n))[:-1]
    vol_a = np.cumsum(degree[order])[:-1]
    vol_b = degree.sum() - vol_a
    cut = np.maximum(vol_a - inner, 0.0)
    ncuts = cut / vol_a + cut / vol_b
    t = int(np.argmin(ncuts)) + 1
    labels = (rank >= t).astype(np.int64)
    return labels, ncuts


# --------------------------------------------------------------------------------------------------------------
# Indian buffet process, linear-Gaussian model, collapsed Gibbs (Griffiths & Ghahramani 2006; [MB] 5.1)
# --------------------------------------------------------------------------------------------------------------


@numba.njit(**_JIT)
def _remove_column(Z, G, B, m, j, K):
    """Swap-remove column ``j`` of the first ``K`` (Z, G, B, m); returns ``K - 1``."""
    last = K - 1
    if j != last:
        for i in range(Z.shape[0]):
            Z[i, j] = Z[i, last]
        for c in range(K):
            G[j, c] = G[last, c]
        for c in range(K):
            G[c, j] = G[c, last]
        G[j, j] = G[last, last]
        for c in range(B.shape[1]):
            B[j, c] = B[last, c]
        m[j] = m[last]
    for i in range(Z.shape[0]):
        Z[i, last] = 0
    for c in range(K):
        G[last, c] = 0.0
        G[c, last] = 0.0
    for c in range(B.shape[1]):
        B[last, c] = 0.0
    m[last] = 0
    return last


@numba.njit(**_JIT)
def ibp_sweep(X, Z, G, B, m, K, order, alpha, sigma_x, sigma_a, max_new, rng):
    """One collapsed Gibbs sweep of the IBP linear-Gaussian model (in place); returns the new K, or -1 when the
    feature capacity ``Z.shape[1]`` would be exceeded.

    Parameters
    ----------
    X : ndarray (N, D) float64
    Z : ndarray (N, cap) uint8
        Binary features; columns ``[0, K)`` are active, the rest are zero.
    G : ndarray (cap, cap) float64 and B : ndarray (cap, D) float64 and m : ndarray (cap,) int64
        ``Z^T Z``, ``Z^T X`` and the column sums, kept in step with Z.
    K : int
        Active features.
    order : ndarray (N,) int64
        Visiting order of the rows.
    alpha, sigma_x, sigma_a : float
        IBP mass, noise and feature-mean standard deviations.
    max_new : int
        Truncation of the Poisson(alpha / N) number of new features per row.
    rng : numpy.random.Generator

    Notes
    -----
    With ``A`` integrated out, ``x_n | z_n, X_-n, Z_-n ~ N(z_n H, sigma_x^2 (1 + z_n M z_n^T) I)`` with
    ``M = (Z_-n^T Z_-n + sigma_x^2/sigma_a^2 I)^-1`` and ``H = M Z_-n^T X_-n``, so each bit ``z_nk`` of a feature
    used by another row is drawn from ``m_-n,k / N`` times that predictive. Features used only by row n are dropped
    and the number of new features is drawn exactly from ``Poisson(alpha/N)`` truncated at ``max_new`` times the
    predictive, whose variance grows by ``sigma_a^2`` per new feature.
    """
    n, d = X.shape
    cap = Z.shape[1]
    sx2 = sigma_x * sigma_x
    sa2 = sigma_a * sigma_a
    ratio = sx2 / sa2
    lam_new = alpha / n
    logp_new = np.empty(max_new + 1)
    for t in range(n):
        i = order[t]
        # take row i out
        for a in range(K):
            if Z[i, a]:
                m[a] -= 1
                for b in range(K):
                    if Z[i, b]:
                        G[a, b] -= 1.0
                for c in range(d):
                    B[a, c] -= X[i, c]
        # drop the features only row i used (they are re-proposed by the new-feature step)
        a = 0
        while a < K:
            if m[a] == 0:
                Z[i, a] = 0
                K = _remove_column(Z, G, B, m, a, K)
            else:
                a += 1
        # predictive of x_i given the other rows
        Mk = np.zeros((K, K))
        H = np.zeros((K, d))
        z = np.zeros(K)
        Mz = np.zeros(K)
        for a in range(K):
            z[a] = Z[i, a]
        if K > 0:
            Mk = np.ascontiguousarray(np.linalg.inv(G[:K, :K] + ratio * np.eye(K)))
            H = Mk @ np.ascontiguousarray(B[:K])
            Mz = Mk @ z
        mu = np.zeros(d)
        for a in range(K):
            if z[a]:
                for c in range(d):
                    mu[c] += H[a, c]
        q = 0.0
        for a in range(K):
            q += z[a] * Mz[a]
        for a in range(K):
            # the two candidate values of bit a, given the others
            cur = z[a]
            q0 = q - cur * (2.0 * Mz[a] - cur * Mk[a, a])
            q1 = q0 + 2.0 * (Mz[a] - cur * Mk[a, a]) + Mk[a, a]
            r0 = 0.0
            r1 = 0.0
            for c in range(d):
                base = mu[c] - cur * H[a, c]
                r0 += (X[i, c] - base) ** 2
                r1 += (X[i, c] - base - H[a, c]) ** 2
            s0 = sx2 * (1.0 + q0)
            s1 = sx2 * (1.0 + q1)
            p = m[a] / n
            l0 = math.log(1.0 - p) - 0.5 * d * math.log(s0) - 0.5 * r0 / s0
            l1 = math.log(p) - 0.5 * d * math.log(s1) - 0.5 * r1 / s1
            top = max(l0, l1)
            prob1 = math.exp(l1 - top) / (math.exp(l0 - top) + math.exp(l1 - top))
            new = 1.0 if rng.random() < prob1 else 0.0
            if new != cur:
                delta = new - cur
                for b in range(K):
                    Mz[b] += delta * Mk[b, a]
                for c in range(d):
                    mu[c] += delta * H[a, c]
                z[a] = new
                Z[i, a] = np.uint8(new)
                q = q1 if new else q0
        # new features: Poisson(alpha / N), truncated at max_new
        r = 0.0
        for c in range(d):
            r += (X[i, c] - mu[c]) ** 2
        top = -np.inf
        for j in range(max_new + 1):
            s = sx2 * (1.0 + q) + j * sa2
            logp_new[j] = j * math.log(lam_new) - math.lgamma(j + 1.0) - 0.5 * d * math.log(s) - 0.5 * r / s
            if logp_new[j] > top:
                top = logp_new[j]
        total = 0.0
        for j in range(max_new + 1):
            total += math.exp(logp_new[j] - top)
        u = rng.random() * total
        n_new = max_new
        acc = 0.0
        for j in range(max_new + 1):
            acc += math.exp(logp_new[j] - top)
            if u < acc:
                n_new = j
                break
        if K + n_new > cap:
            return -1
        for j in range(n_new):
            Z[i, K + j] = 1
        K += n_new
        # put row i back
        for a in range(K):
            if Z[i, a]:
                m[a] += 1
                for b in range(K):
                    if Z[i, b]:
                        G[a, b] += 1.0
                for c in range(d):
                    B[a, c] += X[i, c]
    return K


def ibp_posterior_features(G, B, sigma_x, sigma_a):
    """Posterior mean of the feature matrix given Z: ``(Z^T Z + sigma_x^2/sigma_a^2 I)^-1 Z^T X`` (K, D)."""
    K = G.shape[0]
    if K == 0:
        return np.zeros((0, B.shape[1]))
    return np.linalg.solve(G + (sigma_x**2 / sigma_a**2) * np.eye(K), B)


def ibp_log_joint(Z, G, B, sq_total, alpha, sigma_x, sigma_a):
    """``log P(X | Z) + log P([Z])`` of the IBP linear-Gaussian model (Griffiths & Ghahramani 2006, eqs. 14, 26).

    ``log P(X|Z) = -ND/2 log 2pi - (N-K)D log sigma_x - KD log sigma_a - D/2 log|Z^T Z + r I|
    - (||X||^2 - tr(B^T M B)) / (2 sigma_x^2)`` with ``r = sigma_x^2/sigma_a^2``, ``M = (Z^T Z + r I)^-1``; and
    ``log P([Z]) = K log alpha - sum_h log K_h! - alpha H_N + sum_k log((N-m_k)!(m_k-1)!/N!)``, where ``K_h`` counts
    identical columns and ``H_N`` is the N-th harmonic number.
    """
    n = Z.shape[0]
    K = Z.shape[1]
    D = B.shape[1]
    r = sigma_x**2 / sigma_a**2
    if K:
        Mb = np.linalg.solve(G + r * np.eye(K), B)
        _, logdet = np.linalg.slogdet(G + r * np.eye(K))
        fit = sq_total - float((B * Mb).sum())
    else:
        logdet, fit = 0.0, sq_total
    lik = (
        -0.5 * n * D * _LOG_2PI - (n - K) * D * math.log(sigma_x) - K * D * math.log(sigma_a) - 0.5 * D * logdet
        - fit / (2.0 * sigma_x**2)
    )
    harmonic = float((1.0 / np.arange(1, n + 1)).sum())
    prior = K * math.log(alpha) - alpha * harmonic
    if K:
        mk = Z.sum(axis=0).astype(np.float64)
        _, mult = np.unique(np.ascontiguousarray(Z.T), axis=0, return_counts=True)
        prior += -gammaln(mult + 1.0).sum() + (gammaln(n - mk + 1.0) + gammaln(mk) - gammaln(n + 1.0)).sum()
    return float(lik + prior)


def ibp_map_codes(Xb, features, feature_probs, sigma_x, *, exhaustive_max=10):
    """Binary codes of new rows with the features fixed: ``argmax_z log N(x | z A, sigma_x^2 I) + log prior(z)``.

    The prior is independent Bernoulli with ``feature_probs`` (the IBP predictive ``m_k / (N + 1)``). Exact
    enumeration of the ``2^K`` codes when ``K <= exhaustive_max``; otherwise coordinate ascent from the all-zero
    code until no bit changes (a local optimum).

    Returns
    -------
    ndarray (n, K) uint8
    """
    Xb = np.asarray(Xb, dtype=np.float64)
    A = np.asarray(features, dtype=np.float64)
    K = A.shape[0]
    n = Xb.shape[0]
    if K == 0:
        return np.zeros((n, 0), dtype=np.uint8)
    p = np.clip(np.asarray(feature_probs, dtype=np.float64), 1e-12, 1 - 1e-12)
    log1, log0 = np.log(p), np.log1p(-p)
    scale = 1.0 / (2.0 * sigma_x**2)
    if K <= exhaustive_max:
        codes = ((np.arange(2**K)[:, None] >> np.arange(K)[None, :]) & 1).astype(np.float64)
        means = codes @ A
        prior = codes @ log1 + (1.0 - codes) @ log0
        d2 = (Xb * Xb).sum(axis=1)[:, None] - 2.0 * Xb @ means.T + (means * means).sum(axis=1)[None, :]
        best = np.argmax(prior[None, :] - scale * np.maximum(d2, 0.0), axis=1)
        return codes[best].astype(np.uint8)
    Zb = np.zeros((n, K))
    resid = Xb.copy()
    norms = (A * A).sum(axis=1)
    for _ in range(100):
        changed = False
        for k in range(K):
            base = resid + Zb[:, k : k + 1] * A[k]
            # gain of z_k = 1 over z_k = 0
            gain = scale * (2.0 * base @ A[k] - norms[k]) + log1[k] - log0[k]
            new = (gain > 0).astype(np.float64)
            if np.any(new != Zb[:, k]):
                changed = True
            Zb[:, k] = new
            resid = base - new[:, None] * A[k]
        if not changed:
            break
    return Zb.astype(np.uint8)
