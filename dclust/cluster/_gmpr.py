"""GM-PR: a Gaussian mixture (of mixtures) fitted by EM with must-link and cannot-link relations
(docs/algorithms.md 6)."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask import gmpr as _dgmpr
from .._dask.init import take_rows
from .._dask.passes import map_blocks
from .._fit import finish, fit_loop, persisted, restore_finished, warn_unconverged
from .._registry import register
from .._validation import SEED, Interval, Options, as_generator, check_array
from ..constraints._check import check_constraints
from ..errors import (
    InfeasibleConstraintsError, InvalidDataError, message,
)
from ..kernels.gmpr import GaussianStats, MixtureParams, m_step, update_alpha
from ..kernels.kmeans import kmeans_plusplus
from ._base import (
    PASS_PARAMETERS, BaseEstimator, ClusterMixin, HistoryStep, finite_rows, raise_if_bad_block, wrap_output,
)
from ._gmpr_init import chunklet_centers
from ..typing import ArrayLike, CheckpointLike, ConstraintsLike, Ignored, PersistMode, SeedLike

__all__ = ["GMPR"]


def _link_plan(constraints: ConstraintsLike, arr: da.Array, kind: str, n_classes: int) -> _dgmpr.LinkPlan:
    """The block plan of ``constraints`` for the row blocks of ``arr`` (None when there are no links)."""
    if constraints is None:
        return _dgmpr.LinkPlan.empty(arr.chunks[0])
    constraints = check_constraints("GMPR", constraints, arr.shape[0], tuple(arr.chunks[0]), kind)
    if constraints.weighted:
        raise InvalidDataError(
            message("GMPR.fit(constraints=...)", "unweighted links (GM-PR treats every link as certain)",
                    "a graph with link weights", "Rebuild the graph with from_pairs(...) without weight=.")
        )
    if n_classes == 1 and constraints.n_cannot:
        raise InfeasibleConstraintsError(
            message("GMPR(n_classes=1) with cannot-links", "n_classes >= 2 (1 - sum(alpha^2) = 0 otherwise)",
                    f"{constraints.n_cannot} cannot-link(s)", "Use n_classes >= 2 or drop the cannot-links.")
        )
    return _dgmpr.LinkPlan.from_blocks(arr.chunks[0], constraints.blocks())


@register
class GMPR(ClusterMixin, BaseEstimator):  # type: ignore[misc]  # scikit-learn ships no type hints
    """Gaussian mixture with pairwise relations (GM-PR, Yu, Elhabian & Whitaker), fitted by EM on Dask.

    Each of ``n_classes`` classes is a mixture of ``clusters_per_class`` Gaussians. Must-linked points share one
    class variable; cannot-linked points have different classes (docs/algorithms.md 6.1). Every pass is one E-step
    of one task per row block (its unlinked rows and its share of the links, whose far endpoints are gathered
    once per fit), with per-component statistics merged by Chan's rule in a tree; the class weights are then
    solved on the driver (closed form for two classes, SLSQP with generalised-EM acceptance otherwise). A point
    in several links is counted once per link (composite likelihood, E-GP2). Without links this is EM for a
    Gaussian mixture of mixtures.

    Parameters
    ----------
    n_classes : int, default 2
        Number of classes ``M`` (the output labels).
    clusters_per_class : int, default 1
        Gaussian sub-clusters per class ``m_K``.
    covariance_type : {"full", "diag"}, default "full"
        With "diag", float32 data and overlapping components (most components within 60 nats of each other's
        means), the E-step computes the log-densities and responsibilities in float32, as scikit-learn's
        ``GaussianMixture`` does for float32 input, and sums them in float64: a 1.4x faster kernel, within
        about 1e-6 of the float64 E-step's statistics, and still the same model for every chunking. Pass float64
        data for a float64 E-step.
    reg_covar : float, default 1e-6
        Added to the diagonal of every covariance (E-GP7).
    max_iter : int, default 200
        Maximum number of EM iterations (M-steps).
    tol : float, default 1e-6
        Stop when ``|ℓ_t − ℓ_{t−1}| <= tol |ℓ_t|``.
    init : {"chunklets", "k-means++", "random"}, default "chunklets"
        Class seeds (and each class's sub-cluster seeds) by D² sampling with one local trial, or uniformly, on
        a uniform sample of ``init_sample_size`` rows; then one pass assigns every row to its nearest seed and
        gives the initial means and covariances (docs/algorithms.md 6.5). ``α = 1/M``, ``π = 1/m_K``. "chunklets"
        (the link-aware variant of 6.5) seeds the classes from the must-link components and the sample by a
        constrained k-means that keeps cannot-linked chunklets apart; without links it is "k-means++".
    init_sample_size : int, default 10000
    random_state : int, Generator or None
    persist : {"auto", True, False}, default "auto"
        As in :class:`KMeans`.
    split_every : int or None
        Fan-in of the tree reduction (default 8).
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: the parameters, the log-likelihood history and the iteration are saved
        atomically after every EM iteration, and a refit with the same parameters, data and constraint graph
        resumes from them with the identical model.

    Attributes
    ----------
    weights_ : ndarray (n_classes,)
        Class weights ``α``.
    sub_weights_ : ndarray (n_classes, clusters_per_class)
        Sub-cluster weights ``π`` within each class.
    means_ : ndarray (n_classes, clusters_per_class, n_features)
    covariances_ : ndarray (n_classes, clusters_per_class, n_features, n_features) or (..., n_features) for diag
    log_likelihood_ : float
        ``ℓ`` of docs/algorithms.md 6.2 at the final parameters.
    objective_history_ : list of float
        ``ℓ`` at the initial parameters and after every M-step (non-decreasing up to rounding and ``reg_covar``).
    n_iter_ : int
        Number of M-steps.
    converged_ : bool
    n_must_, n_cannot_ : int
        Links used in the fit.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> rng = np.random.default_rng(0)
    >>> X = np.concatenate([rng.normal(0, 1, (100, 2)), rng.normal(8, 1, (100, 2))])
    >>> G = dclust.ConstraintGraph.from_pairs([0, 1], [150, 2], [False, True], n_samples=200)
    >>> gm = dclust.GMPR(n_classes=2, random_state=0).fit(X, constraints=G)
    >>> labels = gm.predict(X)
    >>> bool(labels[0] != labels[150]), sorted(np.bincount(labels).tolist())
    (True, [100, 100])
    """

    weights_: npt.NDArray[np.float64]
    sub_weights_: npt.NDArray[np.float64]
    means_: npt.NDArray[np.float64]
    covariances_: npt.NDArray[np.float64]
    log_likelihood_: float
    objective_history_: list[float]
    n_iter_: int
    converged_: bool
    n_must_: int
    n_cannot_: int
    n_features_in_: int
    _warned: bool  # during a fit: the light-component warning was given

    _parameter_constraints = {
        "n_classes": [Interval("int", 1, None)],
        "clusters_per_class": [Interval("int", 1, None)],
        "covariance_type": [Options(("full", "diag"))],
        "reg_covar": [Interval("real", 0, None)],
        "max_iter": [Interval("int", 1, None)],
        "tol": [Interval("real", 0, None)],
        "init": [Options(("chunklets", "k-means++", "random"))],
        "init_sample_size": [Interval("int", 1, None)],
        "random_state": [SEED],
        **PASS_PARAMETERS,
    }

    def __init__(
        self, *, n_classes: int = 2, clusters_per_class: int = 1, covariance_type: Literal["full", "diag"] = "full",
        reg_covar: float = 1e-6, max_iter: int = 200, tol: float = 1e-6,
        init: Literal["chunklets", "k-means++", "random"] = "chunklets", init_sample_size: int = 10_000,
        random_state: SeedLike = None, persist: PersistMode = "auto", split_every: int | None = None,
        checkpoint: CheckpointLike = None,
    ) -> None:
        self.n_classes, self.clusters_per_class = n_classes, clusters_per_class
        self.covariance_type, self.reg_covar, self.max_iter, self.tol = covariance_type, reg_covar, max_iter, tol
        self.init, self.init_sample_size, self.random_state = init, init_sample_size, random_state
        self.persist, self.split_every, self.checkpoint = persist, split_every, checkpoint

    # ------------------------------------------------------------------------------------------------------
    def _params(self) -> MixtureParams:
        self._check_fitted("means_")
        return MixtureParams.build(self.weights_, self.sub_weights_, self.means_, self.covariances_)

    def _build(self, alpha: npt.NDArray[np.float64], pi: npt.NDArray[np.float64], means: npt.NDArray[np.float64],
               cov: npt.NDArray[np.float64]) -> MixtureParams:
        try:
            return MixtureParams.build(alpha, pi, means, cov)
        except np.linalg.LinAlgError:
            raise InvalidDataError(
                message("GMPR covariances", "positive-definite covariance matrices",
                        f"a singular covariance with reg_covar={self.reg_covar}",
                        "Increase reg_covar (e.g. 1e-6 times the data's variance), use fewer classes or "
                        "clusters_per_class, or remove duplicated points.")
            ) from None

    def _seeds(self, arr: da.Array, rng: np.random.Generator, constraints: ConstraintsLike = None
               ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        n, d = arr.shape
        M, K = self.n_classes, self.clusters_per_class
        idx = np.sort(rng.choice(n, size=min(n, max(self.init_sample_size, M * K)), replace=False))
        P = take_rows(arr, idx)
        if not np.isfinite(P).all():
            bad = int(idx[np.flatnonzero(~np.isfinite(P).all(axis=1))[0]])
            raise InvalidDataError(message("X", "finite values", f"NaN or infinity in row {bad}",
                                           "Drop or impute those rows and fit again."))
        if self.init == "chunklets" and constraints is not None and constraints.n_links:
            classes = chunklet_centers(arr, constraints, P, M, rng)
        else:
            classes = self._pick(P, M, rng)
        d2 = ((P[:, None, :] - classes[None]) ** 2).sum(axis=2)
        lab = np.argmin(d2, axis=1)
        subs = np.empty((M, K, d))
        for m in range(M):
            Pm = P[lab == m]
            if K == 1 or Pm.shape[0] < K:
                subs[m] = classes[m] if K == 1 or Pm.shape[0] == 0 else np.concatenate(
                    [Pm, np.repeat(classes[m][None], K - Pm.shape[0], axis=0)])
            else:
                subs[m] = self._pick(Pm, K, rng)
        return classes, subs

    def _pick(self, P: npt.NDArray[np.float64], k: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        if self.init == "random":
            return P[np.sort(rng.choice(P.shape[0], size=k, replace=False))]
        return kmeans_plusplus(P, np.ones(P.shape[0]), k, rng, n_local_trials=1)

    def _initial_params(self, arr: da.Array, rng: np.random.Generator, constraints: ConstraintsLike = None
                        ) -> MixtureParams:
        M, K, d = self.n_classes, self.clusters_per_class, arr.shape[1]
        diag = self.covariance_type == "diag"
        classes, subs = self._seeds(arr, rng, constraints)
        stats = _dgmpr.init_stats(arr, classes, subs, diag, self.split_every)
        raise_if_bad_block(stats, arr)  # type: ignore[arg-type]  # duck: it reads only .bad_block
        N = stats.weight.reshape(M, K)
        _, _, total_scatter = _pooled(stats)
        pooled = total_scatter / max(stats.weight.sum(), 1.0)
        means = np.where(N[:, :, None] > 0, stats.mean.reshape(M, K, d), subs)
        safe = np.where(N > 1, N, 1.0)
        if diag:
            cov = stats.scatter.reshape(M, K, d) / safe[:, :, None]
            cov = np.where(N[:, :, None] > 1, cov, pooled) + self.reg_covar
        else:
            cov = stats.scatter.reshape(M, K, d, d) / safe[:, :, None, None]
            cov = np.where(N[:, :, None, None] > 1, cov, pooled) + self.reg_covar * np.eye(d)
        self._warn_light(stats.weight, d)
        return self._build(np.full(M, 1.0 / M), np.full((M, K), 1.0 / K), means, cov)

    def _warn_light(self, weight: npt.NDArray[np.float64], d: int) -> None:
        light = np.flatnonzero(weight < d + 1)
        if light.size and not self._warned:
            self._warned = True
            warnings.warn(
                f"GMPR: {light.size} component(s) hold fewer than n_features + 1 = {d + 1} points (weights "
                f"{np.round(weight[light], 3).tolist()}); reg_covar={self.reg_covar} keeps their covariance "
                "positive definite. Use fewer classes or clusters_per_class if this persists.",
                UserWarning, stacklevel=3,
            )

    # ------------------------------------------------------------------------------------------------------
    def fit(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> "GMPR":
        """Fit the mixture to ``X`` (numpy, dask, zarr or xarray; (n_samples, n_features)) with optional links.

        Parameters
        ----------
        X : array-like (n_samples, n_features)
            Read chunk by chunk on every EM pass (never whole); at least ``n_classes * clusters_per_class`` rows.
        y : ignored
        constraints : ConstraintGraph, optional
            Must-link / cannot-link pairs over the rows of X, aligned to ``X.chunks[0]`` (for numpy input dclust
            aligns it). Link weights are not supported.

        Returns
        -------
        self
        """
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        M, K = self.n_classes, self.clusters_per_class
        if n < M * K:
            raise InvalidDataError(
                message("GMPR", f"at least n_classes * clusters_per_class = {M * K} samples", f"{n} samples",
                        "Lower n_classes / clusters_per_class or pass more data.")
            )
        plan = _link_plan(constraints, arr, info.kind, M)
        ck = self._checkpointer(arr, constraints=constraints)
        state = ck.resume()
        if restore_finished(self, ck, state) is not None:
            self._warn_unconverged()
            finish(self, ck, n_iter=self.n_iter_, objective=self.log_likelihood_, n_clusters=M * K, save=False)
            return self
        rng = as_generator(self.random_state)
        arr = persisted(arr, info.kind, self.persist)
        self._warned = False
        links = _dgmpr.persist_payload(_dgmpr.link_payload(arr, plan), arr)  # O(links · D) floats, gathered once
        em = _EM(self, arr, plan, links, rng, ck, constraints)
        run = fit_loop(em, max_iter=self.max_iter, ck=ck, resume=None if state is None else state["loop"])
        params, history = run.state["params"], run.state["history"]
        self.weights_ = params.alpha
        self.sub_weights_ = params.pi
        self.means_ = params.means
        self.covariances_ = params.covariances
        self.log_likelihood_ = float(history[-1])
        self.objective_history_ = history
        self.n_iter_ = int(len(history) - 1)
        self.converged_ = bool(run.converged)
        self.n_must_ = int(plan.n_must)
        self.n_cannot_ = int(plan.n_cannot)
        self.n_features_in_ = d
        del self._warned
        self._warn_unconverged()
        finish(self, ck, n_iter=self.n_iter_, objective=self.log_likelihood_, n_clusters=M * K)
        return self

    def _warn_unconverged(self) -> None:
        if not self.converged_:
            h = self.objective_history_
            change = abs(h[-1] - h[-2]) / max(abs(h[-1]), 1e-300) if len(h) > 1 else float("nan")
            warn_unconverged("GMPR", self.max_iter, note=f" (last relative change {change:.3g} > tol={self.tol})",
                             fix="Increase max_iter or tol.")

    def predict_proba(self, X: ArrayLike, constraints: ConstraintsLike = None) -> ArrayLike:
        """Class posteriors, shape (n_samples, n_classes).

        Without ``constraints`` every row gets ``softmax_m(log α_m + log g(x|m))``. With a ConstraintGraph over
        the rows of ``X``, linked rows get their pair posterior (``s`` or ``d``; the mean over their links).
        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input.
        """
        params = self._params()
        arr, info = check_array(X, n_features=self.means_.shape[2])
        plan = None if constraints is None else _link_plan(constraints, arr, info.kind, self.n_classes)
        return wrap_output(_dgmpr.proba(finite_rows(arr, "predict"), params, plan), info, "proba")

    def predict(self, X: ArrayLike, constraints: ConstraintsLike = None) -> ArrayLike:
        """The most probable class of every row (see :meth:`predict_proba`; lowest index on ties)."""
        params = self._params()
        arr, info = check_array(X, n_features=self.means_.shape[2])
        plan = None if constraints is None else _link_plan(constraints, arr, info.kind, self.n_classes)
        p = _dgmpr.proba(finite_rows(arr, "predict"), params, plan)
        labels = map_blocks(p, _argmax_rows, dtype=np.int32, drop_axis=1)
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> ArrayLike:
        """``fit(X, constraints=constraints)`` then ``predict(X, constraints=constraints)``."""
        return self.fit(X, constraints=constraints).predict(X, constraints=constraints)


class _EM(HistoryStep):
    """One EM iteration of GM-PR (M-step from the last E-step's statistics, then the E-step pass of the new
    parameters) for the fit loop. The state: ``params``, ``stats`` (of the E-step at ``params``; None right after
    a resume: the next step recomputes them) and ``history`` (the log-likelihood at the initial parameters and
    after every M-step)."""

    name = "GMPR"

    def __init__(self, est: GMPR, arr: da.Array, plan: _dgmpr.LinkPlan, links: da.Array | None,
                 rng: np.random.Generator, ck: Any, constraints: ConstraintsLike = None) -> None:
        self.est, self.arr, self.plan, self.links, self.rng, self.ck = est, arr, plan, links, rng, ck
        self.constraints = constraints
        self.size = est.n_classes * est.clusters_per_class

    def _estep(self, params: MixtureParams) -> GaussianStats:
        return _dgmpr.estep(self.arr, self.plan, params, self.est.split_every, self.links)

    def _first_estep(self, params: MixtureParams) -> GaussianStats:
        """The E-step of the first pass of this process: NaN/inf checks and the data's content fingerprint."""
        stats = self._estep(params)
        raise_if_bad_block(stats, self.arr)  # type: ignore[arg-type]  # duck: it reads only .bad_block
        w_all, mean_all, scatter_all = _pooled(stats)  # independent of the parameters: the data's own sums
        self.ck.check_content(w_all, mean_all,
                              float(np.trace(scatter_all) if scatter_all.ndim == 2 else scatter_all.sum()))
        return stats

    def start(self) -> dict[str, Any]:
        params = self.est._initial_params(self.arr, self.rng, self.constraints)
        stats = self._first_estep(params)
        return {"params": params, "stats": stats,
                "history": [_dgmpr.total_loglik(stats, params.alpha, self.plan.n_cannot)]}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        est, params = self.est, s["params"]
        stats = s["stats"] if s["stats"] is not None else self._first_estep(params)
        new, weight = m_step(stats, params, est.reg_covar)
        est._warn_light(weight, self.arr.shape[1])
        alpha, _ = update_alpha(stats.class_counts, self.plan.n_cannot, params.alpha)
        params = est._build(alpha, new.pi, new.means, new.covariances)
        stats = self._estep(params)
        ll = _dgmpr.total_loglik(stats, params.alpha, self.plan.n_cannot)
        return {"params": params, "stats": stats, "history": s["history"] + [ll]}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        ll_old, ll = new["history"][-2], new["history"][-1]
        return bool(abs(ll - ll_old) <= self.est.tol * abs(ll))

    def n_clusters(self, s: dict[str, Any]) -> int:
        return self.size

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        p = s["params"]
        return {"alpha": p.alpha, "pi": p.pi, "means": p.means, "covariances": p.covariances,
                "history": s["history"], "warned": self.est._warned}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        est, d = self.est, self.arr.shape[1]
        M, K = est.n_classes, est.clusters_per_class
        cov_shape = (M, K, d) if est.covariance_type == "diag" else (M, K, d, d)
        alpha = ck.require_shape("class weights", saved["alpha"], (M,)).astype(np.float64)
        pi = ck.require_shape("sub-cluster weights", saved["pi"], (M, K)).astype(np.float64)
        means = ck.require_shape("means", saved["means"], (M, K, d)).astype(np.float64)
        cov = ck.require_shape("covariances", saved["covariances"], cov_shape).astype(np.float64)
        history = [float(v) for v in saved["history"]]
        if len(history) != iteration + 1:
            raise ValueError(f"a log-likelihood history of {len(history)} values at iteration {iteration}")
        est._warned = bool(saved["warned"])
        return {"params": est._build(alpha, pi, means, cov), "stats": None, "history": history}


def _argmax_rows(b: npt.NDArray[np.float64]) -> npt.NDArray[np.int32]:
    """Per row, the index of the largest column (a module function: dask tokenizes a lambda by pickling it)."""
    out: npt.NDArray[np.int32] = np.argmax(b, axis=1).astype(np.int32)
    return out


def _pooled(stats: GaussianStats) -> tuple[float, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Weight, mean and scatter (matrix, or diagonal vector) of all rows together."""
    w = stats.weight
    total = w.sum()
    if total <= 0:
        return 0.0, np.zeros(stats.mean.shape[1]), stats.scatter[0] * 0
    mean = (w[:, None] * stats.mean).sum(axis=0) / total
    delta = stats.mean - mean
    if stats.diag:
        scatter = stats.scatter.sum(axis=0) + (w[:, None] * delta * delta).sum(axis=0)
    else:
        scatter = stats.scatter.sum(axis=0) + np.einsum("c,cd,ce->de", w, delta, delta)
    return float(total), mean, scatter
