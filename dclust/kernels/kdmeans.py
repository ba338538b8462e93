"""KD-Means kernel ([DM] 5.1-5.2): one time step of D-Means in the feature space of a kernel, pure numpy.

Notation as :mod:`dclust.kernels.sdmeans`: ``kyy`` (N, N) batch Gram matrix, ``kyphi`` (N, K) products of the batch
with the old centres, ``kphiphi`` (K,), ``gamma`` (K,) of eq. 19, ``penalty`` (K,) = ``Q dt_k``.

Every centre is kept implicitly as ``theta_c = a_c phi_{k(c)} + sum_j C_jc omega(y_j)`` (``a_c = 0`` for a new
cluster), so squared feature-space distances are ``kyy_ii - 2 (a_c kyphi_{i,k(c)} + (kyy C)_ic) + ||theta_c||^2``.
The label pass follows docs/algorithms.md 3.4 and section 0: eq. 28 with every centre fixed during the pass except the
one-point optimum of a cluster a point revives or opens; emptied clusters stay options until the pass ends; then
eq. 29 (which, in feature space, is the membership itself) and the loop stops when no label changes.
"""

from __future__ import annotations

import numpy as np

from .sdmeans import exact_cost

__all__ = ["kernel_dmeans_step"]


def kernel_dmeans_step(kyy: np.ndarray, kyphi: np.ndarray, kphiphi: np.ndarray, gamma: np.ndarray,
                       penalty: np.ndarray, lam: float, order: np.ndarray, max_iter: int = 100
                       ) -> tuple[np.ndarray, np.ndarray, float, list[float]]:
    """Kernelised D-Means label iterations for one batch, from no instantiation, visiting points in ``order``.

    Returns
    -------
    labels : ndarray (N,) int64
        Cluster of every point in [0, L), clusters numbered by first appearance in point order.
    linked : ndarray (L,) int64
        The old cluster each cluster revives, or -1 for a new one.
    objective : float
        Exact cost eq. 32 of the result.
    history : list of float
        Eq. 32 after every pass (non-increasing).

    Examples
    --------
    >>> y = np.array([[0.0], [0.1], [5.0]])
    >>> labels, linked, J, _ = kernel_dmeans_step(y @ y.T, np.zeros((3, 0)), np.zeros(0), np.zeros(0),
    ...                                           np.zeros(0), 1.0, np.arange(3))
    >>> labels.tolist(), linked.tolist()
    ([0, 0, 1], [-1, -1])
    """
    N, K = kyphi.shape
    diag = np.diag(kyy).copy()
    z = np.full(N, -1, np.int64)  # cluster of each point: old k in [0, K), new clusters K, K+1, ...
    history: list[float] = []
    for _ in range(max_iter):
        prev = z.copy()
        cl = _Centers(kyy, kyphi, kphiphi, gamma, z, K)
        revive_cost = penalty[None, :] + (gamma / (gamma + 1.0))[None, :] * (
            diag[:, None] - 2.0 * kyphi + kphiphi[None, :]) if K else np.zeros((N, 0))
        for i in order:
            cost, kinds = cl.costs(i, diag[i], revive_cost[i] if K else None, lam)
            j = int(np.argmin(cost))  # ties: instantiated < revival < new (their order in ``cost``)
            z[i] = cl.take(i, kinds[j], diag[i])
        z = _compact_new(z, K)
        labels, linked = _labels(z, K)
        history.append(exact_cost(labels, linked, kyy, kyphi, kphiphi, gamma, penalty, lam))
        if np.array_equal(z, prev):
            break
    labels, linked = _labels(z, K)
    return labels, linked, history[-1], history


class _Centers:
    """Implicit centres of one label pass: fixed ones from the previous memberships, plus pass-time openings."""

    def __init__(self, kyy, kyphi, kphiphi, gamma, z, K):
        self.kyy, self.kyphi, self.kphiphi, self.gamma, self.K = kyy, kyphi, kphiphi, gamma, K
        ids = np.unique(z[z >= 0])
        self.ids = list(ids)  # cluster id of each instantiated centre (column)
        N = kyy.shape[0]
        C = np.zeros((N, len(ids)))
        a = np.zeros(len(ids))
        for c, k in enumerate(ids):
            members = z == k
            n = members.sum()
            g = gamma[k] if k < K else 0.0
            C[members, c] = 1.0 / (g + n)
            a[c] = g / (g + n)
        self.KC = kyy @ C  # (N, L): sum_j C_jc kyy_ij
        phi = np.array([kyphi[:, k] if k < K else np.zeros(N) for k in ids]).T.reshape(N, len(ids))
        self.aphi = phi * a[None, :]  # a_c kyphi_{i, k(c)}
        kpp = np.array([kphiphi[k] if k < K else 0.0 for k in ids])
        self.norm = a * a * kpp + 2.0 * a * (C * phi).sum(0) + (C * self.KC).sum(0)
        self.next_new = max(K, int(z.max()) + 1 if (z >= 0).any() else K)

    def costs(self, i, kii, revive, lam):
        inst = kii - 2.0 * (self.aphi[i] + self.KC[i]) + self.norm
        kinds = [("inst", c) for c in range(len(self.ids))]
        parts = [inst]
        if revive is not None:
            active = set(k for k in self.ids if k < self.K)
            old = [k for k in range(self.K) if k not in active]
            parts.append(revive[old])
            kinds += [("revive", k) for k in old]
        parts.append(np.array([lam]))
        kinds.append(("new", -1))
        return np.concatenate(parts), kinds

    def take(self, i, kind, kii):
        what, c = kind
        if what == "inst":
            return int(self.ids[c])
        if what == "revive":  # theta <- (gamma phi + omega(y_i)) / (gamma + 1)
            g = self.gamma[c]
            self._add(c, self.kyy[:, i] / (g + 1.0), self.kyphi[:, c] * g / (g + 1.0),
                      (g * g * self.kphiphi[c] + 2.0 * g * self.kyphi[i, c] + kii) / (g + 1.0) ** 2)
            return int(c)
        k = self.next_new  # theta <- omega(y_i)
        self.next_new += 1
        self._add(k, self.kyy[:, i].copy(), np.zeros(self.kyy.shape[0]), kii)
        return int(k)

    def _add(self, k, kc, aphi, norm):
        self.ids.append(k)
        self.KC = np.column_stack([self.KC, kc])
        self.aphi = np.column_stack([self.aphi, aphi])
        self.norm = np.append(self.norm, norm)


def _compact_new(z, K):
    """Renumber the new clusters that kept points as K, K+1, ... (emptied new clusters are destroyed)."""
    out = z.copy()
    new = np.unique(z[z >= K])
    for r, k in enumerate(new):
        out[z == k] = K + r
    return out


def _labels(z, K):
    """Compact labels in order of first appearance, and the old cluster each label revives (-1 if new)."""
    _, first = np.unique(z, return_index=True)
    ids = z[np.sort(first)]
    rank = {int(k): r for r, k in enumerate(ids)}
    labels = np.array([rank[int(k)] for k in z], dtype=np.int64)
    linked = np.array([int(k) if k < K else -1 for k in ids], dtype=np.int64)
    return labels, linked
