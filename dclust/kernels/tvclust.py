"""TVClust Gibbs sampler (docs/algorithms.md 5.6, with E-TV1 and E-TV2): a Dirichlet-process mixture of Gaussians
with a Normal-inverse-Wishart base measure and noisy must/cannot links, sampled with Neal's Algorithm 2.

In-memory reference code for small N: pure numpy, seeded by one ``numpy.random.Generator``.

Link likelihood (E-TV1): ``P(E=1|same) = p``, ``P(E=0|same) = 1−p``, ``P(E=0|diff) = q``, ``P(E=1|diff) = 1−q``.
A must-link is an observed ``E=1``, a cannot-link an observed ``E=0``; other pairs are unobserved. The link
factor of cluster ``k`` for point ``i`` is written without dividing by the all-different baseline,

``f log p + (F−f) log(1−q) + s log(1−p) + (S−s) log q``

(``F``, ``S``: the point's must/cannot-link counts; ``f``, ``s``: those in cluster ``k``), and the new-cluster
factor is ``F log(1−q) + S log q`` (E-TV2). Differences between options equal eq. 13's
``(p/(1−q))^f ((1−p)/q)^s``, and ``p = 1`` or ``q = 1`` give hard constraints (``0 · log 0 = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
from scipy.special import gammaln
from scipy.stats import invwishart

__all__ = [
    "NIWPrior", "LinkLists", "GibbsState", "gaussian_logpdf", "log_predictive", "sample_niw", "Gibbs",
    "option_log_weights",
]

_LOG_PI = np.log(np.pi)


@dataclass(frozen=True)
class NIWPrior:
    """Normal-inverse-Wishart prior: ``Σ ~ IW(dof, scale)``, ``μ | Σ ~ N(mean, Σ / kappa)``."""

    mean: np.ndarray
    kappa: float
    dof: float
    scale: np.ndarray

    def posterior(self, n: float, xbar: np.ndarray, scatter: np.ndarray) -> "NIWPrior":
        """Posterior after ``n`` points with mean ``xbar`` and scatter matrix ``Σ (x − xbar)(x − xbar)ᵀ``."""
        if n == 0:
            return self
        kappa = self.kappa + n
        diff = xbar - self.mean
        return NIWPrior(
            (self.kappa * self.mean + n * xbar) / kappa, kappa, self.dof + n,
            self.scale + scatter + (self.kappa * n / kappa) * np.outer(diff, diff),
        )


@dataclass
class LinkLists:
    """Per-point adjacency of the links: neighbours of point ``i`` are ``nbr[indptr[i]:indptr[i+1]]`` with
    ``must`` True for a must-link."""

    indptr: np.ndarray
    nbr: np.ndarray
    must: np.ndarray

    @classmethod
    def from_pairs(cls, n: int, i, j, must) -> "LinkLists":
        i, j = np.asarray(i, dtype=np.intp), np.asarray(j, dtype=np.intp)
        must = np.asarray(must, dtype=bool)
        src, dst, typ = np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([must, must])
        order = np.argsort(src, kind="stable")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
        return cls(indptr, dst[order], typ[order])

    @property
    def n_links(self) -> int:
        return int(self.nbr.size // 2)


def gaussian_logpdf(X: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``log N(x | mean, cov)`` for every row of X."""
    L = np.linalg.cholesky(cov)
    y = np.linalg.solve(L, (X - mean).T)
    D = X.shape[1]
    return -0.5 * (D * np.log(2 * np.pi) + (y * y).sum(axis=0)) - np.log(np.diag(L)).sum()


def log_predictive(X: np.ndarray, prior: NIWPrior) -> np.ndarray:
    """``log ∫ N(x | θ) dG0(θ)``: the multivariate Student-t prior predictive of every row."""
    D = X.shape[1]
    df = prior.dof - D + 1
    shape = prior.scale * (prior.kappa + 1) / (prior.kappa * df)
    L = np.linalg.cholesky(shape)
    y = np.linalg.solve(L, (X - prior.mean).T)
    maha = (y * y).sum(axis=0)
    return (gammaln((df + D) / 2) - gammaln(df / 2) - 0.5 * D * (np.log(df) + _LOG_PI)
            - np.log(np.diag(L)).sum() - 0.5 * (df + D) * np.log1p(maha / df))


def sample_niw(post: NIWPrior, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One draw ``(μ, Σ)`` from a Normal-inverse-Wishart."""
    D = post.mean.shape[0]
    cov = np.atleast_2d(invwishart.rvs(df=post.dof, scale=post.scale, random_state=rng)).reshape(D, D)
    mean = rng.multivariate_normal(post.mean, cov / post.kappa, method="cholesky")
    return mean, cov


def _xlogy(count, log_value: float):
    """``count * log_value`` with ``0 * (−inf) = 0``."""
    if log_value == -np.inf:
        return np.where(np.asarray(count) > 0, -np.inf, 0.0)
    return count * log_value


@numba.njit(cache=True)
def _xl(count, log_value):
    if count == 0:
        return 0.0
    return count * log_value


@numba.njit(cache=True)
def option_log_weights(i, z, counts, K, LL, log_new, indptr, nbr, must, lp, l1p, lq, l1q, logw, f, s):
    """Unnormalised log-probabilities of eq. 13 for point ``i`` (already removed from ``counts``), into
    ``logw[:K + 1]`` (the last entry is a new cluster); returns their maximum.

    ``f`` and ``s`` are zeroed int scratch arrays of length >= K (left zeroed). ``lp, l1p, lq, l1q`` are
    ``log p, log(1−p), log q, log(1−q)``.
    """
    lo, hi = indptr[i], indptr[i + 1]
    F = 0
    S = 0
    for e in range(lo, hi):
        if must[e]:
            f[z[nbr[e]]] += 1
            F += 1
        else:
            s[z[nbr[e]]] += 1
            S += 1
    top = -np.inf
    for k in range(K):
        if counts[k] <= 0:
            logw[k] = -np.inf
        else:
            v = np.log(counts[k]) + LL[i, k]
            if hi > lo:
                v += _xl(f[k], lp) + _xl(F - f[k], l1q) + _xl(s[k], l1p) + _xl(S - s[k], lq)
            logw[k] = v
        if logw[k] > top:
            top = logw[k]
    v = log_new[i]
    if hi > lo:
        v += _xl(F, l1q) + _xl(S, lq)
    logw[K] = v
    if v > top:
        top = v
    for e in range(lo, hi):
        f[z[nbr[e]]] = 0
        s[z[nbr[e]]] = 0
    return top


@numba.njit(cache=True)
def _label_run(order, start, uniforms, z, counts, K, LL, log_new, indptr, nbr, must, lp, l1p, lq, l1q):
    """Sample ``z_i`` for ``order[start:]`` until a point opens a new cluster; returns that position (or n;
    ``-1 - t`` when point ``order[t]`` has no feasible option).

    Emptied clusters keep their slot with count 0 (probability 0) until the end of the sweep. For the point that
    opens a cluster, ``z`` and ``counts`` are left with the point removed; the caller creates the cluster.
    """
    n = order.shape[0]
    logw = np.empty(K + 1)
    f = np.zeros(K, dtype=np.int64)
    s = np.zeros(K, dtype=np.int64)
    for t in range(start, n):
        i = order[t]
        counts[z[i]] -= 1
        top = option_log_weights(i, z, counts, K, LL, log_new, indptr, nbr, must, lp, l1p, lq, l1q, logw, f, s)
        if not np.isfinite(top):
            return -1 - t
        total = 0.0
        for k in range(K + 1):
            logw[k] = np.exp(logw[k] - top)
            total += logw[k]
        u = uniforms[t] * total
        acc = 0.0
        choice = -1
        for k in range(K + 1):
            acc += logw[k]
            if logw[k] > 0:
                choice = k  # the last positive option, should rounding leave u >= acc
                if u < acc:
                    break
        if choice == K:
            return t
        z[i] = choice
        counts[choice] += 1
    return n


@dataclass
class GibbsState:
    """One sample: labels ``z`` (0..K−1), cluster parameters and link probabilities, plus the traces."""

    z: np.ndarray
    means: np.ndarray
    covs: np.ndarray
    p: float
    q: float
    n_clusters_trace: list = field(default_factory=list)
    log_joint_trace: list = field(default_factory=list)


def _cluster_post(X, members, prior):
    P = X[members]
    xbar = P.mean(axis=0)
    diff = P - xbar
    return prior.posterior(P.shape[0], xbar, diff.T @ diff)


def _resample_links(z, links: LinkLists, p_prior, q_prior, rng):
    src = np.repeat(np.arange(z.size), np.diff(links.indptr))
    once = src < links.nbr
    same = z[src[once]] == z[links.nbr[once]]
    must = links.must[once]
    p = rng.beta(p_prior[0] + np.sum(same & must), p_prior[1] + np.sum(same & ~must))
    q = rng.beta(q_prior[0] + np.sum(~same & ~must), q_prior[1] + np.sum(~same & must))
    return float(p), float(q)


def _log_joint(LL, z, links: LinkLists, p, q) -> float:
    """Data log-likelihood under the current parameters plus the link log-likelihood."""
    out = float(LL[np.arange(z.size), z].sum())
    src = np.repeat(np.arange(z.size), np.diff(links.indptr))
    once = src < links.nbr
    same = z[src[once]] == z[links.nbr[once]]
    must = links.must[once]
    with np.errstate(divide="ignore"):
        logs = {"p": np.log(p), "1-p": np.log1p(-p), "q": np.log(q), "1-q": np.log1p(-q)}
    out += float(_xlogy(np.sum(same & must), logs["p"]) + _xlogy(np.sum(same & ~must), logs["1-p"])
                 + _xlogy(np.sum(~same & ~must), logs["q"]) + _xlogy(np.sum(~same & must), logs["1-q"]))
    return out


class Gibbs:
    """The TVClust sampler (one chain): :meth:`start` draws the first sample from labels ``z0``, every
    :meth:`sweep` one more. The fit loop drives it (``TVClust.fit``).

    Each sweep visits the points in a fresh random order and samples ``z_i`` from eq. 13 (with E-TV1/E-TV2),
    then draws every cluster's ``(μ, Σ)`` from its NIW posterior and, when ``p`` / ``q`` are None, the link
    probabilities from their Beta posteriors. ``z0`` must satisfy every hard constraint (``p = 1``: no
    cannot-link inside a cluster; ``q = 1``: no must-link across clusters). All randomness comes from ``rng``:
    a chain resumed from a :class:`GibbsState` with ``rng`` in the state it had then continues exactly as if it
    had not stopped.
    """

    def __init__(self, X: np.ndarray, links: LinkLists, *, alpha: float, prior: NIWPrior, p: float | None,
                 q: float | None, p_prior: tuple[float, float], q_prior: tuple[float, float],
                 rng: np.random.Generator) -> None:
        self.X = np.asarray(X, dtype=np.float64)
        self.links, self.prior, self.p, self.q = links, prior, p, q
        self.p_prior, self.q_prior, self.rng = p_prior, q_prior, rng
        self.log_new = np.log(alpha) + log_predictive(self.X, prior)
        self.indptr = links.indptr.astype(np.int64)
        self.nbr, self.must = links.nbr.astype(np.int64), links.must.astype(np.bool_)

    def _links_p_q(self, z, cur_p, cur_q):
        if self.p is None or self.q is None:
            sp, sq = _resample_links(z, self.links, self.p_prior, self.q_prior, self.rng)
            cur_p = sp if self.p is None else cur_p
            cur_q = sq if self.q is None else cur_q
        return cur_p, cur_q

    def _state(self, z, thetas, cur_p, cur_q, n_clusters_trace, log_joint_trace) -> GibbsState:
        return GibbsState(z, np.array([t[0] for t in thetas]), np.array([t[1] for t in thetas]), cur_p, cur_q,
                          n_clusters_trace, log_joint_trace)

    def start(self, z0: np.ndarray) -> GibbsState:
        """The sample before the first sweep: labels ``z0`` (renumbered), link probabilities and cluster
        parameters drawn given them; empty traces."""
        X, prior = self.X, self.prior
        _, z = np.unique(np.asarray(z0), return_inverse=True)
        z = z.astype(np.int64)
        K = int(z.max()) + 1
        cur_p, cur_q = self._links_p_q(z, 0.9 if self.p is None else float(self.p),
                                       0.9 if self.q is None else float(self.q))
        thetas = [sample_niw(_cluster_post(X, np.flatnonzero(z == k), prior), self.rng) for k in range(K)]
        return self._state(z, thetas, cur_p, cur_q, [], [])

    def sweep(self, state: GibbsState) -> GibbsState:
        """One sweep from ``state``: the next sample, its number of clusters and log joint (data + links)
        appended to the traces."""
        X, prior, rng = self.X, self.prior, self.rng
        n, D = X.shape
        z = np.asarray(state.z, dtype=np.int64).copy()
        K = int(z.max()) + 1
        cur_p, cur_q = float(state.p), float(state.q)
        thetas = [(np.asarray(m, dtype=np.float64), np.asarray(c, dtype=np.float64))
                  for m, c in zip(state.means, state.covs)]
        indptr, nbr, must, log_new = self.indptr, self.nbr, self.must, self.log_new
        cap = max(16, 2 * K)
        LL = np.empty((n, cap))  # LL[:, k] = log N(x | θ_k)
        for k, (m, c) in enumerate(thetas):
            LL[:, k] = gaussian_logpdf(X, m, c)
        counts = np.zeros(cap)
        counts[:K] = np.bincount(z, minlength=K)
        with np.errstate(divide="ignore"):
            lp, l1p, lq, l1q = np.log(cur_p), np.log1p(-cur_p), np.log(cur_q), np.log1p(-cur_q)
        order = rng.permutation(n).astype(np.int64)
        uniforms = rng.random(n)
        t = 0
        while t < n:
            t = _label_run(order, t, uniforms, z, counts, K, LL, log_new, indptr, nbr, must, lp, l1p, lq, l1q)
            if t < 0:
                from ..errors import InfeasibleConstraintsError

                raise InfeasibleConstraintsError(
                    f"TVClust: expected a state where point {order[-1 - t]} has a feasible cluster; received none "
                    f"under hard links (p={cur_p}, q={cur_q}). Use p < 1 and q < 1, or check the links."
                )
            if t == n:
                break
            i = order[t]  # opens a new cluster, θ drawn from the posterior given x_i (Neal's Algorithm 2)
            theta = sample_niw(prior.posterior(1, X[i], np.zeros((D, D))), rng)
            thetas.append(theta)
            if K == cap:
                LL = np.concatenate([LL, np.empty((n, cap))], axis=1)
                counts = np.concatenate([counts, np.zeros(cap)])
                cap *= 2
            LL[:, K] = gaussian_logpdf(X, *theta)
            z[i] = K
            counts[K] = 1
            K += 1
            t += 1
        live = np.flatnonzero(counts[:K] > 0)  # drop emptied clusters, keep the order of the rest
        remap = np.full(K, -1, dtype=np.int64)
        remap[live] = np.arange(live.size)
        z[:] = remap[z]
        K = int(live.size)
        thetas = [sample_niw(_cluster_post(X, np.flatnonzero(z == k), prior), rng) for k in range(K)]
        cur_p, cur_q = self._links_p_q(z, cur_p, cur_q)
        LLk = np.stack([gaussian_logpdf(X, m, c) for m, c in thetas], axis=1)
        return self._state(z, thetas, cur_p, cur_q, list(state.n_clusters_trace) + [K],
                           list(state.log_joint_trace) + [_log_joint(LLk, z, self.links, cur_p, cur_q)])
