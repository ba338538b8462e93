"""In-memory k-means pieces: weighted k-means++, per-block generators, and THE in-memory Lloyd iteration
(:func:`lloyd_pass`, :func:`lloyd`) used wherever points fit in memory (k-means|| candidates, the reference spectral
clustering, TVClust's start, the video palettes)."""

from __future__ import annotations

import numpy as np

from .distances import assign_stats

__all__ = ["kmeans_plusplus", "block_rng", "lloyd_pass", "lloyd"]


def block_rng(seed: int, *keys: int) -> np.random.Generator:
    """A generator for one block of one round: depends only on (seed, keys), never on the scheduler."""
    return np.random.default_rng([int(seed), *map(int, keys)])


def kmeans_plusplus(
    P: np.ndarray, weights: np.ndarray, k: int, rng: np.random.Generator, n_local_trials: int | None = None
) -> np.ndarray:
    """Greedy weighted k-means++ seeding on in-memory points ``P`` (m, D); returns (k, D) centres.

    Each step draws ``2 + log(k)`` candidates with probability proportional to ``w * D(x)^2`` and keeps the one that
    lowers the potential most (as in scikit-learn). Needs ``m >= k`` points with positive weight.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster import kmeans_plusplus
    >>> P = np.array([[0.0], [0.1], [10.0], [10.1]])
    >>> C = kmeans_plusplus(P, np.ones(4), 2, np.random.default_rng(0))
    >>> sorted(round(float(c)) for c in C.ravel())
    [0, 10]
    """
    P = np.asarray(P, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    m = P.shape[0]
    trials = n_local_trials or 2 + int(np.log(k))
    first = rng.choice(m, p=w / w.sum())
    centers = [P[first]]
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
        centers.append(P[cand[best]])
        closest = new_closest[best]
    return np.array(centers)


def lloyd_pass(P: np.ndarray, w: np.ndarray | None, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One in-memory Lloyd iteration with the fused kernel: ``(labels, centres, cost)`` -- every point of ``P``
    (m, D) assigned to its nearest centre of ``C`` (lowest index on ties), the centres moved to the (``w``-weighted;
    None: unweighted) means of their points (an empty cluster keeps its centre), and the weighted squared-distance
    cost of the assignment."""
    C = np.asarray(C, dtype=np.float64)
    stats, labels, _ = assign_stats(P, C, w)
    return labels.astype(np.int64), np.where((stats.weight > 0)[:, None], stats.mean, C), float(stats.cost)


def lloyd(
    P: np.ndarray, w: np.ndarray | None, C: np.ndarray, *, max_iter: int, rtol: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, int, bool, list[float]]:
    """In-memory Lloyd iterations (:func:`lloyd_pass`) from ``C`` until the partition repeats, the squared centre
    shift is at most ``rtol * max(1, ||C||^2)`` (when ``rtol > 0``), or ``max_iter`` iterations.

    Returns ``(centres, labels, n_iter, converged, history)``: ``labels`` of the last assignment (the centres are
    their means), ``history`` the cost of every assignment.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster import lloyd
    >>> P = np.array([[0.0], [1.0], [10.0], [11.0]])
    >>> C, labels, n_iter, converged, _ = lloyd(P, None, np.array([[0.0], [1.0]]), max_iter=10)
    >>> C.ravel().tolist(), labels.tolist(), converged
    ([0.5, 10.5], [0, 0, 1, 1], True)
    """
    if max_iter < 1:
        raise ValueError(f"lloyd: max_iter >= 1 expected, got {max_iter}")
    C = np.asarray(C, dtype=np.float64)
    labels: np.ndarray | None = None
    history: list[float] = []
    for it in range(1, max_iter + 1):
        new_labels, new, cost = lloyd_pass(P, w, C)
        history.append(cost)
        shift = float(((new - C) ** 2).sum())
        repeated = labels is not None and np.array_equal(new_labels, labels)
        C, labels = new, new_labels
        if repeated or (rtol > 0 and shift <= rtol * max(1.0, float((C * C).sum()))):
            return C, labels, it, True, history
    assert labels is not None  # max_iter >= 1 passes ran
    return C, labels, max_iter, False, history
