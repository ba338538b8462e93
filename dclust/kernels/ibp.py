"""Collapsed Gibbs for the Indian-buffet linear-Gaussian model (Griffiths & Ghahramani 2006; the sampler [MB] 5.1
compares BP-means with): the feature means ``A`` are integrated out. Pure numpy/numba; randomness only from the
``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt
from scipy.special import gammaln


__all__ = ['ibp_sweep', 'ibp_posterior_features', 'ibp_log_joint', 'ibp_map_codes']

_JIT = dict(nogil=True, cache=True)
_LOG_2PI = math.log(2.0 * math.pi)


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


def ibp_posterior_features(G: np.ndarray, B: np.ndarray, sigma_x: float, sigma_a: float) -> np.ndarray:
    """Posterior mean of the feature matrix given Z: ``(Z^T Z + sigma_x^2/sigma_a^2 I)^-1 Z^T X`` (K, D)."""
    K = G.shape[0]
    if K == 0:
        return np.zeros((0, B.shape[1]))
    return np.linalg.solve(G + (sigma_x**2 / sigma_a**2) * np.eye(K), B)


def ibp_log_joint(Z: np.ndarray, G: np.ndarray, B: np.ndarray, sq_total: float, alpha: float, sigma_x: float,
                  sigma_a: float) -> float:
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


def ibp_map_codes(Xb: npt.ArrayLike, features: npt.ArrayLike, feature_probs: npt.ArrayLike, sigma_x: float, *,
                  exhaustive_max: int = 10) -> np.ndarray:
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
