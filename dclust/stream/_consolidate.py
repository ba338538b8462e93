"""Consolidation of cluster summaries: weighted DP-means over (weight, mean) pairs, on the driver.

Any-time DP-means ([DM] 4.1) keeps one summary per cluster: its weight ``w_k`` (points seen) and mean ``mu_k``. For
any partition of the summaries into groups that keep each summary whole, the DP-means objective of the data is

    sum_k S_k + sum_k w_k ||mu_k - theta_{z_k}||^2 + lam * n_groups,

with ``S_k`` the (constant) scatter of summary k about its own mean. :func:`consolidate` minimises the last two terms
by DP-means coordinate descent over the summaries (each weighted summary joins the group whose centre is cheapest,
or opens a group at cost lam; the centres are then the weighted means), so the objective of the data never rises.
Cost O(K^2 D) per sweep for K summaries: nothing reads the data. :func:`refine_pass` adds one read (a Lloyd pass
over the data, tree-reduced) followed by a consolidation, and converges to a fixed point of both moves.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt

__all__ = ["consolidate", "refine_pass"]


def consolidate(means: np.ndarray, weights: np.ndarray, lam: float, *, max_iter: int = 100
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted DP-means over cluster summaries.

    Parameters
    ----------
    means : ndarray (K, D)
        Summary means.
    weights : ndarray (K,)
        Summary weights (> 0).
    lam : float
        DP-means penalty per group.
    max_iter : int, default 100
        Cap on the sweeps (each sweep visits the summaries in order of decreasing weight, ties by index).

    Returns
    -------
    centers : ndarray (G, D)
        Weighted mean of each group.
    group_weights : ndarray (G,)
        Summed weight of each group.
    groups : ndarray (K,) int64
        Group of every summary, in [0, G); groups are numbered by their first summary in input order.

    Examples
    --------
    >>> c, w, g = consolidate(np.array([[0.0], [0.1], [5.0]]), np.array([2.0, 2.0, 1.0]), lam=1.0)
    >>> c.ravel().tolist(), w.tolist(), g.tolist()
    ([0.05, 5.0], [4.0, 1.0], [0, 0, 1])
    """
    mu = np.asarray(means, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    K = mu.shape[0]
    if K == 0:
        return mu.copy(), w.copy(), np.zeros(0, np.int64)
    order = np.lexsort((np.arange(K), -w))
    groups = np.full(K, -1, np.int64)
    centers = np.zeros((0, mu.shape[1]))
    for _ in range(max_iter):
        previous = groups.copy()
        theta = list(centers)
        for i in order:
            if theta:
                cost = w[i] * ((np.asarray(theta) - mu[i]) ** 2).sum(axis=1)
                j = int(np.argmin(cost))
                if cost[j] <= lam:  # ties go to the existing group (as DP-means prefers a cluster over a new one)
                    groups[i] = j
                    continue
            theta.append(mu[i].copy())
            groups[i] = len(theta) - 1
        groups, centers, gw = _means(mu, w, groups)
        if np.array_equal(groups, previous):
            break
    return centers, gw, groups


def _means(mu: npt.NDArray[np.float64], w: npt.NDArray[np.float64], groups: npt.NDArray[np.int64]
           ) -> tuple[npt.NDArray[Any], npt.NDArray[np.float64], npt.NDArray[Any]]:
    """Renumber non-empty groups by their first member and compute weighted means."""
    _, first = np.unique(groups, return_index=True)
    rank = np.empty(groups.max() + 1, np.int64)
    rank[groups[np.sort(first)]] = np.arange(first.size)
    g = rank[groups]
    gw = np.bincount(g, weights=w)
    centers = np.zeros((first.size, mu.shape[1]))
    np.add.at(centers, g, w[:, None] * mu)
    return g, centers / gw[:, None], gw


def refine_pass(X: da.Array, sample_weight: da.Array | None, centers: np.ndarray, lam: float
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """One read of X: a Lloyd pass (nearest-centre statistics, tree-reduced) then :func:`consolidate`.

    Returns ``(centers, weights, objective)`` where ``objective = SSE + lam K`` of the data for the centres given
    (the objective the pass measured, before its own update).
    """
    from .._dask.init import reduce_stats

    stats = reduce_stats(X, sample_weight, np.asarray(centers, dtype=np.float64))
    objective = float(stats.cost) + lam * len(centers)
    keep = stats.weight > 0
    new_centers, weights, _ = consolidate(stats.mean[keep], stats.weight[keep], lam)
    return new_centers, weights, objective
