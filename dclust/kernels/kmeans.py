"""In-memory pieces of k-means initialisation: weighted k-means++, and per-block generators."""

from __future__ import annotations

import numpy as np

from .distances import nearest

__all__ = ["kmeans_plusplus", "block_rng"]


def block_rng(seed: int, *keys: int) -> np.random.Generator:
    """A generator for one block of one round: depends only on (seed, keys), never on the scheduler."""
    return np.random.default_rng([int(seed), *map(int, keys)])


def kmeans_plusplus(
    P: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator, n_local_trials: int | None = None
) -> np.ndarray:
    """Greedy weighted k-means++ seeding on in-memory points ``P`` (m, D); returns (k, D) centres.

    Each step draws ``2 + log(k)`` candidates with probability proportional to ``w * D(x)^2`` and keeps the one that
    lowers the potential most (as in scikit-learn). Needs ``m >= k`` points with positive weight.
    """
    P = np.asarray(P, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    m = P.shape[0]
    trials = n_local_trials or 2 + int(np.log(k))
    first = rng.choice(m, p=w / w.sum())
    centres = [P[first]]
    closest = ((P - P[first]) ** 2).sum(axis=1)
    for _ in range(1, k):
        pot = w * closest
        total = pot.sum()
        if total <= 0:  # every point coincides with a centre: take the heaviest unused point
            cand = np.array([int(np.argmax(np.where(closest > 0, w, -1)))])
        else:
            cand = np.searchsorted(np.cumsum(pot), rng.random(trials) * total)
            cand = np.minimum(cand, m - 1)
        d_cand = ((P[None, :, :] - P[cand][:, None, :]) ** 2).sum(axis=2)
        new_closest = np.minimum(closest[None, :], d_cand)
        best = int(np.argmin((new_closest * w[None, :]).sum(axis=1)))
        centres.append(P[cand[best]])
        closest = new_closest[best]
    return np.array(centres)
