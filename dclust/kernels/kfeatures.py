"""Kernels of the K-features family (docs/algorithms.md 2.4-2.6): the greedy K-means++-style feature initialisation,
exhaustive row optimisation, and the per-row sampling keys that make the greedy draw one min-reduction."""

from __future__ import annotations

import itertools

import numba
import numpy as np

from .stats import point_keys

__all__ = ["greedy_rows", "greedy_rows_numpy", "draw_keys", "exhaustive_rows", "MAX_EXHAUSTIVE"]

_JIT = dict(nogil=True, cache=True, error_model="numpy")
#: ``exhaustive=True`` enumerates 2**K rows; allowed up to this K.
MAX_EXHAUSTIVE = 12


@numba.njit(**_JIT)
def _greedy_rows(X, A):
    n, D = X.shape
    K = A.shape[0]
    Z = np.zeros((n, K), dtype=np.uint8)
    q = np.empty(n)
    r = np.empty(D)
    for i in range(n):
        rr = 0.0
        for j in range(D):
            r[j] = np.float64(X[i, j]) - A[0, j]
            rr += r[j] * r[j]
        Z[i, 0] = 1
        for k in range(1, K):
            tt = 0.0
            for j in range(D):
                t = r[j] - A[k, j]
                tt += t * t
            if tt < rr:  # strictly better (T1)
                Z[i, k] = 1
                for j in range(D):
                    r[j] -= A[k, j]
                rr = tt
        q[i] = rr
    return Z, q


def greedy_rows(X: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bits of the greedy initialisation (docs/algorithms.md 2.6) for features ``A`` (row 0 is the base feature).

    ``z_0 = 1``; then for k = 1, 2, ...: ``z_k = 1`` iff subtracting ``a_k`` strictly lowers the residual.
    Returns ``(Z (n, K) uint8, q (n,) squared residuals)``. Rows are independent, so this is a map over blocks.
    """
    A = np.ascontiguousarray(A, dtype=np.float64).reshape(-1, X.shape[1])
    if A.shape[0] == 0:
        X = np.asarray(X, dtype=np.float64)
        return np.zeros((X.shape[0], 0), np.uint8), (X * X).sum(axis=1)
    return _greedy_rows(np.asarray(X), A)


def greedy_rows_numpy(X: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Plain-numpy twin of :func:`greedy_rows` (vectorised over rows; the test oracle)."""
    X = np.asarray(X, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    Z = np.zeros((X.shape[0], A.shape[0]), np.uint8)
    Z[:, 0] = 1
    R = X - A[0]
    for k in range(1, A.shape[0]):
        better = ((R - A[k]) ** 2).sum(axis=1) < (R**2).sum(axis=1)
        Z[better, k] = 1
        R[better] -= A[k]
    return Z, (R**2).sum(axis=1)


def draw_keys(index: np.ndarray, weights: np.ndarray, seed: int, round_: int) -> np.ndarray:
    """Exponential race keys ``E_n / w_n`` (E_n ~ Exp(1) from a hash of (seed, round, global row index)).

    The row with the smallest key is a draw with probability proportional to ``w_n``; keys depend on the row's
    global index only, so the draw does not depend on the chunking. Rows with ``w_n <= 0`` or NaN get ``inf``.
    """
    salt = point_keys(np.array([seed % 2**63, round_], dtype=np.uint64))
    bits = point_keys(np.asarray(index, dtype=np.uint64) ^ salt[0]) ^ salt[1]
    u = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    w = np.asarray(weights, dtype=np.float64)
    keys = np.full(w.shape, np.inf)
    ok = w > 0
    keys[ok] = -np.log(u[ok]) / w[ok]
    return keys


def exhaustive_rows(X: np.ndarray, Z: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, int]:
    """Best of all ``2**K`` bit rows for every row of ``X`` (docs/algorithms.md 2.4, ``exhaustive=True``).

    A row keeps its current bits ``Z`` unless another combination is strictly better (T1); among equally good
    others the first in lexicographic order wins (T2). Returns the new ``Z`` and the number of rows changed.
    """
    A = np.asarray(A, dtype=np.float64)
    K = A.shape[0]
    X = np.asarray(X, dtype=np.float64)
    combos = np.array(list(itertools.product((0, 1), repeat=K)), dtype=np.float64).reshape(-1, K)
    recon = combos @ A  # (2^K, D)
    cost = (X * X).sum(axis=1)[:, None] - 2.0 * X @ recon.T + (recon * recon).sum(axis=1)[None, :]
    powers = 1 << np.arange(K - 1, -1, -1)
    cur = (Z.astype(np.int64) * powers).sum(axis=1) if K else np.zeros(X.shape[0], np.int64)
    cur_cost = cost[np.arange(X.shape[0]), cur]
    best = np.argmin(cost, axis=1)
    move = cost[np.arange(X.shape[0]), best] < cur_cost
    out = Z.copy()
    out[move] = combos[best[move]].astype(np.uint8)
    return out, int(move.sum())
