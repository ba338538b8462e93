"""K-features (docs/algorithms.md 2.4) and stepwise K-features (2.5): feature allocation with a fixed number of
features, every row optimised independently (fully parallel), with greedy initialisation (2.6) and restarts."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Literal, TypeAlias

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.features import greedy_init, init_bits, kfeatures_pass
from .._dask.passes import persist
from .._fit import (
    LoopResult, Step, best_of, finish, fit_loop, persisted, restore_finished, restore_rng, rng_state, warn_unconverged,
)
from .._registry import register
from .._validation import SEED, InputInfo, Interval, Options, as_generator, check_array
from ..errors import InvalidParameterError, message
from ..kernels.bpmeans import feature_means
from ..kernels.kfeatures import MAX_EXHAUSTIVE
from ._base import HistoryStep, PASS_PARAMETERS, BaseEstimator, wrap_output
from ._features import FeatureMixin, first_pass
from ..typing import ArrayLike, CheckpointLike, Ignored, PersistMode, SeedLike

__all__ = ["KFeatures", "StepwiseKFeatures"]

_Estimator: TypeAlias = "KFeatures | StepwiseKFeatures"  # what the shared helpers below take

_COMMON = {
    "n_init": [Interval("int", 1, None)],
    "exhaustive": [Options((True, False))],
    "max_iter": [Interval("int", 1, None)],
    "random_state": [SEED],
    **PASS_PARAMETERS,
}


def _check_exhaustive(name: str, exhaustive: bool, k: int) -> None:
    if exhaustive and k > MAX_EXHAUSTIVE:
        raise InvalidParameterError(
            message(f"{name}(exhaustive=True)", f"at most {MAX_EXHAUSTIVE} features (2**K rows are enumerated)",
                    f"{k} features", "Use exhaustive=False (coordinate sweeps) for more features.")
        )


class _Run(HistoryStep):
    """One K-features run with ``k`` features ([MB] eq. 14) for the fit loop: greedy initialisation (2.6), then
    passes of step 1 (every row re-optimised) and step 2 (``A = pinv(Z'Z) Z'X``) until no bit flips.

    The state: features ``A``, the greedy start ``A0``, the allocation ``Z`` (a persisted dask array), ``history``
    (``||X - ZA||^2`` after every pass) and ``assign`` (after every assignment step); ``flips`` of the last pass.
    """

    unit = "passes"

    def __init__(self, est: _Estimator, arr: da.Array, k: int, mean: npt.NDArray[np.float64], sq_norm: float,
                 rng: np.random.Generator) -> None:
        self.name = type(est).__name__
        self.est, self.arr, self.k, self.mean, self.sq_norm, self.rng = est, arr, k, mean, sq_norm, rng

    def start(self) -> dict[str, Any]:
        seed = int(self.rng.integers(2**62))
        A, _, _ = greedy_init(self.arr, self.mean, lam=0.0, n_features=self.k, seed=seed, max_features=self.k,
                              split_every=self.est.split_every)
        Z = persist(init_bits(self.arr, A, True))
        return {"A": A, "A0": A.copy(), "Z": Z, "history": [], "assign": [], "flips": -1}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        Z, gram = kfeatures_pass(self.arr, s["Z"], s["A"], exhaustive=self.est.exhaustive,
                                 split_every=self.est.split_every)
        A = feature_means(gram.G, gram.B)
        return {"A": A, "A0": s["A0"], "Z": Z, "history": s["history"] + [float(self.sq_norm - np.sum(gram.B * A))],
                "assign": s["assign"] + [gram.sse], "flips": gram.flips}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return bool(new["flips"] == 0)

    def n_clusters(self, s: dict[str, Any]) -> int:
        return self.k

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {key: s[key] for key in ("A", "A0", "Z", "history", "assign")}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        s = self._checked(ck, saved, "the run's")
        if len(s["history"]) != iteration:
            raise ValueError(f"histories of {len(s['history'])} passes at pass {iteration}")
        return {**s, "flips": -1}

    def result(self, s: dict[str, Any], run: LoopResult) -> dict[str, Any]:
        return {**self.to_checkpoint(s), "n_iter": run.n_iter, "converged": run.converged}

    def result_from_checkpoint(self, ck: Any, saved: dict[str, Any]) -> dict[str, Any]:
        return {**self._checked(ck, saved, "the best run's"), "n_iter": int(saved["n_iter"]),
                "converged": bool(saved["converged"])}

    def _checked(self, ck: Any, r: dict[str, Any], what: str) -> dict[str, Any]:
        """A run of a checkpoint (features, allocation, histories), shapes checked."""
        (n, d), k, max_iter = self.arr.shape, self.k, self.est.max_iter
        out = {"A": ck.require_shape(f"{what} features", r["A"], (k, d)).astype(np.float64),
               "A0": ck.require_shape(f"{what} initial features", r["A0"], (k, d)).astype(np.float64)}
        Z = r["Z"]
        if not hasattr(Z, "chunks") or Z.shape != (n, k) or tuple(Z.chunks[0]) != tuple(self.arr.chunks[0]):
            raise ValueError(f"{what} allocation of shape {getattr(Z, 'shape', None)}, expected ({n}, {k})")
        out["Z"] = Z.astype(np.uint8)
        out["history"], out["assign"] = [float(v) for v in r["history"]], [float(v) for v in r["assign"]]
        if not 0 < len(out["history"]) <= max_iter or len(out["assign"]) != len(out["history"]):
            raise ValueError(f"{what} histories of {len(out['history'])} passes (max_iter={max_iter})")
        return out


def _best_run(est: _Estimator, arr: da.Array, k: int, mean: npt.NDArray[np.float64], sq_norm: float,
              rng: np.random.Generator, ck: Any, resume: dict[str, Any] | None,
              context: Callable[[], dict[str, Any]] | None = None, announce: bool = True) -> dict[str, Any]:
    """The best of ``est.n_init`` K-features runs with ``k`` features (lowest ``||X - ZA||^2``)."""
    return best_of(lambda j, rng: _Run(est, arr, k, mean, sq_norm, rng), n_init=est.n_init, max_iter=est.max_iter,
                   rng=rng, key=lambda r: r["history"][-1], ck=ck, resume=resume, context=context,
                   announce=announce)


def _start(est: _Estimator, X: ArrayLike, max_k: int) -> tuple[da.Array, InputInfo, Any, dict[str, Any] | None]:
    """The start of a fit: ``(data, input info, checkpointer, checkpoint state or None)`` after the checks of the
    parameters (``max_k``: the largest K, for the ``exhaustive`` bound)."""
    est._validate_params()
    _check_exhaustive(type(est).__name__, est.exhaustive, max_k)
    arr, info = check_array(X)
    ck = est._checkpointer(arr)
    return arr, info, ck, ck.resume()


def _first_pass(est: _Estimator, arr: da.Array, info: InputInfo, ck: Any
                ) -> tuple[da.Array, npt.NDArray[np.float64], float]:
    """``(data, mean, squared norm)``: the data persisted when they fit (dask input), and their mean and squared
    norm from one pass (which also checks that a resumed checkpoint's data are these)."""
    arr = persisted(arr, info.kind, est.persist)
    mean, sq_norm, _, _, _ = first_pass(arr, split_every=est.split_every,
                                        check_content=ck.check_content if ck.active else None)
    return arr, mean, sq_norm


def _restore(est: _Estimator, ck: Any, state: dict[str, Any] | None, info: InputInfo, n: int) -> _Estimator | None:
    """The model of a finished fit's checkpoint (with its allocation Z) on ``est``, or None (no finished fit)."""
    extra = restore_finished(est, ck, state)
    if extra is None:
        return None
    with ck.reading():
        Z = extra["allocation"]
        if not hasattr(Z, "chunks") or Z.shape != (n, est.n_latent_features_):
            raise ValueError(f"an allocation of shape {getattr(Z, 'shape', None)}")
    est.allocation_ = wrap_output(Z, info, "allocation")
    if not est.converged_:
        warn_unconverged(type(est).__name__, est.max_iter, unit="passes", fix="Increase max_iter.")
    finish(est, ck, n_iter=est.n_iter_, objective=est.objective_, n_clusters=est.n_latent_features_, save=False)
    return est


@register
class KFeatures(FeatureMixin, BaseEstimator):
    """K-features ([MB] eq. 14): minimise ``||X - Z A||_F^2`` over binary Z with a fixed number of features.

    Step 1 optimises every row independently (coordinate sweeps repeated until the row stops changing, or all
    ``2**K`` rows with ``exhaustive=True``), so it is one parallel map; step 2 is ``A = pinv(Z'Z) Z'X`` from the
    tree-reduced ``G`` and ``B``. Features start from the greedy initialisation of docs/algorithms.md 2.6 (a base
    feature at the mean plus ``n_components - 1`` drawn residuals); the best of ``n_init`` restarts is kept.

    Parameters
    ----------
    n_components : int, default 2
        K, the number of latent features, including the base feature (scikit-learn's name for the size of a
        learned representation; the number of input columns is ``n_features_in_``).
    n_features : int, deprecated
        The former name of ``n_components``; passing it still works for one release with a ``FutureWarning``.
    n_init : int, default 1
        Restarts; the one with the lowest ``||X - ZA||^2`` is kept.
    exhaustive : bool, default False
        Enumerate all 2**K rows (K <= 12) instead of coordinate sweeps.
    max_iter : int, default 100
    random_state : int, Generator or None
    persist : {"auto", True, False}, default "auto"
    split_every : int, optional
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: after every pass the state (restart, features, the allocation Z as a Zarr array,
        histories, the best run so far and the generator's exact state) is saved atomically; an interrupted fit
        runs the first pass again (it checks that the data are those of the interrupted fit) and resumes at the
        next pass with the identical result. A finished fit's checkpoint holds the model (and Z): a rerun returns
        it at once.
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
    >>> kf = dclust.KFeatures(n_components=1, random_state=0).fit(X)
    >>> kf.features_.tolist()
    [[1.0, 1.0]]
    """

    _parameter_constraints = {"n_components": [Interval("int", 1, None)],
                              "n_features": [Interval("int", 1, None), Options(("deprecated",))], **_COMMON}
    _transient_attributes = ("allocation_",)

    def __init__(
        self, *, n_components: int = 2, n_init: int = 1, exhaustive: bool = False, max_iter: int = 100,
        random_state: SeedLike = None, persist: PersistMode = "auto", split_every: int | None = None,
        checkpoint: CheckpointLike = None, n_features: int | Literal["deprecated"] = "deprecated",
    ) -> None:
        self.n_components, self.n_features, self.n_init = n_components, n_features, n_init
        self.exhaustive, self.max_iter, self.random_state = exhaustive, max_iter, random_state
        self.persist, self.split_every, self.checkpoint = persist, split_every, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "KFeatures":
        """Learn ``n_components`` features from ``X`` (shape (n_samples, n_features_in))."""
        k = self._n_components()
        arr, info, ck, state = _start(self, X, k)
        if _restore(self, ck, state, info, arr.shape[0]) is not None:
            return self
        arr, mean, sq_norm = _first_pass(self, arr, info, ck)
        best = _best_run(self, arr, k, mean, sq_norm, as_generator(self.random_state), ck, state)
        _store(self, best, info, arr.shape[1], 0.0)
        finish(self, ck, n_iter=self.n_iter_, objective=self.objective_, n_clusters=k, allocation=best["Z"])
        return self

    def _n_components(self) -> int:
        if self.n_features == "deprecated":
            return self.n_components
        warnings.warn("KFeatures(n_features=) was renamed n_components= (n_features means the number of input "
                      "columns in scikit-learn); n_features= will be removed in the next release.", FutureWarning,
                      stacklevel=3)
        return self.n_features


def _store(est: _Estimator, best: dict[str, Any], info: InputInfo, d: int, lam_k: float) -> None:
    if not best["converged"]:
        warn_unconverged(type(est).__name__, est.max_iter, unit="passes", fix="Increase max_iter.")
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
    """Stepwise K-features ([MB] section 5, docs/algorithms.md 2.5): K-features for K = 1, 2, ... until the BP-means
    objective ``||X - ZA||^2 + lam*K`` stops decreasing; the last K that decreased it is returned (E-MB4).

    Parameters
    ----------
    lam : float, default 1.0
        Penalty per feature (squared-distance units).
    max_features : int, default 20
        Bound on K: if the objective still decreases at this K, an error suggests a larger ``lam``.
    n_init, exhaustive, max_iter, random_state, persist, split_every
        As in :class:`KFeatures` (per K).
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: after every pass the state (restart, features, the allocation Z as a Zarr array,
        histories, the best run so far, the K reached and the objectives by K and the generator's exact state) is
        saved atomically; an interrupted fit runs the first pass again (it checks that the data are those of the
        interrupted fit) and resumes at the next pass with the identical result. A finished fit's checkpoint holds
        the model (and Z): a rerun returns it at once.

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

    def __init__(
        self, *, lam: float = 1.0, max_features: int = 20, n_init: int = 1, exhaustive: bool = False,
        max_iter: int = 100, random_state: SeedLike = None, persist: PersistMode = "auto",
        split_every: int | None = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.max_features, self.n_init, self.exhaustive = lam, max_features, n_init, exhaustive
        self.max_iter, self.random_state, self.persist = max_iter, random_state, persist
        self.split_every, self.checkpoint = split_every, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "StepwiseKFeatures":
        """Choose K and learn the features of ``X``."""
        arr, info, ck, state = _start(self, X, self.max_features)
        if _restore(self, ck, state, info, arr.shape[0]) is not None:
            return self
        inner = None
        if state is not None and "outer" in state:  # inside the K-features run of a value of K
            state, inner = state["outer"], state
        elif state is not None:
            state = state["loop"]
        arr, mean, sq_norm = _first_pass(self, arr, info, ck)
        search = _Stepwise(self, arr, mean, sq_norm, as_generator(self.random_state), ck, inner)
        run = fit_loop(search, max_iter=self.max_features + 1, ck=ck, resume=state)
        prev = run.state["prev"]
        _store(self, prev, info, arr.shape[1], float(self.lam) * prev["A"].shape[0])
        self.objectives_by_k_ = run.state["objectives"]
        finish(self, ck, n_iter=len(self.objectives_by_k_), objective=self.objective_,
               n_clusters=self.n_latent_features_, allocation=prev["Z"])
        return self


class _Stepwise(Step):
    """The search over K of :class:`StepwiseKFeatures` for the fit loop: pass ``k`` runs K-features with K = k
    (the best of ``n_init`` runs, checkpointed inside with this search's state as ``"outer"``) and ends the search
    when ``J_K = ||X - ZA||^2 + lam K`` stops decreasing; then ``prev`` (the run of K - 1) is the model.

    The state: ``objectives`` (``J_K`` for K = 1, 2, ...), ``cur`` (the best run of the last K) and ``prev``.
    """

    name = "StepwiseKFeatures"

    def __init__(self, est: StepwiseKFeatures, arr: da.Array, mean: npt.NDArray[np.float64], sq_norm: float,
                 rng: np.random.Generator, ck: Any, inner: dict[str, Any] | None) -> None:
        self.est, self.arr, self.mean, self.sq_norm, self.rng, self.ck, self.inner = (
            est, arr, mean, sq_norm, rng, ck, inner)

    def start(self) -> dict[str, Any]:
        return {"objectives": [], "cur": None, "prev": None}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        est, objectives = self.est, s["objectives"]
        k = len(objectives) + 1
        if k > est.max_features:
            gain = objectives[-2] - objectives[-1]
            raise InvalidParameterError(message(
                f"StepwiseKFeatures(lam={est.lam!r}, max_features={est.max_features})",
                f"the objective to stop decreasing by K = max_features = {est.max_features}",
                f"an objective that still fell by {gain:.4g} from K = {k - 2} to K = {k - 1}",
                f"Increase lam (each feature costs lam; a lam above about {gain:.4g} stops this step), or "
                f"raise max_features.",
            ))
        outer = {"iteration": k - 1, "state": self.to_checkpoint(s)} if self.ck.active else None
        cur = _best_run(est, self.arr, k, self.mean, self.sq_norm, self.rng, self.ck, self.inner,
                        context=lambda: {"phase": "iter", "outer": outer}, announce=False)
        self.inner = None
        return {"objectives": objectives + [cur["history"][-1] + float(est.lam) * k], "cur": cur, "prev": s["cur"]}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return len(new["objectives"]) > 1 and bool(new["objectives"][-1] >= new["objectives"][-2])

    def objective(self, s: dict[str, Any]) -> float:
        return float(s["objectives"][-1]) if s["objectives"] else float("nan")

    def n_clusters(self, s: dict[str, Any]) -> int:
        return len(s["objectives"])

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"objectives": s["objectives"], "last": s["cur"], "rng": rng_state(self.rng)}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        objectives = [float(v) for v in saved["objectives"]]
        if len(objectives) != iteration:
            raise ValueError(f"objectives for {len(objectives)} values of K at K = {iteration + 1}")
        last = saved["last"]
        if (last is None) != (iteration == 0):
            raise ValueError(f"a best run {'missing' if last is None else 'present'} at K = {iteration + 1}")
        if last is not None:
            last = _Run(self.est, self.arr, iteration, self.mean, self.sq_norm, self.rng).result_from_checkpoint(
                ck, last)
        restore_rng(self.rng, saved["rng"])
        return {"objectives": objectives, "cur": last, "prev": None}
