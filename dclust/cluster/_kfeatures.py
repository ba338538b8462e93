"""K-features (ALGORITHMS.md 2.4) and stepwise K-features (2.5): feature allocation with a fixed number of
features, every row optimised independently (fully parallel), with greedy initialisation (2.6) and restarts."""

from __future__ import annotations

import warnings

import numpy as np

from .._dask.passes import persist_if_fits
from .._dask.features import greedy_init, init_bits, kfeatures_pass
from .._dask.loop import ProgressEvent, Stopwatch, emit, logger, rng_state, set_rng_state
from .._registry import register
from .._validation import SEED, Interval, Options, as_generator, check_array
from ..errors import ConvergenceWarning, InvalidParameterError, message
from ..kernels.bpmeans import feature_means
from ..kernels.kfeatures import MAX_EXHAUSTIVE
from ._base import CHECKPOINT, BaseEstimator, wrap_output
from ._features import FeatureMixin, first_pass

__all__ = ["KFeatures", "StepwiseKFeatures"]

_COMMON = {
    "n_init": [Interval("int", 1, None)],
    "exhaustive": [Options((True, False))],
    "max_iter": [Interval("int", 1, None)],
    "random_state": [SEED],
    "persist": [Options(("auto", True, False))],
    "split_every": [Interval("int", 2, None), Options((None,))],
    "checkpoint": [CHECKPOINT],
}


def _check_exhaustive(name: str, exhaustive: bool, k: int) -> None:
    if exhaustive and k > MAX_EXHAUSTIVE:
        raise InvalidParameterError(
            message(f"{name}(exhaustive=True)", f"at most {MAX_EXHAUSTIVE} features (2**K rows are enumerated)",
                    f"{k} features", "Use exhaustive=False (coordinate sweeps) for more features.")
        )


def _run(arr, k, *, mean, sq_norm, n_init, exhaustive, max_iter, rng, split_every, state=None, step=None):
    """The best of ``n_init`` K-features runs (lowest ``||X - ZA||^2``), as a dict of results.

    Checkpoints: ``step(s, objective)``, when given, is called after every pass with the loop state ``s``
    (restart, the run's features and allocation, the best run so far; when the pass ends a run, the next restart
    with ``run`` None), or None after the last pass of the last restart. ``state`` (such an ``s``) resumes from
    there; ``rng`` must then be the generator as it was when ``s`` was made.
    """
    best, first = None, 0
    if state is not None:
        first, best = int(state["restart"]), state["best"]
    for j in range(first, n_init):
        run, state = (None if state is None else state["run"]), None
        if run is not None:
            A, A0, Z = run["A"], run["A0"], run["Z"]
            history, assign = list(run["history"]), list(run["assign"])
        else:
            seed = int(rng.integers(2**62))
            A, _, _ = greedy_init(arr, mean, lam=0.0, n_features=k, seed=seed, max_features=k,
                                  split_every=split_every)
            A0 = A.copy()
            Z = init_bits(arr, A, True).persist()
            history, assign = [], []
        converged = False
        for it in range(len(history), max_iter):
            Z, gram = kfeatures_pass(arr, Z, A, exhaustive=exhaustive, split_every=split_every)
            assign.append(gram.sse)
            A = feature_means(gram.G, gram.B)
            history.append(float(sq_norm - np.sum(gram.B * A)))
            converged = gram.flips == 0
            done = converged or it + 1 >= max_iter
            if done and (best is None or history[-1] < best["history"][-1]):
                best = dict(A=A, A0=A0, Z=Z, history=history, assign=assign, n_iter=it + 1, converged=converged)
            if step is not None:
                if not done:
                    s = {"restart": j, "best": best, "run": {"A": A, "A0": A0, "Z": Z, "history": history,
                                                             "assign": assign}}
                else:
                    s = {"restart": j + 1, "best": best, "run": None} if j + 1 < n_init else None
                step(s, history[-1])
            if done:
                break
    return best


def _check_run_state(ck, state, arr, k, n_init, max_iter):
    """A K-features loop state of a checkpoint (restart, run, best run so far), shapes checked (in place)."""
    n, d = arr.shape

    def result(r, what):
        r["A"] = ck.require_shape(f"{what} features", r["A"], (k, d)).astype(np.float64)
        r["A0"] = ck.require_shape(f"{what} initial features", r["A0"], (k, d)).astype(np.float64)
        Z = r["Z"]
        if not hasattr(Z, "chunks") or Z.shape != (n, k) or tuple(Z.chunks[0]) != tuple(arr.chunks[0]):
            raise ValueError(f"{what} allocation of shape {getattr(Z, 'shape', None)}, expected ({n}, {k})")
        r["Z"] = Z.astype(np.uint8)
        r["history"], r["assign"] = [float(v) for v in r["history"]], [float(v) for v in r["assign"]]
        if not 0 < len(r["history"]) <= max_iter or len(r["assign"]) != len(r["history"]):
            raise ValueError(f"{what} histories of {len(r['history'])} passes (max_iter={max_iter})")
        return r

    if not 0 <= int(state["restart"]) < n_init:
        raise ValueError(f"restart {state['restart']} of n_init={n_init}")
    if state["run"] is not None:
        result(state["run"], "the run's")
    if state["best"] is not None:
        best = result(state["best"], "the best run's")
        best["n_iter"], best["converged"] = int(best["n_iter"]), bool(best["converged"])
    return state


def _start(est, X, max_k):
    """The start of a fit: ``(data, input info, checkpointer, checkpoint state or None)`` after the checks of the
    parameters (``max_k``: the largest K, for the ``exhaustive`` bound)."""
    est._validate_params()
    _check_exhaustive(type(est).__name__, est.exhaustive, max_k)
    arr, info = check_array(X)
    ck = est._checkpointer(arr)
    return arr, info, ck, ck.resume()


def _first_pass(est, arr, info, ck):
    """``(data, stopwatch, mean, squared norm)``: the data persisted when they fit (dask input), and their mean
    and squared norm from one pass (which also checks that a resumed checkpoint's data are these)."""
    if info.kind != "numpy":
        arr = persist_if_fits(arr, est.persist, logger)
    watch = Stopwatch()
    mean, sq_norm, _, _, _ = first_pass(arr, split_every=est.split_every,
                                        check_content=ck.check_content if ck.active else None)
    return arr, watch, mean, sq_norm


def _restore(est, ck, state, info, n):
    """Set the model of a finished fit's checkpoint (with its allocation Z) on ``est``."""
    extra = ck.restore_attributes(est, state)
    with ck.reading():
        Z = extra["allocation"]
        if not hasattr(Z, "chunks") or Z.shape != (n, est.n_latent_features_):
            raise ValueError(f"an allocation of shape {getattr(Z, 'shape', None)}")
    est.allocation_ = wrap_output(Z, info, "allocation")
    if not est.converged_:
        warnings.warn(f"{type(est).__name__} did not converge in max_iter={est.max_iter} passes; increase max_iter.",
                      ConvergenceWarning, stacklevel=3)
    emit(ProgressEvent(type(est).__name__, "done", est.n_iter_, est.objective_, est.n_latent_features_, 0.0))
    return est


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
    >>> kf = dclust.KFeatures(n_features=1, random_state=0).fit(X)
    >>> kf.features_.tolist()
    [[1.0, 1.0]]
    """

    _parameter_constraints = {"n_features": [Interval("int", 1, None)], **_COMMON}
    _transient_attributes = ("allocation_",)

    def __init__(self, *, n_features=2, n_init=1, exhaustive=False, max_iter=100, random_state=None,
                 persist="auto", split_every=None, checkpoint=None):
        self.n_features = n_features
        self.n_init = n_init
        self.exhaustive = exhaustive
        self.max_iter = max_iter
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every
        self.checkpoint = checkpoint

    def fit(self, X, y=None) -> "KFeatures":
        """Learn ``n_features`` features from ``X`` (shape (n_samples, n_features_in))."""
        arr, info, ck, state = _start(self, X, self.n_features)
        if state is not None and state.get("phase") == "done":
            return _restore(self, ck, state, info, arr.shape[0])
        rng, inner, count = as_generator(self.random_state), None, [0]
        if state is not None:
            with ck.reading():
                if state["phase"] != "iter":
                    raise ValueError(f"phase {state['phase']!r}")
                rng, count = set_rng_state(state["rng"]), [int(state["n_passes"])]
                inner = _check_run_state(ck, state["kfeatures"], arr, self.n_features, self.n_init, self.max_iter)
        arr, watch, mean, sq_norm = _first_pass(self, arr, info, ck)

        def step(s, objective):  # after every pass: save (when the run goes on), then announce it
            count[0] += 1
            if s is not None and ck.active:
                ck.save({"phase": "iter", "rng": rng_state(rng), "n_passes": count[0], "kfeatures": s})
            emit(ProgressEvent("KFeatures", "iter", count[0], objective, self.n_features, watch.lap()))

        best = _run(arr, self.n_features, mean=mean, sq_norm=sq_norm, n_init=self.n_init,
                    exhaustive=self.exhaustive, max_iter=self.max_iter, rng=rng, split_every=self.split_every,
                    state=inner, step=step)
        _store(self, best, info, arr.shape[1], 0.0)
        if ck.active:
            ck.save_done(self, allocation=best["Z"])
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
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: after every pass the state (restart, features, the allocation Z as a Zarr array,
        histories, the best run so far, the K reached and the objectives by K and the generator's exact state) is saved atomically; an interrupted fit
        runs the first pass again (it checks that the data are those of the interrupted fit) and resumes at the
        next pass with the identical result. A finished fit's checkpoint holds the model (and Z): a rerun returns
        it at once.

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
                 persist="auto", split_every=None, checkpoint=None):
        self.lam = lam
        self.max_features = max_features
        self.n_init = n_init
        self.exhaustive = exhaustive
        self.max_iter = max_iter
        self.random_state = random_state
        self.persist = persist
        self.split_every = split_every
        self.checkpoint = checkpoint

    def fit(self, X, y=None) -> "StepwiseKFeatures":
        """Choose K and learn the features of ``X``."""
        arr, info, ck, state = _start(self, X, self.max_features)
        if state is not None and state.get("phase") == "done":
            return _restore(self, ck, state, info, arr.shape[0])
        rng, first, prev, objectives, inner = as_generator(self.random_state), 1, None, [], None
        if state is not None:
            rng, first, prev, objectives, inner = self._unpack(ck, state, arr)
        arr, watch, mean, sq_norm = _first_pass(self, arr, info, ck)
        lam = float(self.lam)

        def outer(k):  # the state around the K-features run for K = k
            return {"phase": "iter", "k": k, "objectives": objectives, "prev": prev}

        for k in range(first, self.max_features + 2):
            if k > self.max_features:
                gain = objectives[-2] - objectives[-1]
                raise InvalidParameterError(message(
                    f"StepwiseKFeatures(lam={self.lam!r}, max_features={self.max_features})",
                    f"the objective to stop decreasing by K = max_features = {self.max_features}",
                    f"an objective that still fell by {gain:.4g} from K = {k - 2} to K = {k - 1}",
                    f"Increase lam (each feature costs lam; a lam above about {gain:.4g} stops this step), or "
                    f"raise max_features.",
                ))
            step = None
            if ck.active:  # after every pass of the run: save when it goes on
                step = lambda s, _, k=k: s is not None and ck.save(  # noqa: E731
                    {**outer(k), "rng": rng_state(rng), "kfeatures": s})
            cur = _run(arr, k, mean=mean, sq_norm=sq_norm, n_init=self.n_init, exhaustive=self.exhaustive,
                       max_iter=self.max_iter, rng=rng, split_every=self.split_every, state=inner, step=step)
            inner = None
            objectives.append(cur["history"][-1] + lam * k)
            stop = prev is not None and objectives[-1] >= objectives[-2]
            if ck.active and not stop and k < self.max_features:
                ck.save({**outer(k + 1), "prev": cur, "rng": rng_state(rng), "kfeatures": None})
            emit(ProgressEvent("StepwiseKFeatures", "iter", k, objectives[-1], k, watch.lap()))
            if stop:
                break
            prev = cur
        _store(self, prev, info, arr.shape[1], lam * prev["A"].shape[0])
        self.objectives_by_k_ = objectives
        if ck.active:
            ck.save_done(self, allocation=prev["Z"])
        emit(ProgressEvent("StepwiseKFeatures", "done", len(objectives), self.objective_, self.n_latent_features_,
                           0.0))
        return self

    def _unpack(self, ck, state, arr):
        """(generator, next K, best run of the last K, objectives by K, K-features state or None), checked."""
        with ck.reading():
            first = int(state["k"])
            if state["phase"] != "iter" or not 1 <= first <= self.max_features:
                raise ValueError(f"phase {state['phase']!r} at K = {first} (max_features={self.max_features})")
            objectives = [float(v) for v in state["objectives"]]
            if len(objectives) != first - 1:
                raise ValueError(f"objectives for {len(objectives)} values of K before K = {first}")
            prev = state["prev"]
            if (prev is None) != (first == 1):
                raise ValueError(f"a best run {'missing' if prev is None else 'present'} at K = {first}")
            if prev is not None:
                prev = _check_run_state(ck, {"restart": 0, "run": prev, "best": None}, arr, first - 1, 1,
                                        self.max_iter)["run"]
                prev["n_iter"], prev["converged"] = int(prev["n_iter"]), bool(prev["converged"])
            inner = state["kfeatures"]
            if inner is not None:
                inner = _check_run_state(ck, inner, arr, first, self.n_init, self.max_iter)
            return set_rng_state(state["rng"]), first, prev, objectives, inner
