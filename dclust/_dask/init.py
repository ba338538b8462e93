"""Seeding on Dask: k-means|| (scalable), k-means++ on a uniform sample, random rows, farthest rows, and the
furthest-first heuristic for DP-means' lam. Every routine takes its randomness from one Generator, and every
per-block draw from (seed, round, block), so results do not depend on the scheduler."""

from __future__ import annotations

import functools

import numpy as np
import dask.array as da

from ..kernels.distances import block_stats, nearest
from ..kernels.kmeans import block_rng, kmeans_plusplus, lloyd, oversample_block
from ..kernels.stats import ClusterStats
from .passes import map_reduce

__all__ = [
    "take_rows",
    "random_rows",
    "kmeans_parallel",
    "kmeans_plusplus_sample",
    "farthest_rows",
    "furthest_first",
    "reduce_stats",
]


def reduce_stats(X: da.Array, w, centres: np.ndarray, split_every=None) -> ClusterStats:
    """One pass: nearest-centre statistics of all rows, tree-reduced."""
    C = np.asarray(centres, dtype=np.float64)
    return map_reduce(_stats_partial, ClusterStats.merge_all, X, w, split_every=split_every, centres=C).compute()[()]


def _stats_partial(Xb, wb, *, offset, block_index, centres):
    return block_stats(Xb, centres, wb, offset=offset, block_index=block_index)


def take_rows(X: da.Array, index) -> np.ndarray:
    """Rows ``X[index]`` as float64, in the order of ``index`` (reads only the chunks that hold them)."""
    index = np.asarray(index, dtype=np.int64)
    if index.size == 0:
        return np.empty((0, X.shape[1]))
    uniq, inverse = np.unique(index, return_inverse=True)
    rows = np.asarray(X[uniq].compute(), dtype=np.float64)
    return rows[inverse]


def random_rows(X: da.Array, k: int, rng: np.random.Generator) -> np.ndarray:
    """``k`` distinct rows drawn uniformly."""
    return take_rows(X, np.sort(rng.choice(X.shape[0], size=k, replace=False)))


def kmeans_plusplus_sample(X: da.Array, w, k: int, rng, sample_size: int = 10_000) -> np.ndarray:
    """k-means++ (greedy, weighted) on a uniform sample of ``sample_size`` rows."""
    n = X.shape[0]
    m = min(n, max(sample_size, k))
    idx = np.sort(rng.choice(n, size=m, replace=False))
    P = take_rows(X, idx)
    pw = np.ones(m) if w is None else np.asarray(w[idx].compute(), dtype=np.float64)
    return kmeans_plusplus(P, pw, k, rng)


def _oversample_partial(Xb, wb, *, offset, block_index, centres, oversampling, phi, seed, round_):
    rows, _, pot = oversample_block(Xb, wb, centres, oversampling, phi, block_rng(seed, round_, block_index))
    return rows, pot


def _merge_samples(parts):
    return np.concatenate([p[0] for p in parts]), float(sum(p[1] for p in parts))


def kmeans_parallel(
    X: da.Array, w, k: int, rng: np.random.Generator, *, oversampling_factor: float = 2.0, rounds: int = 5,
    split_every=None,
) -> np.ndarray:
    """k-means|| (Bahmani et al. 2012): ``rounds`` passes each oversampling about ``oversampling_factor * k``
    candidates with probability proportional to ``w D(x)^2``, a weighting pass, then weighted k-means++ and Lloyd on
    the candidates in memory.

    To keep one pass per round, round r draws with the potential measured in round r-1 (which is at least the
    current one), so a round keeps at most ``l`` points in expectation rather than exactly ``l``.
    """
    n = X.shape[0]
    seed = int(rng.integers(2**62))
    C = take_rows(X, [int(rng.integers(n))])
    phi = reduce_stats(X, w, C, split_every).cost
    ell = oversampling_factor * k
    for r in range(rounds):
        rows, phi_now = map_reduce(
            _oversample_partial, _merge_samples, X, w, split_every=split_every, centres=C, oversampling=ell, phi=phi,
            seed=seed, round_=r,
        ).compute()[()]
        C = np.vstack([C, rows])
        phi = phi_now
        if phi <= 0:
            break
    stats = reduce_stats(X, w, C, split_every)
    weights = stats.weight
    if C.shape[0] < k or np.count_nonzero(weights) < k:
        extra = random_rows(X, k, rng)
        C = np.vstack([C, extra])
        weights = np.concatenate([weights, np.ones(k)])
    centres = kmeans_plusplus(C, weights, k, rng)
    return lloyd(C, weights, centres, max_iter=30)[0]


def _farthest_partial(Xb, wb, *, offset, block_index, centres, m):
    _, dist = nearest(Xb, centres)
    dist = np.where(np.isnan(dist), -np.inf, dist)
    if wb is not None:
        dist = np.where(np.asarray(wb) > 0, dist, -np.inf)  # zero-weight rows can't become centres
    order = np.lexsort((np.arange(dist.size), -dist))[:m]
    return dist[order], order + offset, np.asarray(Xb[order], dtype=np.float64)


def _merge_farthest(parts, m):
    d = np.concatenate([p[0] for p in parts])
    i = np.concatenate([p[1] for p in parts])
    x = np.concatenate([p[2] for p in parts])
    order = np.lexsort((i, -d))[:m]
    return d[order], i[order], x[order]


def farthest_rows(X: da.Array, w, centres: np.ndarray, m: int, split_every=None):
    """The ``m`` rows farthest from their nearest centre (ties: lowest index): (distances, indices, rows)."""
    C = np.asarray(centres, dtype=np.float64)
    return map_reduce(_farthest_partial, functools.partial(_merge_farthest, m=m), X, w, split_every=split_every,
                      centres=C, m=m).compute()[()]


def furthest_first(X: da.Array, k: int, start: np.ndarray, split_every=None) -> tuple[np.ndarray, np.ndarray]:
    """The k-th furthest-first heuristic (ALGORITHMS.md 1.3): ``k`` parallel max-reductions.

    Starting from ``T = {start}``, repeatedly add the row farthest (squared distance) from T, lowest index on ties.
    Returns the k distances ``lambda_1..lambda_k`` and the (k+1, D) set T.
    """
    T = np.atleast_2d(np.asarray(start, dtype=np.float64))
    lams = []
    for _ in range(k):
        d, _, x = farthest_rows(X, None, T, 1, split_every)
        lams.append(float(d[0]))
        T = np.vstack([T, x[:1]])
    return np.array(lams), T
