"""Bregman divergences of RDP-means (docs/algorithms.md 5.2): squared Euclidean and generalised KL for count data.

For KL the data rows are Laplace-smoothed and normalised first (:func:`smooth_rows`), so every row and every
centre (a mean of rows) sums to 1 and ``D(x, mu) = sum_j x_j log x_j - x . log mu``. The mean is the optimal
centre for both divergences.
"""

from __future__ import annotations

import numpy as np

from .distances import nearest

__all__ = ["KINDS", "smooth_rows", "neg_entropy", "divergence_matrix", "divergence_nearest", "divergence_rows"]

KINDS = ("euclidean", "kl")
_TILE = 4096


def smooth_rows(X: np.ndarray, alpha: float) -> np.ndarray:
    """``(X + alpha) / rowsum(X + alpha)`` in float64: the Laplace smoothing of [TV] 5.3 for count rows.

    Rows holding a negative count give NaN (reported by the first pass as bad data).
    """
    X = np.asarray(X, dtype=np.float64) + alpha
    out = X / X.sum(axis=1, keepdims=True)
    out[(X < alpha).any(axis=1)] = np.nan
    return out


def neg_entropy(X: np.ndarray) -> np.ndarray:
    """``h(x) = sum_j x_j log x_j`` of every row (rows of a smoothed, positive matrix)."""
    X = np.asarray(X, dtype=np.float64)
    return (X * np.log(X)).sum(axis=1)


def divergence_matrix(X: np.ndarray, C: np.ndarray, kind: str) -> np.ndarray:
    """``D(x_n, mu_k)`` for all rows and centres, shape (n, K): direct differences (small inputs only)."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64).reshape(-1, X.shape[1])
    if kind == "euclidean":
        return ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    return neg_entropy(X)[:, None] - X @ np.log(C).T


def divergence_rows(X: np.ndarray, C: np.ndarray, kind: str) -> np.ndarray:
    """``D(x_n, c_n)`` row by row (``C`` has one centre per row of ``X``)."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    if kind == "euclidean":
        return ((X - C) ** 2).sum(axis=1)
    return neg_entropy(X) - (X * np.log(C)).sum(axis=1)


def divergence_nearest(X: np.ndarray, C: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre (lowest index on ties) and its divergence for every row of a block.

    Euclidean uses the fused :func:`dclust.kernels.distances.nearest`; KL works in tiles of rows, so the
    temporary is at most ``4096 x K``. A non-finite row gets label -1 and divergence NaN.
    """
    if kind == "euclidean":
        return nearest(X, C)
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    labels = np.full(n, -1, dtype=np.int32)
    dist = np.full(n, np.nan)
    if C.shape[0] == 0:
        return labels, np.full(n, np.inf)
    logc = np.log(np.asarray(C, dtype=np.float64)).T
    for s in range(0, n, _TILE):
        xb = X[s : s + _TILE]
        d = neg_entropy(xb)[:, None] - xb @ logc
        ok = np.isfinite(d).all(axis=1)
        lab = np.argmin(np.where(ok[:, None], d, 0.0), axis=1)
        labels[s : s + _TILE] = np.where(ok, lab, -1)
        dist[s : s + _TILE] = np.where(ok, d[np.arange(xb.shape[0]), lab], np.nan)
    return labels, dist
