"""The temporal state of SD-Means: old clusters whose centres live in feature space as support sets.

Stored in save-able form (docs/algorithms.md 4.2): a padded array of support points, a padded array of coefficients and
the number of valid entries per cluster, next to the persistent ids, weights ``w`` and ages ``dt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["OldClusters"]


@dataclass
class OldClusters:
    """K old clusters; ``support[k, :size[k]]`` with ``coef[k, :size[k]]`` represents ``phi_k``."""

    ids: np.ndarray  # (K,) int64
    weights: np.ndarray  # (K,) float64, w > 0
    ages: np.ndarray  # (K,) int64, dt >= 1
    support: np.ndarray  # (K, M, D) float64
    coef: np.ndarray  # (K, M) float64
    size: np.ndarray  # (K,) int64

    @classmethod
    def empty(cls, n_features: int) -> "OldClusters":
        return cls(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros((0, 1, n_features)),
                   np.zeros((0, 1)), np.zeros(0, np.int64))

    @classmethod
    def from_lists(cls, ids: Sequence[int], weights: Sequence[float], ages: Sequence[int],
                   supports: Sequence[np.ndarray], coefs: Sequence[np.ndarray], n_features: int) -> "OldClusters":
        """Pack per-cluster support points (list of (s_k, D) arrays) and coefficients into padded arrays."""
        K = len(ids)
        if K == 0:
            return cls.empty(n_features)
        M = max(1, max(len(c) for c in coefs))
        support = np.zeros((K, M, n_features))
        coef = np.zeros((K, M))
        size = np.zeros(K, np.int64)
        for k, (U, a) in enumerate(zip(supports, coefs)):
            support[k, : len(a)] = U
            coef[k, : len(a)] = a
            size[k] = len(a)
        return cls(np.asarray(ids, np.int64), np.asarray(weights, np.float64), np.asarray(ages, np.int64),
                   support, coef, size)

    @property
    def n_clusters(self) -> int:
        return int(self.ids.shape[0])

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """All valid support points stacked, (S, D), and the cluster each belongs to, (S,)."""
        D = self.support.shape[2]
        if self.n_clusters == 0:
            return np.zeros((0, D)), np.zeros(0, np.int64)
        mask = np.arange(self.support.shape[1])[None, :] < self.size[:, None]
        owner = np.repeat(np.arange(self.n_clusters), self.size)
        return self.support[mask], owner

    def flat_coef(self) -> np.ndarray:
        """Coefficients of :meth:`points`, (S,)."""
        mask = np.arange(self.coef.shape[1])[None, :] < self.size[:, None]
        return self.coef[mask]

    def feature_products(self, gram_yu: np.ndarray, gram_uu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``kyphi`` (N, K) and ``kphiphi`` (K,) from the Gram blocks of the points against all supports.

        ``gram_yu`` is (N, S) and ``gram_uu`` is (S, S), over the support points in :meth:`points` order.
        """
        _, owner = self.points()
        a = self.flat_coef()
        K = self.n_clusters
        A = np.zeros((len(a), K))
        A[np.arange(len(a)), owner] = a
        kyphi = gram_yu @ A
        kphiphi = (A * (gram_uu @ A)).sum(axis=0)
        return kyphi, kphiphi

    def offsets(self) -> np.ndarray:
        """Start of each cluster's supports in :meth:`points` order, (K + 1,)."""
        return np.concatenate([[0], np.cumsum(self.size)]).astype(np.int64)
