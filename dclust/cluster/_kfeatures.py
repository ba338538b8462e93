"""K-features (ALGORITHMS.md 2.4) and stepwise K-features (2.5): feature allocation with a fixed number of
features, every row optimised independently (fully parallel), with greedy initialisation (2.6) and restarts."""

from __future__ import annotations

import warnings

import numpy as np

from .._dask.blocks import persist_if_fits
from .._dask.features import greedy_init, init_bits, kfeatures_pass
from .._dask.loop import ProgressEvent, Stopwatch, emit, logger
from .._registry import register
from .._validation import SEED, Interval, Options, as_generator, check_array
from ..errors import ConvergenceWarning, InvalidParameterError, message
from ..kernels.bpmeans import feature_means
from ..kernels.kfeatures import MAX_EXHAUSTIVE
from ._base import BaseEstimator, wrap_output
from ._features import FeatureMixin, first_pass

__all__ = ["KFeatures", "StepwiseKFeatures"]

_COMMON = {
    "n_init": [Interval("int", 1, None)],
    "exhaustive": [Options((True, False))],
    "max_iter": [Interval("int", 1, None)],
    "random_state": [SEED],
    "persist": [Options(("auto", True, False))],
    "split_every": [Interval("int", 2, None), Options((None,))],
}


def _check_exhaustive(name: str, exhaustive: bool, k: int) -> None:
    if exhaustive and k > MAX_EXHAUSTIVE:
        raise InvalidParameterError(
            message(f"{name}(exhaustive=True)", f"at most {MAX_EXHAUSTIVE} features (2**K rows are enumerated)",
                    f"{k} features", "Use exhaustive=False (coordinate sweeps) for more features.")
        )


def _run(arr, k, *, mean, sq_norm, n_init, exhaustive, max_iter, rng, split_every):
    """The best of ``n_init`` K-features runs (lowest ``||X - ZA||^2``), as a dict of results."""
    best = None
    for _ in range(n_init):
        seed = int(rng.integers(2**62))
        A, _, _ = greedy_init(arr, mean, lam=0.0, n_features=k, seed=seed, max_features=k,
                              split_every=split_every)
        A0 = A.copy()
        Z = init_bits(arr, A, True).persist()
        history, assign, converged = [], [], False
        for it in range(max_iter):
            Z, gram = kfeatures_pass(arr, Z, A, exhaustive=exhaustive, split_every=split_every)
            assign.append(gram.sse)
            A = feature_means(gram.G, gram.B)
            history.append(float(sq_norm - np.sum(gram.B * A)))
            if gram.flips == 0:
                converged = True
                break
        if best is None or history[-1] < best["history"][-1]:
            best = dict(A=A, A0=A0, Z=Z, history=history, assign=assign, n_iter=it + 1, converged=converged)
    return best


@register
class KFeatures(FeatureMixin, BaseEstimator):
    """K-features ([MB] eq. 14): minimise ``||X - Z A||_F^2`` over binary Z with a fixed number of features.

    Step 1 optimises every row independently (coordinate sweeps repeated until the row stops changing, or all
    ``2**K`` rows with ``exhaustive=True``), so it is one parallel map; step 2 is ``A = pinv(Z'Z) Z'X`` from the
    tree-reduced ``G`` and ``B``. Features start from the greedy initialisation of ALGORITHMS.md 2.6 (a base
    feature at the mean plus ``n_features - 1`` drawn residuals); the best of ``n_init`` restarts is kept.

    Parameters
    ----------
    n_features : int, default 2
        K, the number of latent features, including the base feature. (Not the number of input columns, which
        is ``n_features_in_``.)
    n_init : int, default 1
        Restarts; the one with the lowest ``||X - ZA||^2`` is kept.
    exhaustive : bool, default False
        Enumerate all 2**K rows (K <= 12) instead of coordinate sweeps.
    max_iter : int, default 100
    random_state : int, Generator or None
    persist : {"auto", True, False}, default "auto"
    split_every : int, optional

    Attributes
    ----------
    features_ : ndarray (n_latent_features_, n_features_in_)
    n_latent_features_ : int
    allocation_ : ndarray or dask array (n_samples, K) uint8 (not saved)
    init_features_ : ndarray, the greedy start of the kept restart
    objective_ : float, ``||X - ZA||^2``
    objective_history_ : list of float (non-increasing)
    assignment_objective_history_ : list of float
    n_iter_, converged_, n_features_in_

    Examples
    --------
    >>> import numpy as np, dclust
    >>> X = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    >>> kf = dclust.KFeatures(n_features=1, random_state=0).fit(X)
    >>> kf.features_.tolist()
    [[1.0, 1.0]]
    """

    _parameter_constraints = {"n_features": [Interval("int", 1, None)], **_COMMON}
    _transient_attributes = ("allocation_",)

    def __init__(self, *, n_features=2, n_init=1, exhaustive=False, max_iter=100, random_state=None,
                 persist="auto", split_every=None):
        self.n_features = n_features
        self.n_init = n_init
        self.exhaustive = exhaustive
        self.max_iter = max_iter
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every

    def fit(self, X, y=None) -> "KFeatures":
        """Learn ``n_features`` features from ``X`` (shape (n_samples, n_features_in))."""
        self._validate_params()
        _check_exhaustive("KFeatures", self.exhaustive, self.n_features)
        arr, info = check_array(X)
        rng = as_generator(self.random_state)
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        watch = Stopwatch()
        mean, sq_norm, _, _ = first_pass(arr, seed=0, counts=np.zeros(len(arr.chunks[0]), np.int64),
                                         split_every=self.split_every)
        best = _run(arr, self.n_features, mean=mean, sq_norm=sq_norm, n_init=self.n_init,
                    exhaustive=self.exhaustive, max_iter=self.max_iter, rng=rng, split_every=self.split_every)
        _store(self, best, info, arr.shape[1], 0.0)
        emit(ProgressEvent("KFeatures", "done", self.n_iter_, self.objective_, self.n_features, watch.lap()))
        return self


def _store(est, best, info, d, lam_k):
    if not best["converged"]:
        warnings.warn(f"{type(est).__name__} did not converge in max_iter={est.max_iter} passes; increase max_iter.",
                      ConvergenceWarning, stacklevel=3)
    est.features_ = best["A"]
    est.n_latent_features_ = int(best["A"].shape[0])
    est.init_features_ = best["A0"]
    est.allocation_ = wrap_output(best["Z"], info, "allocation")
    est.objective_history_ = [h + lam_k for h in best["history"]]
    est.assignment_objective_history_ = [h + lam_k for h in best["assign"]]
    est.objective_ = est.objective_history_[-1]
    est.n_iter_ = best["n_iter"]
    est.converged_ = best["converged"]
    est.n_features_in_ = d


@register
class StepwiseKFeatures(FeatureMixin, BaseEstimator):
    """Stepwise K-features ([MB] section 5, ALGORITHMS.md 2.5): K-features for K = 1, 2, ... until the BP-means
    objective ``||X - ZA||^2 + lam*K`` stops decreasing; the last K that decreased it is returned (E-MB4).

    Parameters
    ----------
    lam : float, default 1.0
        Penalty per feature (squared-distance units).
    max_features : int, default 20
        Bound on K: if the objective still decreases at this K, an error suggests a larger ``lam``.
    n_init, exhaustive, max_iter, random_state, persist, split_every
        As in :class:`KFeatures` (per K).

    Attributes
    ----------
    features_, n_latent_features_, allocation_, init_features_, objective_history_, n_iter_, converged_,
    n_features_in_ : as in :class:`KFeatures`, for the chosen K (objectives include ``lam * K``)
    objective_ : float, ``||X - ZA||^2 + lam * K``
    objectives_by_k_ : list of float, ``J_K`` for K = 1, 2, ... as explored

    Examples
    --------
    >>> import numpy as np, dclust
    >>> Z = np.array([[1, 0], [1, 1]] * 5)
    >>> X = Z @ np.array([[5.0, 0.0], [0.0, 5.0]])
    >>> dclust.StepwiseKFeatures(lam=1.0, random_state=0).fit(X).n_latent_features_
    2
    """

    _parameter_constraints = {"lam": [Interval("real", 0, None, "left")],
                              "max_features": [Interval("int", 1, None)], **_COMMON}
    _transient_attributes = ("allocation_",)

    def __init__(self, *, lam=1.0, max_features=20, n_init=1, exhaustive=False, max_iter=100, random_state=None,
                 persist="auto", split_every=None):
        self.lam = lam
        self.max_features = max_features
        self.n_init = n_init
        self.exhaustive = exhaustive
        self.max_iter = max_iter
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every

    def fit(self, X, y=None) -> "StepwiseKFeatures":
        """Choose K and learn the features of ``X``."""
        self._validate_params()
        _check_exhaustive("StepwiseKFeatures", self.exhaustive, self.max_features)
        arr, info = check_array(X)
        rng = as_generator(self.random_state)
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        watch = Stopwatch()
        lam = float(self.lam)
        mean, sq_norm, _, _ = first_pass(arr, seed=0, counts=np.zeros(len(arr.chunks[0]), np.int64),
                                         split_every=self.split_every)
        prev, objectives = None, []
        for k in range(1, self.max_features + 2):
            if k > self.max_features:
                gain = objectives[-2] - objectives[-1]
                raise InvalidParameterError(message(
                    f"StepwiseKFeatures(lam={self.lam!r}, max_features={self.max_features})",
                    f"the objective to stop decreasing by K = max_features = {self.max_features}",
                    f"an objective that still fell by {gain:.4g} from K = {k - 2} to K = {k - 1}",
                    f"Increase lam (each feature costs lam; a lam above about {gain:.4g} stops this step), or "
                    f"raise max_features.",
                ))
            cur = _run(arr, k, mean=mean, sq_norm=sq_norm, n_init=self.n_init, exhaustive=self.exhaustive,
                       max_iter=self.max_iter, rng=rng, split_every=self.split_every)
            objectives.append(cur["history"][-1] + lam * k)
            emit(ProgressEvent("StepwiseKFeatures", "iter", k, objectives[-1], k, watch.lap()))
            if prev is not None and objectives[-1] >= objectives[-2]:
                break
            prev = cur
        _store(self, prev, info, arr.shape[1], lam * prev["A"].shape[0])
        self.objectives_by_k_ = objectives
        emit(ProgressEvent("StepwiseKFeatures", "done", len(objectives), self.objective_, self.n_latent_features_,
                           0.0))
        return self
