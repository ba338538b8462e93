"""Normalized-cut spectral clustering pieces ([SL]; docs/algorithms.md 7): affinities, the symmetric normalised
embedding, a seeded numpy k-means, and the two-way threshold sweep that takes ``argmin Ncut`` ([SL] errata).
Pure numpy/scipy; randomness only from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh
from scipy.spatial import cKDTree

from .kmeans import kmeans_plusplus, lloyd_pass

__all__ = ['rbf_affinity', 'knn_affinity', 'spectral_embedding', 'kmeans_lloyd', 'ncut_value', 'ncut_sweep']



# --------------------------------------------------------------------------------------------------------------
# normalized cut ([SL]; docs/algorithms.md 7)
# --------------------------------------------------------------------------------------------------------------


def rbf_affinity(X: npt.ArrayLike, gamma: float) -> np.ndarray:
    """Dense ``W_ij = exp(-gamma ||x_i - x_j||^2)`` (``gamma = 1/sigma_X^2`` of [SL]); ``W_ii = 1``."""
    X = np.asarray(X, dtype=np.float64)
    sq = (X * X).sum(axis=1)
    d2 = np.maximum(sq[:, None] - 2.0 * (X @ X.T) + sq[None, :], 0.0)
    np.fill_diagonal(d2, 0.0)
    return np.exp(-gamma * d2)


def knn_affinity(X: npt.ArrayLike, n_neighbors: int) -> Any:
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


def spectral_embedding(W: Any, n_components: int, rng: np.random.Generator
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def kmeans_lloyd(P: npt.ArrayLike, k: int, rng: np.random.Generator, *, n_init: int = 10, max_iter: int = 300,
                 state: dict[str, Any] | None = None,
                 step: Callable[[dict[str, Any] | None, float], None] | None = None
                 ) -> tuple[np.ndarray, np.ndarray, float, list[float]]:
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


def ncut_value(W: Any, labels: npt.ArrayLike, degree: np.ndarray) -> float:
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


def ncut_sweep(W: Any, y: np.ndarray, degree: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


