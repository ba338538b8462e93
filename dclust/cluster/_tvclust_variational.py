"""TVClust by mean-field variational inference ([TV] Tables 1-3 report "TVClust (variational)"; the paper describes
only the Gibbs sampler, E-TV9): the same model as :class:`dclust.TVClust`, fitted deterministically.

An in-memory reference for small data, beside the Gibbs reference; the scalable algorithm with side information is
RDP-means.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import digamma, logsumexp

from .._fit import ProgressEvent, Stopwatch, emit
from .._registry import register
from .._validation import SEED, Interval
from ..kernels.tvclust import NIWPrior
from ._inmemory import _LinkedInMemory
from ._tvclust import TVClust
from typing import Any
from ..typing import SeedLike

__all__ = ["TVClustVariational"]


@register
class TVClustVariational(_LinkedInMemory):
    """TVClust fitted by mean-field variational inference: a truncated DP mixture of Gaussians with noisy links.

    Model (docs/algorithms.md 5.6): stick-breaking weights ``v_k ~ Beta(1, alpha)``, ``(mu_k, Sigma_k)`` from the
    Normal-inverse-Wishart prior of :class:`dclust.TVClust`, and a link ``(i, j)`` observed as a must-link with
    probability ``p`` when ``z_i = z_j`` and as a cannot-link with probability ``q`` otherwise. The posterior is
    approximated by ``q(v) q(mu, Sigma) q(z)`` with ``n_components`` sticks (Blei and Jordan 2006). Every iteration
    updates the sticks and the NIW posteriors from the responsibilities ``R``, then

    ``log R_ik = E[log pi_k] + E[log N(x_i | mu_k, Sigma_k)] + log(p / (1 - q)) sum_{must j} R_jk
    + log((1 - p) / q) sum_{cannot j} R_jk + const``

    (the mean-field form of eq. 13's ``(p/(1-q))^f ((1-p)/q)^s``), updated for all rows at once and damped by
    ``damping``; ``p`` and ``q``, unless fixed, are set to their posterior modes under the Beta priors given the
    expected same-cluster indicators ``R_i . R_j`` (variational EM). Starts from the hard labels of
    :class:`dclust.TVClust`'s initialisation (k-means++ and Lloyd with ``init_clusters``, made consistent with the
    links). Stops when the largest change of ``R`` is below ``tol``.

    A reference that holds the data in memory; refuses more than ``max_samples`` rows (use
    :class:`dclust.RDPMeans` at scale).

    Parameters
    ----------
    alpha : float, default 1.0
        DP concentration.
    p, q : float in (0, 1] or None, default None
        Fixed link probabilities (clipped to 1 - 1e-6); None estimates them.
    p_prior, q_prior : tuple (a, b), default (9.0, 1.0)
        Beta priors of ``p`` and ``q``.
    prior_kappa, prior_dof, prior_scale
        The NIW prior, as in :class:`dclust.TVClust`, except that ``prior_scale=None`` expects a tenth of each
        feature's own variance (a diagonal scale; the Gibbs reference uses the mean variance for every feature,
        which on raw features such as wine's makes one cluster of everything).
    init_clusters : int, default 3
        Clusters of the starting labels.
    n_components : int, default 20
        Truncation level of the stick-breaking posterior (>= init_clusters).
    max_iter : int, default 200
    tol : float, default 1e-4
    damping : float in [0, 1), default 0.5
        Weight of the previous responsibilities in each update (parallel mean-field updates of linked rows can
        oscillate undamped).
    max_samples : int, default 5000
    random_state : int, Generator or None

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
        ``argmax_k R_ik``, numbered by first appearance.
    cluster_centers_ : ndarray (n_clusters_, n_features)
        Posterior means of the used clusters.
    covariances_ : ndarray (n_clusters_, n_features, n_features)
        Posterior mean covariances.
    cluster_sizes_ : ndarray (n_clusters_,)
    n_clusters_ : int
    p_, q_ : float
    n_iter_ : int
    objective_history_ : list of float
        Largest change of the responsibilities at every iteration (a convergence trace, not an objective).
    n_features_in_ : int

    Examples
    --------
    >>> import dclust
    >>> X, y, _ = dclust.make_blobs(60, 2, centers=[[0, 0], [6, 6]], cluster_std=0.5, random_state=0)
    >>> tv = dclust.TVClustVariational(init_clusters=2, random_state=0).fit(X)
    >>> tv.n_clusters_, dclust.metrics.adjusted_rand_score(y, tv.labels_)
    (2, 1.0)

    References
    ----------
    D. Khashabi, J. Wieting, J. Y. Liu and F. Liang. Clustering with side information: from a probabilistic model
    to a deterministic algorithm ([TV]). D. M. Blei and M. I. Jordan. Variational inference for Dirichlet process
    mixtures. Bayesian Analysis 1(1), 2006.
    """

    _cost_note = "an in-memory reference with O(N K D^2) work per iteration"
    _parameter_constraints = {
        **{name: TVClust._parameter_constraints[name] for name in (
            "alpha", "p", "q", "p_prior", "q_prior", "prior_kappa", "prior_dof", "prior_scale", "init_clusters")},
        "n_components": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "tol": [Interval("real", 0, None, "left")],
        "damping": [Interval("real", 0, 1, "left")],
        "max_samples": [Interval("int", 1, None)],
        "random_state": [SEED],
    }

    def __init__(
        self, *, alpha: float = 1.0, p: float | None = None, q: float | None = None, p_prior: Any = (9.0, 1.0),
        q_prior: Any = (9.0, 1.0), prior_kappa: float = 0.01, prior_dof: float | None = None,
        prior_scale: float | None = None, init_clusters: int = 3, n_components: int = 20, max_iter: int = 200,
        tol: float = 1e-4, damping: float = 0.5, max_samples: int = 5000, random_state: SeedLike = None,
    ) -> None:
        self.alpha, self.p, self.q, self.p_prior, self.q_prior = alpha, p, q, p_prior, q_prior
        self.prior_kappa, self.prior_dof, self.prior_scale = prior_kappa, prior_dof, prior_scale
        self.init_clusters, self.n_components, self.max_iter, self.tol = init_clusters, n_components, max_iter, tol
        self.damping, self.max_samples, self.random_state = damping, max_samples, random_state

    def _fit_links(self, Xn: np.ndarray, i: np.ndarray, j: np.ndarray, must: np.ndarray, constraints: Any,
                   rng: np.random.Generator) -> None:
        n, d = Xn.shape
        T = max(self.n_components, min(self.init_clusters, n))
        prior = TVClust._prior(self, Xn)  # the Gibbs reference's NIW prior (same parameters) ...
        if self.prior_scale is None:  # ... but scaled per feature: raw UCI features differ by orders of magnitude
            var = np.where(Xn.var(axis=0) > 0, Xn.var(axis=0), 1.0) if n > 1 else np.ones(d)
            factor = prior.dof - d - 1 if prior.dof > d + 1 else 1.0
            prior = NIWPrior(prior.mean, prior.kappa, prior.dof, np.diag(0.1 * var * factor))
        z0 = TVClust._initial_labels(self, Xn, TVClust._links(self, constraints, n), rng)
        _, z0 = np.unique(z0, return_inverse=True)
        R = np.zeros((n, T))
        R[np.arange(n), np.minimum(z0, T - 1)] = 1.0
        ones = np.ones(int(must.sum()))
        M = sp.coo_matrix((ones, (i[must], j[must])), shape=(n, n)).tocsr()
        M = M + M.T
        onesc = np.ones(int((~must).sum()))
        C = sp.coo_matrix((onesc, (i[~must], j[~must])), shape=(n, n)).tocsr()
        C = C + C.T
        p = _clip(self.p if self.p is not None else self.p_prior[0] / sum(self.p_prior))
        q = _clip(self.q if self.q is not None else self.q_prior[0] / sum(self.q_prior))
        watch = Stopwatch()
        n_iter, trace = 0, []
        for it in range(self.max_iter):
            n_iter = it + 1
            posts = _posteriors(Xn, R, prior)
            logits = _expected_log_weights(R.sum(axis=0), float(self.alpha))[None, :] + _expected_loglik(Xn, posts)
            if i.size:
                logits = logits + np.log(p / (1 - q)) * (M @ R) + np.log((1 - p) / q) * (C @ R)
            new = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
            new = self.damping * R + (1 - self.damping) * new
            delta = float(np.abs(new - R).max())
            R = new
            trace.append(delta)
            if i.size:
                same = (R[i] * R[j]).sum(axis=1)
                if self.p is None:
                    a, b = self.p_prior
                    p = _clip((a - 1 + same[must].sum()) / max(a + b - 2 + same.sum(), 1e-12))
                if self.q is None:
                    a, b = self.q_prior
                    q = _clip((a - 1 + (1 - same[~must]).sum()) / max(a + b - 2 + (1 - same).sum(), 1e-12))
            emit(ProgressEvent("TVClustVariational", "iter", n_iter, delta, int((R.sum(axis=0) > 0.5).sum()),
                               watch.lap()))
            if delta < self.tol:
                break
        posts = _posteriors(Xn, R, prior)
        z = R.argmax(axis=1)
        used, first = np.unique(z, return_index=True)
        used = used[np.argsort(first)]
        relabel = np.full(T, -1, dtype=np.int64)
        relabel[used] = np.arange(used.size)
        self.labels_ = relabel[z]
        self.cluster_centers_ = np.array([posts[k].mean for k in used])
        self.covariances_ = np.array([_mean_cov(posts[k], d) for k in used])
        self.cluster_sizes_ = np.bincount(self.labels_, minlength=used.size).astype(np.int64)
        self.n_clusters_ = int(used.size)
        self.p_, self.q_ = float(p), float(q)
        self.n_iter_ = n_iter
        self.objective_history_ = trace
        emit(ProgressEvent("TVClustVariational", "done", n_iter, 0.0, self.n_clusters_, 0.0))

    predict = TVClust.predict


def _clip(v: float) -> float:
    return float(min(max(v, 1e-6), 1 - 1e-6))


def _posteriors(X: np.ndarray, R: np.ndarray, prior: NIWPrior) -> list[NIWPrior]:
    """The NIW posterior of every component given soft counts ``R``."""
    Nk = R.sum(axis=0)
    out = []
    for k in range(R.shape[1]):
        if Nk[k] < 1e-10:
            out.append(prior)
            continue
        xbar = R[:, k] @ X / Nk[k]
        diff = X - xbar
        out.append(prior.posterior(float(Nk[k]), xbar, (diff * R[:, k:k + 1]).T @ diff))
    return out


def _expected_log_weights(Nk: np.ndarray, alpha: float) -> np.ndarray:
    """``E[log pi_k]`` under the stick posteriors ``Beta(1 + N_k, alpha + sum_{l > k} N_l)``."""
    tail = np.concatenate([np.cumsum(Nk[::-1])[::-1][1:], [0.0]])
    g1, g2 = 1.0 + Nk, alpha + tail
    dsum = digamma(g1 + g2)
    elog_v, elog_1mv = digamma(g1) - dsum, digamma(g2) - dsum
    elog_pi: np.ndarray = elog_v + np.concatenate([[0.0], np.cumsum(elog_1mv)[:-1]])  # (scipy has no stubs)
    return elog_pi


def _expected_loglik(X: np.ndarray, posts: list[NIWPrior]) -> np.ndarray:
    """``E[log N(x_i | mu_k, Sigma_k)]`` under every component's NIW posterior, shape (n, K)."""
    n, d = X.shape
    out = np.empty((n, len(posts)))
    half = 0.5 * np.arange(d)
    for k, post in enumerate(posts):
        L = np.linalg.cholesky(post.scale)
        y = np.linalg.solve(L, (X - post.mean).T)
        logdet_scale = 2.0 * np.log(np.diag(L)).sum()
        elogdet_prec = digamma(0.5 * post.dof - half).sum() + d * np.log(2.0) - logdet_scale
        out[:, k] = 0.5 * (elogdet_prec - d * np.log(2 * np.pi) - d / post.kappa - post.dof * (y * y).sum(axis=0))
    return out


def _mean_cov(post: NIWPrior, d: int) -> np.ndarray:
    return post.scale / (post.dof - d - 1) if post.dof > d + 1 else post.scale / post.dof
