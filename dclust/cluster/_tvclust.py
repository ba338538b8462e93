"""TVClust: the Gibbs sampler of a Dirichlet-process Gaussian mixture with noisy links (docs/algorithms.md 5.6).

An in-memory reference for small data (at most ``max_samples`` rows): the scalable algorithm with side
information is RDP-means, its small-variance limit.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import numpy.typing as npt

from .._dask.passes import map_blocks
from .._fit import Step, finish, fit_loop, restore_finished, restore_rng, rng_state
from .._registry import register
from .._validation import Interval, Options, _Kind, as_generator, check_array
from ..constraints._check import check_constraints
from ..errors import InfeasibleConstraintsError, InvalidDataError, message
from ..kernels.kmeans import kmeans_plusplus, lloyd
from ..kernels.tvclust import Gibbs, GibbsState, LinkLists, NIWPrior, gaussian_logpdf
from ._base import MEMORY_PARAMETERS, ClusterMixin, finite_rows, wrap_output
from ._inmemory import _InMemory
from ..typing import ArrayLike, CheckpointLike, ConstraintsLike, Ignored, SeedLike

__all__ = ["TVClust"]


def _beta_pair(v: Any) -> bool:
    return (
        isinstance(v, tuple) and len(v) == 2
        and all(isinstance(x, numbers.Real) and not isinstance(x, bool)
                and np.isfinite(x) and x > 0  # type: ignore[call-overload, operator]  # typeshed's numbers.Real
                for x in v)
    )


BETA_PAIR = _Kind("a tuple (a, b) of two finite reals > 0", _beta_pair)


@register
class TVClust(ClusterMixin, _InMemory):  # type: ignore[misc]  # scikit-learn ships no type hints
    """TVClust (Khashabi et al.): Gibbs sampling of a DP mixture of Gaussians with must/cannot links as noisy data.

    The data view is a Dirichlet-process mixture with a Normal-inverse-Wishart base measure; the link view says
    that a pair in one cluster is observed as a must-link with probability ``p`` and a pair in different clusters
    as a cannot-link with probability ``q`` (eq. 8 as corrected by E-TV1). Labels are sampled from eq. 13 (new
    clusters with the side-information factor of E-TV2), cluster parameters from their conjugate posteriors
    (Neal 2000, Algorithm 2) and, unless fixed, ``p`` and ``q`` from their Beta posteriors.

    This is a reference sampler that holds the data in memory and visits one point at a time; it refuses data
    with more than ``max_samples`` rows (use :class:`RDPMeans` at scale).

    Parameters
    ----------
    alpha : float, default 1.0
        DP concentration.
    p, q : float in (0, 1] or None, default None
        Fixed link probabilities; None samples them (priors ``p_prior``, ``q_prior``). ``p = 1`` makes
        cannot-links hard, ``q = 1`` makes must-links hard.
    p_prior, q_prior : tuple (a, b), default (9.0, 1.0)
        Beta priors of ``p`` and ``q`` (mean 0.9).
    prior_kappa : float, default 0.01
        NIW: prior pseudo-count of the mean (small = a broad prior on where clusters are). The prior mean is the
        data mean.
    prior_dof : float or None, default None
        NIW degrees of freedom, > n_features - 1; None uses n_features + 2.
    prior_scale : float or None, default None
        Prior expected within-cluster variance per feature (``E[Σ] = prior_scale · I``); None uses a tenth of
        the mean per-feature variance of X.
    init_clusters : int, default 3
        The chain starts from k-means++ seeds and 10 Lloyd steps with this many clusters (at most n_samples),
        made consistent with the links (must-link components joined, cannot-linked points moved to new
        clusters). Single-site Gibbs mixes slowly (it splits a large cluster
        rarely and merges two halves of one group slowly), so start near the expected number.
    n_sweeps : int, default 100
        Gibbs sweeps; the last sample is reported.
    max_samples : int, default 5000
        Largest number of rows accepted (the sampler costs O(n_samples · K) Python-level steps per sweep).
    random_state : int, Generator or None
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: the chain's state (labels, cluster parameters, ``p``, ``q``, traces and the exact
        state of the random generator, as JSON) is saved atomically after every sweep, and a refit with the same
        parameters, data and constraint graph continues the chain bit for bit.

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
        Cluster of every row in the last sample (0..n_clusters_-1).
    cluster_centers_ : ndarray (n_clusters_, n_features)
        Sampled cluster means of the last sample.
    covariances_ : ndarray (n_clusters_, n_features, n_features)
    cluster_sizes_ : ndarray (n_clusters_,)
    n_clusters_ : int
    p_, q_ : float
        Link probabilities of the last sample.
    n_clusters_history_ : list of int
        Clusters after every sweep.
    objective_history_ : list of float
        Log joint (data log-likelihood under the sampled parameters plus link log-likelihood) after every sweep.
        A trace of the chain, not a monotone objective.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> b = dclust.make_blobs(60, 2, centers=[[0, 0], [6, 6]], cluster_std=0.5, random_state=0)
    >>> y = b.labels.compute()
    >>> i, j = np.arange(0, 10), np.arange(10, 20)  # ten links: must-link where the true blobs agree
    >>> G = dclust.ConstraintGraph.from_pairs(i, j, y[i] == y[j], n_samples=60)
    >>> tv = dclust.TVClust(init_clusters=2, n_sweeps=20, random_state=0).fit(b.X, constraints=G)
    >>> tv.n_clusters_, dclust.metrics.adjusted_rand_score(y, tv.labels_)
    (2, 1.0)
    """

    labels_: npt.NDArray[np.int64]
    cluster_centers_: npt.NDArray[np.float64]
    covariances_: npt.NDArray[np.float64]
    cluster_sizes_: npt.NDArray[np.int64]
    n_clusters_: int
    p_: float
    q_: float
    n_clusters_history_: list[int]
    objective_history_: list[float]
    n_features_in_: int

    _parameter_constraints = {
        "alpha": [Interval("real", 0, None, "neither")],
        "p": [Interval("real", 0, 1, "right"), Options((None,))],
        "q": [Interval("real", 0, 1, "right"), Options((None,))],
        "p_prior": [BETA_PAIR],
        "q_prior": [BETA_PAIR],
        "prior_kappa": [Interval("real", 0, None, "neither")],
        "prior_dof": [Interval("real", 0, None, "neither"), Options((None,))],
        "prior_scale": [Interval("real", 0, None, "neither"), Options((None,))],
        "init_clusters": [Interval("int", 1, None)],
        "n_sweeps": [Interval("int", 1, None)],
        **MEMORY_PARAMETERS,
    }
    _cost_note = "an in-memory reference sampler that visits one point at a time"

    def __init__(
        self, *, alpha: float = 1.0, p: float | None = None, q: float | None = None, p_prior: Any = (9.0, 1.0),
        q_prior: Any = (9.0, 1.0), prior_kappa: float = 0.01, prior_dof: float | None = None,
        prior_scale: float | None = None, init_clusters: int = 3, n_sweeps: int = 100, max_samples: int = 5000,
        random_state: SeedLike = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.alpha, self.p, self.q, self.p_prior, self.q_prior = alpha, p, q, p_prior, q_prior
        self.prior_kappa, self.prior_dof, self.prior_scale = prior_kappa, prior_dof, prior_scale
        self.init_clusters, self.n_sweeps, self.max_samples = init_clusters, n_sweeps, max_samples
        self.random_state, self.checkpoint = random_state, checkpoint

    # ------------------------------------------------------------------------------------------------------
    def _prior(self, X: np.ndarray) -> NIWPrior:
        n, d = X.shape
        dof = d + 2.0 if self.prior_dof is None else float(self.prior_dof)
        if dof <= d - 1:
            raise InvalidDataError(
                message("TVClust(prior_dof=...)", f"a value > n_features - 1 = {d - 1}", f"{dof}",
                        "Raise prior_dof (or leave it None for n_features + 2).")
            )
        var = self.prior_scale
        if var is None:
            var = 0.1 * float(X.var(axis=0).mean()) if n > 1 else 1.0
            var = var if var > 0 else 1.0
        # E[Σ] = scale / (dof - d - 1) when defined; otherwise use scale = var * I directly
        factor = dof - d - 1 if dof > d + 1 else 1.0
        return NIWPrior(X.mean(axis=0), float(self.prior_kappa), dof, var * factor * np.eye(d))

    def _links(self, constraints: ConstraintsLike, n: int) -> LinkLists:
        if constraints is None:
            return LinkLists.from_pairs(n, [], [], [])
        check_constraints("TVClust", constraints, n)
        i, j, sign = constraints.pairs()
        return LinkLists.from_pairs(n, i, j, sign > 0)

    def _initial_labels(self, X: npt.NDArray[np.float64], links: LinkLists, rng: np.random.Generator) -> np.ndarray:
        n = X.shape[0]
        k = min(self.init_clusters, n)
        _, z, _, _, _ = lloyd(X, None, kmeans_plusplus(X, np.ones(n), k, rng), max_iter=10)
        return _consistent(z, links, hard=self.p == 1.0 and self.q == 1.0)

    def fit(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> "TVClust":
        """Sample a clustering of ``X`` (n_samples <= max_samples) given optional links.

        Parameters
        ----------
        X : array-like (n_samples, n_features)
            Read into memory.
        y : ignored
        constraints : ConstraintGraph, optional
            Must-links (observed ``E = 1``) and cannot-links (observed ``E = 0``); weights are ignored.

        Returns
        -------
        self
        """
        self._validate_params()
        Xn, _, arr = self._load_array(X)
        n, d = Xn.shape
        links = self._links(constraints, n)
        ck = self._checkpointer(arr, constraints=constraints)
        resume = ck.resume()
        if restore_finished(self, ck, resume) is not None:
            finish(self, ck, n_iter=self.n_sweeps, objective=self.objective_history_[-1],
                   n_clusters=self.n_clusters_, save=False)
            return self
        diff = Xn - Xn.mean(axis=0)
        ck.check_content(float(n), Xn.mean(axis=0), float((diff * diff).sum()))
        rng = as_generator(self.random_state)
        chain = Gibbs(Xn, links, alpha=float(self.alpha), prior=self._prior(Xn), p=self.p, q=self.q,
                      p_prior=(float(self.p_prior[0]), float(self.p_prior[1])),
                      q_prior=(float(self.q_prior[0]), float(self.q_prior[1])), rng=rng)
        run = fit_loop(_Sweeps(self, chain, links), max_iter=self.n_sweeps, ck=ck,
                       resume=None if resume is None else resume["loop"])
        state = run.state
        # number clusters by first appearance so that equal samples give equal attributes
        _, first = np.unique(state.z, return_index=True)
        order = np.argsort(first)
        relabel = np.empty_like(order)
        relabel[order] = np.arange(order.size)
        self.labels_ = relabel[state.z].astype(np.int64)
        self.cluster_centers_ = state.means[order]
        self.covariances_ = state.covs[order]
        self.cluster_sizes_ = np.bincount(self.labels_, minlength=order.size).astype(np.int64)
        self.n_clusters_ = int(order.size)
        self.p_, self.q_ = float(state.p), float(state.q)
        self.n_clusters_history_ = [int(k) for k in state.n_clusters_trace]
        self.objective_history_ = [float(v) for v in state.log_joint_trace]
        self.n_features_in_ = d
        finish(self, ck, n_iter=self.n_sweeps, objective=self.objective_history_[-1], n_clusters=self.n_clusters_)
        return self

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Most probable cluster of new rows under the last sample (``argmax_k log n_k + log N(x|μ_k, Σ_k)``),
        without links. Returns an ndarray for numpy input, a lazy dask array for dask/zarr input."""
        self._check_fitted()
        arr, info = check_array(X, n_features=self.cluster_centers_.shape[1])
        logn = np.log(self.cluster_sizes_.astype(np.float64))
        means, covs = np.asarray(self.cluster_centers_), np.asarray(self.covariances_)

        def block(Xb: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
            Xb = np.asarray(Xb, dtype=np.float64)
            s = np.stack([gaussian_logpdf(Xb, m, c) for m, c in zip(means, covs)], axis=1) + logn
            labels: npt.NDArray[np.int32] = np.argmax(s, axis=1).astype(np.int32)
            return labels

        return wrap_output(map_blocks(finite_rows(arr, "predict"), block, dtype=np.int32, drop_axis=1), info, "labels")

    def fit_predict(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> ArrayLike:
        """``fit(X, constraints=constraints)`` and return ``labels_``."""
        return self.fit(X, constraints=constraints).labels_


class _Sweeps(Step):
    """The TVClust chain for the fit loop: ``start`` draws the initial labels (k-means++ and Lloyd steps, made
    consistent with the links) and the first sample, every step is one Gibbs sweep. A sampler runs all its
    ``n_sweeps`` (it never "converges"). The generator's exact state is saved with every sample."""

    name = "TVClust"
    unit = "sweeps"

    def __init__(self, est: TVClust, chain: Gibbs, links: LinkLists) -> None:
        self.est, self.chain, self.links = est, chain, links

    def start(self) -> GibbsState:
        return self.chain.start(self.est._initial_labels(self.chain.X, self.links, self.chain.rng))

    def step(self, state: GibbsState) -> GibbsState:
        return self.chain.sweep(state)

    def converged(self, old: GibbsState, new: GibbsState) -> bool:
        return False

    def objective(self, state: GibbsState) -> float:
        return state.log_joint_trace[-1] if state.log_joint_trace else float("nan")

    def n_clusters(self, state: GibbsState) -> int:
        return int(state.means.shape[0])

    def to_checkpoint(self, state: GibbsState) -> dict[str, Any]:
        return {"z": state.z, "means": state.means, "covariances": state.covs, "p": state.p, "q": state.q,
                "rng": rng_state(self.chain.rng), "n_clusters_history": state.n_clusters_trace,
                "objective_history": state.log_joint_trace}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> GibbsState:
        n, d = self.chain.X.shape
        z = ck.require_shape("labels", saved["z"], (n,)).astype(np.int64)
        means = ck.require_shape("cluster means", saved["means"], (None, d)).astype(np.float64)
        covs = ck.require_shape("covariances", saved["covariances"], (means.shape[0], d, d)).astype(np.float64)
        if z.min() < 0 or z.max() != means.shape[0] - 1 or np.unique(z).size != means.shape[0]:
            raise ValueError(f"labels that are not 0..{means.shape[0] - 1}, each used")
        counts = [int(v) for v in saved["n_clusters_history"]]
        trace = [float(v) for v in saved["objective_history"]]
        if len(counts) != iteration or len(trace) != iteration:
            raise ValueError(f"traces of {len(counts)} and {len(trace)} sweeps at sweep {iteration}")
        restore_rng(self.chain.rng, saved["rng"])
        return GibbsState(z, means, covs, float(saved["p"]), float(saved["q"]), counts, trace)


def _consistent(z: np.ndarray, links: LinkLists, hard: bool) -> np.ndarray:
    """Labels that respect the links: each must-link component takes its members' most common label, then a
    component with a cannot-link inside its cluster moves to a new cluster."""
    n = z.size
    parent = np.arange(n)

    def find(a: int | np.integer[Any]) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return int(a)

    src = np.repeat(np.arange(n), np.diff(links.indptr))
    for a, b, m in zip(src, links.nbr, links.must):
        if m and a < b:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    roots = np.array([find(a) for a in range(n)])
    z = z.copy()
    for r in np.unique(roots[src]) if src.size else []:
        members = np.flatnonzero(roots == r)
        if members.size > 1:
            z[members] = np.bincount(z[members]).argmax()
    next_label = int(z.max()) + 1
    for a, b, m in zip(src, links.nbr, links.must):
        if m or a > b or z[a] != z[b]:
            continue
        if roots[a] == roots[b]:
            if hard:
                raise InfeasibleConstraintsError(
                    f"TVClust links: expected no cannot-link inside a must-link component; received the "
                    f"cannot-link ({a}, {b}) whose rows are joined by must-links. Fix the links, or use p < 1 and "
                    "q < 1 to treat them as noisy."
                )
            continue
        z[roots == roots[b]] = next_label
        next_label += 1
    return z
