"""Block kernel of the covariance-penalised (Mahalanobis) k-means of [MB] Appendix E: pure numpy, one block in,
hard Gaussian statistics out."""

from __future__ import annotations

import numpy as np

from .gmpr import GaussianStats

__all__ = ["mahalanobis_labels", "mahalanobis_stats", "covariance_step"]


def mahalanobis_labels(X: np.ndarray, means: np.ndarray, whiten: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, distances)``: every row's cluster ``argmin_k (x - mu_k)' Sigma_k^{-1} (x - mu_k)`` (lowest index
    on ties) and that distance. ``whiten[k]`` is ``L_k^{-1}`` with ``Sigma_k = L_k L_k'``. One (n,) running minimum:
    no (n, K) array."""
    X = np.asarray(X, dtype=np.float64)
    best = np.full(X.shape[0], np.inf)
    labels = np.zeros(X.shape[0], dtype=np.int64)
    for k in range(means.shape[0]):
        Y = (X - means[k]) @ whiten[k].T
        d = (Y * Y).sum(axis=1)
        closer = d < best
        best[closer] = d[closer]
        labels[closer] = k
    return labels, best


def mahalanobis_stats(Xb, *, offset, block_index, means, whiten) -> GaussianStats:
    """Partial of one pass: per-cluster count, mean and scatter (about the cluster's block mean) of the rows
    assigned by :func:`mahalanobis_labels`; ``loglik`` carries the block's sum of Mahalanobis distances."""
    X = np.asarray(Xb, dtype=np.float64)
    K, D = means.shape
    if not np.isfinite(X).all():
        out = GaussianStats.identity(K, D, 1, False)
        out.bad_block = block_index
        return out
    labels, dist = mahalanobis_labels(X, means, whiten)
    weight = np.bincount(labels, minlength=K).astype(np.float64)
    mean = np.zeros((K, D))
    scatter = np.zeros((K, D, D))
    for k in np.flatnonzero(weight):
        rows = X[labels == k]
        mean[k] = rows.mean(axis=0)
        diff = rows - mean[k]
        scatter[k] = diff.T @ diff
    return GaussianStats(weight, mean, scatter, np.zeros(1), float(dist.sum()), int(X.shape[0]))


def covariance_step(scatter: np.ndarray, lam: float, floor: float) -> tuple[np.ndarray, float]:
    """``(Sigma, value)``: the minimiser of ``tr(S Sigma^{-1}) + lam log|Sigma|`` over ``Sigma`` with every
    eigenvalue >= ``floor`` (eigenvalue-wise: ``sigma = max(s / lam, floor)``) and the minimum's value."""
    s, V = np.linalg.eigh(scatter)
    s = np.maximum(s, 0.0)
    sigma = np.maximum(s / lam, floor)
    return (V * sigma) @ V.T, float((s / sigma).sum() + lam * np.log(sigma).sum())
