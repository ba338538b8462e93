"""Collapsed Gibbs for the Dirichlet-process mixture with a Normal-Normal conjugate model (docs/algorithms.md 7):
known isotropic variance ``sigma2``, prior ``N(mu0, rho2 I)`` on the means, concentration ``alpha``. The slow, exact
reference for DP-means. Pure numpy/numba; randomness only from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import numpy.typing as npt
from scipy.special import gammaln


__all__ = ['dpmm_sweep', 'dpmm_posterior', 'dpmm_log_joint', 'dpmm_predict']

_JIT = dict(nogil=True, cache=True)


# --------------------------------------------------------------------------------------------------------------
# DP mixture, Normal-Normal conjugate, collapsed Gibbs ([SL]; docs/algorithms.md 7)
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


def dpmm_posterior(counts: npt.ArrayLike, sums: npt.ArrayLike, sigma2: float, rho2: float, mu0: npt.ArrayLike
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Posterior variance ``v_k`` (K,) and mean ``m_k`` (K, D) of the cluster means (non-empty slots given)."""
    counts = np.asarray(counts, dtype=np.float64)
    v = 1.0 / (1.0 / rho2 + counts / sigma2)
    m = v[:, None] * (np.asarray(mu0)[None, :] / rho2 + np.asarray(sums) / sigma2)
    return v, m


def dpmm_log_joint(counts: npt.ArrayLike, sums: npt.ArrayLike, sq_total: float, n_samples: int, alpha: float,
                   sigma2: float, rho2: float, mu0: npt.ArrayLike) -> float:
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


def dpmm_predict(Xb: npt.ArrayLike, counts: npt.ArrayLike, means: np.ndarray, variances: npt.ArrayLike, sigma2: float
                 ) -> np.ndarray:
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


