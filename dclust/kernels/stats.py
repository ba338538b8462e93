"""The ClusterStats monoid: per-cluster weight, mean and scatter, merged with Chan's rule.

A block of points with labels becomes a :class:`ClusterStats`; any number of them merge associatively and
commutatively into the statistics of the union. Means and scatters (not raw sums of squares) are carried so that
data with a large offset keeps its digits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ClusterStats", "point_keys"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def point_keys(global_index: np.ndarray) -> np.ndarray:
    """Pseudo-random 64-bit keys of points (splitmix64 of the global row index).

    The per-cluster wrap-around sum of these keys fingerprints a partition: two passes that give every point the
    same label give equal fingerprints, and different partitions collide with probability about 2**-64.
    """
    z = np.asarray(global_index, dtype=np.uint64) * _GOLDEN + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _pad(a: np.ndarray, k: int) -> np.ndarray:
    if a.shape[0] == k:
        return a
    out = np.zeros((k,) + a.shape[1:], dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def chan_means(w: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chan's parallel rule for the means of ``P`` parts of ``K`` clusters: from their weights ``w`` (P, K) and
    means ``m`` (P, K, D), the merged weights (K,), the merged means (K, D) (0 for an empty cluster) and every
    part's offset ``m - mean`` (P, K, D), which the merged scatter adds weighted."""
    weight = w.sum(axis=0)
    safe = np.where(weight > 0, weight, 1.0)
    mean = np.einsum("pk,pkd->kd", w, m) / safe[:, None]
    return weight, mean, m - mean[None]


@dataclass
class ClusterStats:
    """Sufficient statistics of a labelled set of points.

    Attributes
    ----------
    weight : (K,) float64
        Total sample weight per cluster.
    mean : (K, D) float64
        Weighted mean per cluster (0 for an empty cluster).
    scatter : (K,) float64
        ``sum_n w_n ||x_n - mean_k||^2`` over the points of cluster k (the SSE about the cluster's own mean).
    cost : float
        ``sum_n w_n d(x_n, centre used in the pass)``: the assignment-step objective.
    fingerprint : (K,) uint64
        Wrap-around sum of :func:`point_keys` of the cluster's points (detects unchanged partitions).
    n_rows : int
        Number of rows seen (including those of zero weight).
    bad_block : int
        Lowest index of a block that held a NaN or infinite value, or -1.
    """

    weight: np.ndarray
    mean: np.ndarray
    scatter: np.ndarray
    cost: float = 0.0
    fingerprint: np.ndarray = field(default=None)  # type: ignore[assignment]
    n_rows: int = 0
    bad_block: int = -1

    def __post_init__(self) -> None:
        if self.fingerprint is None:
            self.fingerprint = np.zeros(self.weight.shape[0], dtype=np.uint64)

    @property
    def n_clusters(self) -> int:
        return int(self.weight.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[1])

    @classmethod
    def identity(cls, n_clusters: int, n_features: int) -> "ClusterStats":
        """The neutral element: K empty clusters."""
        return cls(
            weight=np.zeros(n_clusters),
            mean=np.zeros((n_clusters, n_features)),
            scatter=np.zeros(n_clusters),
        )

    @classmethod
    def from_labels(
        cls,
        X: np.ndarray,
        labels: np.ndarray,
        n_clusters: int,
        sample_weight: np.ndarray | None = None,
        *,
        cost: float = 0.0,
        offset: int = 0,
        index: np.ndarray | None = None,
    ) -> "ClusterStats":
        """Statistics of the rows of ``X`` with ``labels`` (plain numpy; the oracle for the fused kernels).

        The rows' global indices are ``offset + arange(n)``, or ``index`` when given.
        """
        X = np.asarray(X, dtype=np.float64)
        labels = np.asarray(labels, dtype=np.intp)
        n_rows = X.shape[0]
        w = np.ones(n_rows) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        keys = point_keys(np.arange(offset, offset + n_rows) if index is None else index)
        valid = labels >= 0  # label -1 marks a row with no nearest centre (NaN or inf)
        X, labels, w, keys = X[valid], labels[valid], w[valid], keys[valid]
        weight = np.bincount(labels, weights=w, minlength=n_clusters).astype(np.float64)
        sums = np.zeros((n_clusters, X.shape[1]))
        np.add.at(sums, labels, X * w[:, None])
        mean = np.divide(sums, weight[:, None], out=np.zeros_like(sums), where=weight[:, None] > 0)
        resid = ((X - mean[labels]) ** 2).sum(axis=1) * w
        scatter = np.bincount(labels, weights=resid, minlength=n_clusters).astype(np.float64)
        fp = np.zeros(n_clusters, dtype=np.uint64)
        np.add.at(fp, labels, keys)
        return cls(weight, mean, scatter, float(cost), fp, int(n_rows), 0 if not valid.all() else -1)

    def merge(self, *others: "ClusterStats") -> "ClusterStats":
        """Merge with other statistics (Chan's parallel rule, generalised to many parts)."""
        return ClusterStats.merge_all((self,) + others)

    @staticmethod
    def merge_all(parts) -> "ClusterStats":
        parts = list(parts)
        if len(parts) == 1:
            return parts[0]
        k = max(p.n_clusters for p in parts)
        w = np.stack([_pad(p.weight, k) for p in parts])
        m = np.stack([_pad(p.mean, k) for p in parts])
        weight, mean, delta = chan_means(w, m)
        delta2 = (delta**2).sum(axis=2)
        scatter = sum(_pad(p.scatter, k) for p in parts) + (w * delta2).sum(axis=0)
        fp = np.zeros(k, dtype=np.uint64)
        for p in parts:
            fp[: p.n_clusters] += p.fingerprint
        bad = [p.bad_block for p in parts if p.bad_block >= 0]
        return ClusterStats(
            weight=weight,
            mean=mean,
            scatter=scatter,
            cost=float(sum(p.cost for p in parts)),
            fingerprint=fp,
            n_rows=int(sum(p.n_rows for p in parts)),
            bad_block=min(bad) if bad else -1,
        )

    def total(self) -> tuple[float, np.ndarray, float]:
        """Weight, mean and scatter of all points together (the one-cluster merge)."""
        w = self.weight.sum()
        if w <= 0:
            return 0.0, np.zeros(self.n_features), 0.0
        mean = (self.weight[:, None] * self.mean).sum(axis=0) / w
        scatter = self.scatter.sum() + (self.weight * ((self.mean - mean) ** 2).sum(axis=1)).sum()
        return float(w), mean, float(scatter)

    def select(self, keep: np.ndarray) -> "ClusterStats":
        """Statistics restricted (and renumbered) to the clusters ``keep``, in that order."""
        return ClusterStats(
            self.weight[keep], self.mean[keep], self.scatter[keep], self.cost, self.fingerprint[keep],
            self.n_rows, self.bad_block,
        )
