"""Seeding on Dask: k-means|| (scalable), k-means++ on a uniform sample, random rows, farthest rows, and the
furthest-first heuristic for DP-means' lam. Every routine takes its randomness from one Generator, and every
per-block draw from (seed, round, block), so results do not depend on the scheduler."""

from __future__ import annotations

import functools

import numpy as np
import dask.array as da

from ..kernels.distances import block_stats, nearest, order_keys, seed_mix
from ..kernels.kmeans import kmeans_plusplus, lloyd
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


def reduce_stats(X: da.Array, w, centers: np.ndarray, split_every=None) -> ClusterStats:
    """One pass: nearest-centre statistics of all rows, tree-reduced."""
    C = np.asarray(centers, dtype=np.float64)
    return map_reduce(_stats_partial, ClusterStats.merge_all, X, w, split_every=split_every, centers=C).compute()[()]


def _stats_partial(Xb, wb, *, offset, block_index, centers):
    return block_stats(Xb, centers, wb, offset=offset, block_index=block_index)


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


def _sample_partial(Xb, wb, *, offset, block_index, mix, threshold):
    """The finite, positively weighted rows of a block whose key (seed, global row index) is below ``threshold``."""
    keys = order_keys(mix, np.arange(offset, offset + Xb.shape[0]))
    keep = keys < np.uint64(threshold)
    rows = np.asarray(Xb[keep], dtype=np.float64)
    w = np.ones(rows.shape[0]) if wb is None else np.asarray(wb, dtype=np.float64)[keep]
    ok = np.isfinite(rows).all(axis=1) & (w > 0)
    return rows[ok], w[ok]


def _round_partial(Xb, wb, *, offset, block_index, centers, oversampling, phi, mix):
    """One k-means|| round on a block: the weight of the rows nearest to every centre, the rows kept with
    probability ``min(1, l * w * D(x)^2 / phi)`` (uniforms from the row keys) with their weights, the potential."""
    labels, dist = nearest(Xb, centers)
    w = np.ones(Xb.shape[0]) if wb is None else np.asarray(wb, dtype=np.float64)
    finite = np.isfinite(dist) & (w > 0)
    counts = np.bincount(labels[finite], weights=w[finite], minlength=centers.shape[0])
    pot = np.where(finite, w * np.where(finite, dist, 0.0), 0.0)
    u = order_keys(mix, np.arange(offset, offset + Xb.shape[0])).astype(np.float64) / 2.0**64
    keep = np.flatnonzero(u < np.minimum(1.0, oversampling * pot / phi)) if phi > 0 else np.empty(0, np.int64)
    return counts, np.asarray(Xb[keep], dtype=np.float64), w[keep], float(pot.sum())


def _merge_sample(parts):
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _merge_round(parts):
    return (sum(p[0] for p in parts), np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
            float(sum(p[3] for p in parts)))


def kmeans_parallel(
    X: da.Array, w, k: int, rng: np.random.Generator, *, oversampling_factor: float = 2.0, rounds: int = 1,
    sample_size: int = 10_000, split_every=None,
) -> np.ndarray:
    """Scalable k-means|| seeding (Bahmani et al. 2012) in ``1 + rounds`` passes over the data.

    Pass 1 draws a uniform sample of about ``sample_size`` rows (a row is taken when the key of its global index is
    small); k-means++ and Lloyd on the sample give ``k`` first candidates. Each of the ``rounds`` passes then
    weighs the candidates (the weight of the rows nearest to each) and oversamples about ``oversampling_factor * k``
    rows with probability proportional to ``w D(x)^2`` (the far rows a sample misses: small or distant clusters);
    rows kept in the last round weigh their own weight. Weighted k-means++ and Lloyd on the candidates, in memory,
    give the ``k`` centres. Every draw is a function of ``rng`` and the global row index, so the seeding does not
    depend on the chunking or the scheduler.
    """
    n = X.shape[0]
    seed = int(rng.integers(2**62))
    m = min(n, max(int(sample_size), 4 * k))
    threshold = 2**64 - 1 if m >= n else int(2.0**64 * m / n)
    S, Sw = map_reduce(_sample_partial, _merge_sample, X, w, split_every=split_every, mix=seed_mix(seed),
                       threshold=threshold).compute()[()]
    if np.unique(S, axis=0).shape[0] < k:  # too few distinct sampled rows (tiny or degenerate data)
        S = np.vstack([S, random_rows(X, k, rng)])
        Sw = np.concatenate([Sw, np.ones(k)])
    C = lloyd(S, Sw, kmeans_plusplus(S, Sw, k, rng), max_iter=30)[0]
    _, dist = nearest(S, C)
    phi = float((Sw * dist).sum()) * n / max(S.shape[0], 1)
    weights = np.ones(C.shape[0])
    for r in range(rounds):
        counts, rows, row_w, phi_now = map_reduce(
            _round_partial, _merge_round, X, w, split_every=split_every, centers=C,
            oversampling=oversampling_factor * k, phi=phi, mix=seed_mix(seed + 1 + r),
        ).compute()[()]
        C = np.vstack([C, rows])
        weights = np.concatenate([counts, row_w])
        phi = phi_now
        if phi <= 0:
            break
    keep = weights > 0
    if np.count_nonzero(keep) < k:  # every row sits on fewer than k candidates: keep them all
        keep[:] = True
        weights = np.maximum(weights, np.finfo(float).tiny)
    C, weights = C[keep], weights[keep]
    return lloyd(C, weights, kmeans_plusplus(C, weights, k, rng), max_iter=30)[0]


def _farthest_partial(Xb, wb, *, offset, block_index, centers, m):
    _, dist = nearest(Xb, centers)
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


def farthest_rows(X: da.Array, w, centers: np.ndarray, m: int, split_every=None):
    """The ``m`` rows farthest from their nearest centre (ties: lowest index): (distances, indices, rows)."""
    C = np.asarray(centers, dtype=np.float64)
    return map_reduce(_farthest_partial, functools.partial(_merge_farthest, m=m), X, w, split_every=split_every,
                      centers=C, m=m).compute()[()]


def furthest_first(X: da.Array, k: int, start: np.ndarray, split_every=None) -> tuple[np.ndarray, np.ndarray]:
    """The k-th furthest-first heuristic (docs/algorithms.md 1.3): ``k`` parallel max-reductions.

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
