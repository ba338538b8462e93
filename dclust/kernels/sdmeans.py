"""SD-Means kernels (docs/algorithms.md section 4): pure numpy/scipy, one step's small dense matrices in, arrays out.

Notation: ``N`` points in the batch, ``K`` old clusters, ``kyy`` the (N, N) Gram matrix of the batch, ``kyphi`` the
(N, K) matrix ``omega(y_i)^T phi_k``, ``kphiphi`` the (K,) vector ``phi_k^T phi_k``, ``gamma`` the (K,) vector of
eq. 19 and ``penalty`` the (K,) vector ``Q * dt_k``. Nothing here validates user input or imports dask.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import eigh
from scipy.optimize import linear_sum_assignment
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree, shortest_path

__all__ = [
    "linear_kernel",
    "rbf_kernel",
    "squared_distances",
    "mst_path_distances",
    "mst_kernel",
    "build_G",
    "relaxation_constant",
    "lower_bound",
    "spectral_embedding",
    "yu_shi_init",
    "discretize",
    "matching_costs",
    "match_clusters",
    "exact_cost",
    "sparsify",
]


# --------------------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------------------


def squared_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(len(A), len(B)) squared Euclidean distances in float64, clipped at 0."""
    A = np.asarray(A, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    d = (A * A).sum(1)[:, None] - 2.0 * (A @ B.T) + (B * B).sum(1)[None, :]
    return np.maximum(d, 0.0, out=d)


def linear_kernel(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B.T`` in float64, shape (len(A), len(B))."""
    return np.asarray(A, dtype=np.float64) @ np.asarray(B, dtype=np.float64).T


def rbf_kernel(A: np.ndarray, B: np.ndarray, bandwidth: float) -> np.ndarray:
    """``exp(-||a - b||^2 / (2 bandwidth^2))``, shape (len(A), len(B)).

    Examples
    --------
    >>> float(rbf_kernel(np.zeros((1, 2)), np.array([[1.0, 0.0]]), 1.0)[0, 0]) == float(np.exp(-0.5))
    True
    """
    return np.exp(-squared_distances(A, B) / (2.0 * bandwidth * bandwidth))


def mst_path_distances(D2: np.ndarray, bandwidth: float, n_tree: int | None = None, combine: str = "sum") -> np.ndarray:
    """Path distances through the Euclidean minimum spanning tree, counting only edges longer than ``bandwidth``.

    The tree is built on the first ``n_tree`` points (the batch). ``d_ij`` between two tree points is the sum of
    the lengths of the tree edges on the path from i to j that exceed ``bandwidth`` (docs/algorithms.md 10.2, E-DM8).
    A point outside the tree (a support point of an old centre) is attached to its nearest tree point, and the
    attaching edge counts like a tree edge; two points closer than ``bandwidth`` are at distance 0 (this is also
    what the tree gives for two tree points, by the cycle property of minimum spanning trees). Edges of length
    <= bandwidth are contracted first (connected components), so the result is exact; the remaining tree over the
    components is solved with Dijkstra.

    Parameters
    ----------
    D2 : ndarray (n, n)
        Squared Euclidean distances between the points.
    bandwidth : float
        omega > 0.
    n_tree : int, optional
        Number of leading points that form the tree (default, and when 0: all of them).
    combine : {"sum", "rss"}, default "sum"
        ``"sum"``: ``d`` is the sum of the long edges' lengths (docs/algorithms.md 10.2). ``"rss"``: ``d`` is the root
        of the sum of their squared lengths, as the authors' program computes it (``MSTKernelModel::dist`` in
        github.com/trevorcampbell/dynamic-means); a path through several long edges is then shorter.

    Returns
    -------
    ndarray (n, n) float64, symmetric, zero diagonal.

    Examples
    --------
    >>> x = np.array([[0.0], [0.05], [0.1], [0.5]])
    >>> mst_path_distances((x - x.T) ** 2, 0.07)[0].round(6).tolist()
    [0.0, 0.0, 0.0, 0.4]
    >>> mst_path_distances((x - x.T) ** 2, 0.07, n_tree=3)[3].round(6).tolist()
    [0.4, 0.4, 0.4, 0.0]
    """
    n = D2.shape[0]
    m = n if not n_tree else int(n_tree)
    if n <= 1:
        return np.zeros((n, n))
    dist = np.sqrt(np.maximum(D2, 0.0))
    # scipy treats dense zeros as missing edges: duplicate points get a tiny positive length (still "light").
    tiny = np.finfo(np.float64).tiny
    tdist = np.where(dist[:m, :m] > 0, dist[:m, :m], tiny)
    np.fill_diagonal(tdist, 0.0)
    tree = minimum_spanning_tree(tdist).tocoo()
    light = tree.data <= bandwidth
    n_comp, comp = connected_components(
        _coo((tree.data[light], (tree.row[light], tree.col[light])), m), directed=False
    )
    heavy = ~light
    p = 2.0 if combine == "rss" else 1.0
    if n_comp > 1:
        ctree = _coo((tree.data[heavy] ** p, (comp[tree.row[heavy]], comp[tree.col[heavy]])), n_comp)
        dc = shortest_path(ctree, method="D", directed=False)
    else:
        dc = np.zeros((1, 1))
    nearest = np.arange(n)
    hop = np.zeros(n)
    if m < n:
        nearest[m:] = np.argmin(dist[m:, :m], axis=1)
        hop[m:] = dist[np.arange(m, n), nearest[m:]]
        hop[hop <= bandwidth] = 0.0
    c = comp[nearest]
    d = dc[c[:, None], c[None, :]] + hop[:, None] ** p + hop[None, :] ** p
    if p != 1.0:
        d = np.sqrt(d)
    d[dist < bandwidth] = 0.0
    np.fill_diagonal(d, 0.0)
    return d


def _coo(data_ij, n):
    from scipy.sparse import coo_matrix

    return coo_matrix(data_ij, shape=(n, n)).tocsr()


def mst_kernel(D2: np.ndarray, bandwidth: float, n_tree: int | None = None, combine: str = "sum") -> np.ndarray:
    """The MST-path kernel of [DM] 8.2: ``exp(-d^2 / (2 bandwidth^2))`` with ``d`` from :func:`mst_path_distances`.

    Not positive semi-definite in general (docs/algorithms.md 4.5); SD-Means only uses the eigenvalues above lam.
    """
    d = mst_path_distances(D2, bandwidth, n_tree, combine)
    return np.exp(-(d * d) / (2.0 * bandwidth * bandwidth))


# --------------------------------------------------------------------------------------------------------------
# spectral relaxation (4.3)
# --------------------------------------------------------------------------------------------------------------


def build_G(kyy: np.ndarray, kyphi: np.ndarray, kphiphi: np.ndarray, gamma: np.ndarray,
            penalty: np.ndarray) -> np.ndarray:
    """The (N+K) square matrix ``G = [[kyy, kyphi Gamma^1/2], [Gamma^1/2 kyphi^T, Gamma diag(kphiphi) + Omega]]``.

    ``Omega = diag(Q * dt_k)`` (E-DM3). With ``K = 0`` this is ``kyy``.
    """
    n, k = kyphi.shape
    G = np.empty((n + k, n + k), dtype=np.float64)
    G[:n, :n] = kyy
    if k:
        s = np.sqrt(gamma)
        G[:n, n:] = kyphi * s[None, :]
        G[n:, :n] = G[:n, n:].T
        G[n:, n:] = np.diag(gamma * kphiphi + penalty)
    return G


def relaxation_constant(kyy_diag_sum: float, kphiphi: np.ndarray, gamma: np.ndarray, penalty: np.ndarray,
                        lam: float) -> float:
    """``tr kyy + sum_k gamma_k kphiphi_k + sum_k Q dt_k - lam K`` (the constant of 4.3)."""
    return float(kyy_diag_sum + np.sum(gamma * kphiphi) + np.sum(penalty) - lam * len(gamma))


def lower_bound(eigenvalues: np.ndarray, lam: float, constant: float) -> float:
    """``LB = constant - sum_i max(sigma_i - lam, 0)``; LB <= exact cost of any clustering (4.3)."""
    return float(constant - np.sum(np.maximum(np.asarray(eigenvalues) - lam, 0.0)))


def spectral_embedding(G: np.ndarray, n_data: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Eigendecompose G (float64) and return ``(Vbar, eigenvalues)``.

    ``Vbar`` (n_data, A) holds the eigenvectors with eigenvalue > lam (or the single top one if none), without the
    last K rows, each row normalised to unit length (zero rows are left at zero). Only those eigenpairs are
    computed, and ``eigenvalues`` holds only them: :func:`lower_bound` needs no others.
    """
    G = np.asarray(G, dtype=np.float64)
    m = G.shape[0]
    # only the eigenpairs above lam are used (and all the lower bound needs): ask LAPACK for just those
    sigma, V = eigh(G, driver="evr", subset_by_value=(lam, np.inf))
    if sigma.size == 0:
        sigma, V = eigh(G, driver="evr", subset_by_index=(m - 1, m - 1))
    Vs = V[:n_data][:, ::-1].copy()  # largest eigenvalue first
    norms = np.linalg.norm(Vs, axis=1)
    nz = norms > 0
    Vs[nz] /= norms[nz, None]
    return Vs, sigma


# --------------------------------------------------------------------------------------------------------------
# discretisation (4.4, Yu & Shi 2003)
# --------------------------------------------------------------------------------------------------------------


def yu_shi_init(Vbar: np.ndarray, first: int) -> np.ndarray:
    """Initial rotation: row ``first`` of Vbar, then repeatedly the row most orthogonal to those chosen.

    Returns U (A, A) whose columns are rows of Vbar.
    """
    n, a = Vbar.shape
    U = np.empty((a, a))
    U[:, 0] = Vbar[first]
    acc = np.zeros(n)
    for j in range(1, a):
        acc += np.abs(Vbar @ U[:, j - 1])
        U[:, j] = Vbar[int(np.argmin(acc))]
    return U


def discretize(Vbar: np.ndarray, first: int, max_iter: int = 100) -> tuple[np.ndarray, float]:
    """Coordinate descent on ``||X - Vbar U||_F^2`` over one-hot X and orthogonal U (eqs. 49 and 50).

    Parameters
    ----------
    Vbar : ndarray (N, A)
        Row-normalised eigenvectors (:func:`spectral_embedding`).
    first : int
        Row used for the first column of the initial U (:func:`yu_shi_init`).
    max_iter : int
        Cap on the iterations (the loop stops earlier, when the loss stops decreasing).

    Returns
    -------
    labels : ndarray (N,) int64
        Column of each row's maximum (temporary cluster index in [0, A)); the best X seen.
    loss : float
        ``||X - Vbar U||_F^2`` for those labels and the U fitted to them.
    """
    n, a = Vbar.shape
    U = yu_shi_init(Vbar, first)
    best_labels, best_loss = None, np.inf
    for _ in range(max_iter):
        labels = np.argmax(Vbar @ U, axis=1)
        XtV = np.zeros((a, a))
        np.add.at(XtV, labels, Vbar)
        R, _, Wt = np.linalg.svd(XtV)
        U = Wt.T @ R.T
        P = Vbar @ U
        loss = float(n - 2.0 * P[np.arange(n), labels].sum() + (P * P).sum())
        if loss < best_loss - 1e-12 * max(n, 1):
            best_labels, best_loss = labels, loss
        else:
            break
    return best_labels.astype(np.int64), best_loss


# --------------------------------------------------------------------------------------------------------------
# matching (eq. 51) and exact cost (eq. 32)
# --------------------------------------------------------------------------------------------------------------


def _cluster_sums(labels: np.ndarray, n_clusters: int, kyy: np.ndarray, kyphi: np.ndarray):
    """Per temporary cluster l: n_l, sum_{i,j in I_l} kyy_ij and sum_{i in I_l} kyphi_ik (L, K)."""
    onehot = np.zeros((len(labels), n_clusters))
    onehot[np.arange(len(labels)), labels] = 1.0
    n = onehot.sum(0)
    syy = np.einsum("il,ij,jl->l", onehot, kyy, onehot)
    syphi = onehot.T @ kyphi
    return n, syy, syphi


def matching_costs(labels: np.ndarray, n_clusters: int, kyy: np.ndarray, kyphi: np.ndarray,
                   kphiphi: np.ndarray, gamma: np.ndarray, penalty: np.ndarray, lam: float) -> np.ndarray:
    """(L, K) cost of temporary cluster l reviving old cluster k instead of being new (eq. 51).

    ``cost_lk = Q dt_k - lam + gamma_k zeta_lk / (gamma_k + n_l)``, with
    ``zeta_lk = n_l kphiphi_k - 2 sum_{i in I_l} kyphi_ik + (1/n_l) sum_{i,j in I_l} kyy_ij``. Every l must be
    non-empty.
    """
    n, syy, syphi = _cluster_sums(labels, n_clusters, kyy, kyphi)
    zeta = n[:, None] * kphiphi[None, :] - 2.0 * syphi + (syy / n)[:, None]
    return penalty[None, :] - lam + gamma[None, :] * zeta / (gamma[None, :] + n[:, None])


def match_clusters(cost: np.ndarray) -> np.ndarray:
    """Minimum-cost partial matching of rows to columns, using only negative costs (Lemma 1 of [DM]).

    Solves ``linear_sum_assignment`` on ``min(cost, 0)`` padded to a square matrix and keeps the pairs whose cost is
    < 0. Returns ``match`` (L,) int64: the column matched to each row, or -1.

    Examples
    --------
    >>> match_clusters(np.array([[-1.0, -3.0], [-2.0, 5.0]])).tolist()
    [1, 0]
    """
    L, K = cost.shape
    match = np.full(L, -1, dtype=np.int64)
    if L == 0 or K == 0:
        return match
    m = max(L, K)
    padded = np.zeros((m, m))
    padded[:L, :K] = np.minimum(cost, 0.0)
    rows, cols = linear_sum_assignment(padded)
    for r, c in zip(rows, cols):
        if r < L and c < K and cost[r, c] < 0:
            match[r] = c
    return match


def exact_cost(labels: np.ndarray, linked: np.ndarray, kyy: np.ndarray, kyphi: np.ndarray, kphiphi: np.ndarray,
               gamma: np.ndarray, penalty: np.ndarray, lam: float) -> float:
    """Exact kernelised cost eq. 32 of a clustering of the batch.

    Parameters
    ----------
    labels : ndarray (N,) int
        Cluster index of every point in [0, L); every cluster non-empty.
    linked : ndarray (L,) int
        The old cluster each cluster revives (index into the K old clusters), or -1 for a new cluster.
    kyy, kyphi, kphiphi, gamma, penalty, lam
        As in the module docstring.
    """
    L = len(linked)
    n, syy, syphi = _cluster_sums(labels, L, kyy, kyphi)
    J = float(np.trace(kyy))
    for l in range(L):
        k = int(linked[l])
        if k < 0:
            J += lam - syy[l] / n[l]
        else:
            g = gamma[k]
            J += penalty[k] + (g * n[l] * kphiphi[k] - 2.0 * g * syphi[l, k] - syy[l]) / (g + n[l])
    return J


# --------------------------------------------------------------------------------------------------------------
# old centres in feature space (4.2)
# --------------------------------------------------------------------------------------------------------------


def sparsify(W: np.ndarray, abar: np.ndarray, max_support: int, rtol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Greedy orthogonal matching pursuit in feature space for ``argmin_{card(x)<=m} (abar-x)^T W (abar-x)`` (eq. 36).

    Each round adds the regressor with the largest one-step cost reduction ``r_j^2 / W_jj`` (``r = W (abar - x)``),
    then refits the coefficients on the support by solving ``W_SS x_S = W_S: abar`` with a jitter of
    ``1e-10 * tr(W_SS) / |S|`` on the diagonal. Stops at ``|S| = max_support`` or when the cost falls below
    ``rtol * abar^T W abar``. When ``len(abar) <= max_support`` the combination is returned unchanged.

    Returns
    -------
    support : ndarray (s,) int64
        Indices into ``abar`` that are kept, s <= max_support.
    coef : ndarray (s,) float64
    """
    v = len(abar)
    if v <= max_support:
        return np.arange(v, dtype=np.int64), abar.astype(np.float64).copy()
    Wa = W @ abar
    total = float(abar @ Wa)
    diag = np.clip(np.diag(W).copy(), 1e-300, None)
    chosen: list[int] = []
    x = np.zeros(0)
    resid = Wa.copy()
    while len(chosen) < max_support:
        score = resid * resid / diag
        score[chosen] = -np.inf
        j = int(np.argmax(score))
        if not np.isfinite(score[j]) or score[j] <= 0:
            break
        chosen.append(j)
        S = np.asarray(chosen)
        Wss = W[np.ix_(S, S)]
        jitter = 1e-10 * max(np.trace(Wss), 1e-300) / len(S)
        x = np.linalg.solve(Wss + jitter * np.eye(len(S)), Wa[S])
        resid = Wa - W[:, S] @ x
        cost = total - 2.0 * float(x @ Wa[S]) + float(x @ Wss @ x)
        if cost <= rtol * abs(total):
            break
    return np.asarray(chosen, dtype=np.int64), x
