"""KD-Means: kernelised Dynamic Means ([DM] 5.1-5.2; docs/algorithms.md 4.1-4.2 with the label updates of 3.4)."""

from __future__ import annotations

import numpy as np

from .._registry import register
from ..kernels.kdmeans import kernel_dmeans_step
from ._sdmeans import SpectralDynamicMeans

__all__ = ["KernelDynamicMeans"]


@register
class KernelDynamicMeans(SpectralDynamicMeans):
    """KD-Means: D-Means in the feature space of a kernel, one batch (time step) at a time.

    Each batch is clustered by the D-Means label iterations (eq. 28 with feature-space distances, restarts over
    random point orders, the lowest exact cost eq. 32 kept), with no spectral relaxation. The temporal state is the
    one :class:`SpectralDynamicMeans` carries: old centres kept in feature space by the recursive approximation of
    [DM] 5.2 (support sets of at most ``max_support`` points, eq. 36), weights ``w`` and ages ``dt`` (eq. 24), and
    the deletion rule ``Q dt > lam``. With the linear kernel it is D-Means (docs/algorithms.md DM3 on one batch).

    Parameters
    ----------
    lam, T_Q, k_tau, Q, tau, kernel, bandwidth, max_support, max_batch, random_state, checkpoint
        As in :class:`SpectralDynamicMeans`.
    n_restarts : int, default 1
        Random assignment orders per batch ([DM] 4.2.1); the lowest exact cost is kept.
    max_iter : int, default 100
        Cap on the label passes per restart.

    Attributes
    ----------
    labels_, cluster_ids_, ages_, weights_, support_, support_coef_, support_size_, objective_, n_clusters_,
    n_steps_, history_, lam_, Q_, tau_
        As in :class:`SpectralDynamicMeans`; ``lower_bound_`` and ``history_["lower_bound"]`` are NaN (there is
        no relaxation).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> kd = KernelDynamicMeans(lam=1.0, T_Q=5, k_tau=1.5, kernel="rbf", bandwidth=0.5, random_state=0)
    >>> for t in range(3):
    ...     y = np.repeat(np.arange(2), 20)
    ...     _ = kd.partial_fit(np.array([[0.0, 0.0], [5.0, 5.0]])[y] + 0.1 * rng.standard_normal((40, 2)))
    >>> kd.cluster_ids_.tolist(), len(np.unique(kd.labels_))
    ([0, 1], 2)
    """

    def _partition(self, rng: np.random.Generator, kyy: np.ndarray, kyphi: np.ndarray, kphiphi: np.ndarray,
                   gamma: np.ndarray, penalty: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray, float, float]:
        N = kyy.shape[0]
        if N == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, float("nan")
        best = None
        for _ in range(self.n_restarts):
            labels, linked, J, _ = kernel_dmeans_step(kyy, kyphi, kphiphi, gamma, penalty, lam,
                                                      rng.permutation(N), int(self.max_iter))
            if best is None or J < best[2]:
                best = (labels, linked, J)
        assert best is not None  # n_restarts >= 1
        return (*best, float("nan"))
