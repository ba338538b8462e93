"""k-means on Dask: Lloyd iterations, one fused pass over the data per iteration."""

from __future__ import annotations

import warnings

import numpy as np

from .._dask.passes import persist_if_fits
from .._dask.init import farthest_rows, kmeans_parallel, kmeans_plusplus_sample, random_rows, reduce_stats
from .._dask.loop import ProgressEvent, Stopwatch, emit, logger, rng_state, set_rng_state
from .._registry import register
from .._validation import ARRAY, SEED, Interval, Options, as_generator, check_array, check_sample_weight
from ..errors import ConvergenceWarning, InvalidDataError, InvalidParameterError, message
from ._base import CHECKPOINT, BaseEstimator, CentroidMixin, raise_if_bad_block

__all__ = ["KMeans", "lloyd"]


def lloyd(X, w, centres, *, max_iter: int, tol: float, split_every=None, name: str = "KMeans", state=None,
          save=None, check_content=None):
    """Lloyd iterations from ``centres`` until the partition repeats, the squared centre shift is <= the
    absolute tolerance (``tol`` times the mean feature variance, as in scikit-learn), or ``max_iter``.

    Empty clusters move to the rows farthest from their centres (one extra pass, only when it happens).
    Returns ``(centres, inertia, n_iter, history)``; ``history`` holds the objective of every label pass.

    Checkpoints: ``save(state)``, when given, is called after every iteration that does not stop the loop (before
    its progress event) with the loop state (a dict of arrays and JSON scalars); ``state`` (such a dict) resumes
    the loop after that iteration, ignoring ``centres``. ``check_content(weight, mean, scatter)`` receives the
    one-cluster statistics of the data at the first pass (of the fresh or resumed loop).
    """
    C = np.asarray(centres, dtype=np.float64).copy()
    k = C.shape[0]
    history: list[float] = []
    old_fp = None
    tol_abs = 0.0
    start = 0
    if state is not None:
        start, C = int(state["iteration"]), np.array(state["centres"], dtype=np.float64)
        history, tol_abs = [float(v) for v in state["history"]], float(state["tol_abs"])
        old_fp = None if state["old_fp"] is None else np.asarray(state["old_fp"], dtype=np.uint64)
    strict = False
    watch = Stopwatch()
    for i in range(start, max_iter):
        stats = reduce_stats(X, w, C, split_every)
        if i == start and check_content is not None:
            check_content(*stats.total())
        if i == 0:
            raise_if_bad_block(stats, X)
            total_w, _, total_scatter = stats.total()
            tol_abs = tol * total_scatter / max(total_w * X.shape[1], np.finfo(float).tiny)
        new = np.where(stats.weight[:, None] > 0, stats.mean, C)
        empty = np.flatnonzero(stats.weight <= 0)
        if empty.size:
            _, _, rows = farthest_rows(X, w, C, empty.size, split_every)
            new[empty[: len(rows)]] = rows
            logger.info("%s: %d empty cluster(s) moved to the farthest rows", name, empty.size)
        history.append(float(stats.cost))
        shift = float(((new - C) ** 2).sum())
        C = new
        stop = (old_fp is not None and np.array_equal(stats.fingerprint, old_fp) and not empty.size)
        if save is not None and not stop and shift > tol_abs and i + 1 < max_iter:
            save({"iteration": i + 1, "centres": C, "history": history, "tol_abs": tol_abs,
                  "old_fp": stats.fingerprint})
        emit(ProgressEvent(name, "iter", i + 1, stats.cost, k, watch.lap(), {"center_shift": shift}))
        if stop:
            strict = True
            break
        if shift <= tol_abs:
            break
        old_fp = stats.fingerprint
    n_iter = i + 1
    if strict:
        inertia = float(stats.scatter.sum())  # unchanged partition: centres are its means
    else:
        inertia = float(reduce_stats(X, w, C, split_every).cost)
    return C, inertia, n_iter, history


@register
class KMeans(CentroidMixin, BaseEstimator):
    """k-means clustering of data larger than memory (Lloyd's algorithm, tree-reduced statistics).

    Parameters
    ----------
    n_clusters : int, default 8
    init : {"k-means||", "k-means++", "random"} or array of shape (n_clusters, n_features), default "k-means||"
        "k-means||" is the scalable oversampling seeding (two passes by default); "k-means++" runs greedy k-means++ on a
        uniform sample of ``init_sample_size`` rows; "random" takes distinct random rows.
    n_init : int, default 1
        Number of seedings; the run with the lowest inertia is kept. Must be 1 with an explicit init array.
    max_iter : int, default 300
    tol : float, default 1e-4
        Relative tolerance on the squared centre shift (scaled by the mean feature variance, as scikit-learn).
    random_state : int, Generator or None
    oversampling_factor : float, default 2.0
        k-means|| draws about ``oversampling_factor * n_clusters`` candidates per round.
    init_rounds : int, default 1
        Oversampling rounds of k-means||: its seeding reads the data ``1 + init_rounds`` times (a uniform sample,
        then one pass per round).
    init_sample_size : int, default 10000
        Sample size for "k-means++", and of the first pass of "k-means||".
    persist : {"auto", True, False}, default "auto"
        Keep the data in (cluster) memory between iterations; "auto" does it when it fits comfortably.
    split_every : int or None
        Fan-in of the tree reduction (default 8).
    checkpoint : str or os.PathLike, optional
        A directory where the state of the fit is saved atomically after every iteration (Zarr + JSON, no
        pickle). If it holds the checkpoint of an interrupted fit of the same parameters and data, ``fit``
        resumes from it and ends with the identical model; after a complete fit it holds the final model and a
        rerun returns at once. Other parameters or data are refused (``StorageError``).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters, n_features)
    inertia_ : float
        Weighted sum of squared distances to the nearest final centre.
    n_iter_ : int
    objective_history_ : list of float
        Objective of every label pass (non-increasing).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np, dclust
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> km = dclust.KMeans(n_clusters=2, random_state=0).fit(X)
    >>> sorted(km.cluster_centers_[:, 0].tolist())
    [0.0, 10.0]
    >>> km.inertia_
    1.0
    """

    _parameter_constraints = {
        "n_clusters": [Interval("int", 1, None)],
        "init": [Options(("k-means||", "k-means++", "random")), ARRAY],
        "n_init": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "tol": [Interval("real", 0, None)],
        "random_state": [SEED],
        "oversampling_factor": [Interval("real", 0, None, "neither")],
        "init_rounds": [Interval("int", 1, None)],
        "init_sample_size": [Interval("int", 1, None)],
        "persist": [Options(("auto", True, False))],
        "split_every": [Interval("int", 2, None), Options((None,))],
        "checkpoint": [CHECKPOINT],
    }

    def __init__(
        self, *, n_clusters=8, init="k-means||", n_init=1, max_iter=300, tol=1e-4, random_state=None,
        oversampling_factor=2.0, init_rounds=1, init_sample_size=10_000, persist="auto", split_every=None,
        checkpoint=None,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.oversampling_factor = oversampling_factor
        self.init_rounds = init_rounds
        self.init_sample_size = init_sample_size
        self.persist = persist
        self.split_every = split_every
        self.checkpoint = checkpoint

    def _check_init(self, n_features: int) -> None:
        if isinstance(self.init, str):
            return
        shape = np.shape(self.init)
        if shape != (self.n_clusters, n_features):
            raise InvalidParameterError(
                message("KMeans(init=array)", f"shape ({self.n_clusters}, {n_features})", f"shape {shape}",
                        "Pass one initial centre per cluster with the data's number of features.")
            )
        if not np.isfinite(np.asarray(self.init, dtype=np.float64)).all():
            raise InvalidParameterError(message("KMeans(init=array)", "finite values", "NaN or inf",
                                                "Pass finite initial centres."))
        if self.n_init != 1:
            raise InvalidParameterError(
                message("KMeans(n_init=...)", "n_init=1 with an explicit init array", f"n_init={self.n_init}",
                        "Set n_init=1, or use a seeding method to draw several inits.")
            )

    def _seed(self, X, w, rng) -> np.ndarray:
        k = self.n_clusters
        if not isinstance(self.init, str):
            return np.asarray(self.init, dtype=np.float64)
        if self.init == "random":
            return random_rows(X, k, rng)
        if self.init == "k-means++":
            return kmeans_plusplus_sample(X, w, k, rng, self.init_sample_size)
        return kmeans_parallel(
            X, w, k, rng, oversampling_factor=self.oversampling_factor, rounds=self.init_rounds,
            sample_size=self.init_sample_size,
            split_every=self.split_every,
        )

    def fit(self, X, y=None, sample_weight=None) -> "KMeans":
        """Compute the k-means clustering of ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        if self.n_clusters > n:
            raise InvalidDataError(
                message("KMeans(n_clusters=...)", f"at most n_samples={n} clusters", f"n_clusters={self.n_clusters}",
                        "Lower n_clusters or pass more data.")
            )
        self._check_init(d)
        w = check_sample_weight(sample_weight, arr)
        rng = as_generator(self.random_state)
        ck = self._checkpointer(arr, w)
        state = ck.resume()
        if state is not None and state.get("phase") == "done":
            ck.restore_attributes(self, state)
            _warn_if_duplicate_centers(self.cluster_centers_)
            emit(ProgressEvent("KMeans", "done", self.n_iter_, self.inertia_, self.n_clusters, 0.0))
            return self
        first, best, inner = 0, None, None
        if state is not None:
            first, best, inner, rng = self._unpack(ck, state, d)
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        for j in range(first, self.n_init):
            if inner is None:
                watch = Stopwatch()
                c0 = self._seed(arr, w, rng)
                emit(ProgressEvent("KMeans", "init", 0, float("nan"), self.n_clusters, watch.lap()))
            else:
                c0 = inner["centres"]
            save = None
            if ck.active:
                outer = {"phase": "iter", "init": j, "rng": rng_state(rng), "best": _best_state(best)}
                save = lambda s, outer=outer: ck.save({**outer, "lloyd": s})  # noqa: E731
            result = lloyd(arr, w, c0, max_iter=self.max_iter, tol=self.tol, split_every=self.split_every,
                           state=inner, save=save, check_content=ck.check_content if ck.active else None)
            inner = None
            if best is None or result[1] < best[1]:
                best = result
            if ck.active and j + 1 < self.n_init:
                ck.save({"phase": "init", "init": j + 1, "rng": rng_state(rng), "best": _best_state(best)})
        centres, inertia, n_iter, history = best
        _warn_if_duplicate_centers(centres)
        self.cluster_centers_ = centres
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        self.objective_history_ = history
        self.n_features_in_ = d
        ck.save_done(self)
        emit(ProgressEvent("KMeans", "done", n_iter, inertia, self.n_clusters, 0.0))
        return self

    def _unpack(self, ck, state, d):
        """(first init, best so far, Lloyd state or None, generator) of a checkpoint, shapes checked."""
        k = self.n_clusters
        with ck.reading():
            first = int(state["init"])
            if not 0 <= first < self.n_init or state["phase"] not in ("iter", "init"):
                raise ValueError(f"phase {state['phase']!r} at init {first} of n_init={self.n_init}")
            rng = set_rng_state(state["rng"])
            best = state["best"]
            if best is not None:
                best = (ck.require_shape("best centres", best["centres"], (k, d)).astype(np.float64),
                        float(best["inertia"]), int(best["n_iter"]), [float(v) for v in best["history"]])
            inner = state.get("lloyd") if state["phase"] == "iter" else None
            if inner is not None:
                ck.require_shape("centres", inner["centres"], (k, d))
                if inner["old_fp"] is not None:
                    ck.require_shape("partition fingerprint", inner["old_fp"], (k,))
                if not 0 < int(inner["iteration"]) < self.max_iter or len(inner["history"]) != int(inner["iteration"]):
                    raise ValueError(f"iteration {inner['iteration']} with max_iter={self.max_iter}")
        return first, best, inner, rng


def _warn_if_duplicate_centers(centers: np.ndarray) -> None:
    """Warn, as scikit-learn does, when the data held fewer distinct points than clusters (duplicate centres).

    Centres closer than summation rounding (``1e-9`` of the largest coordinate, per coordinate) count as one: the
    means of one set of identical rows differ in their last bits when summed in other chunk orders.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    k = centers.shape[0]
    radius = 1e-9 * max(float(np.abs(centers).max(initial=0.0)), np.finfo(float).tiny)
    pairs = cKDTree(centers).query_pairs(radius, p=np.inf, output_type="ndarray")
    if not pairs.size:
        return
    same = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(k, k))
    distinct = connected_components(same, directed=False)[0]
    warnings.warn(
        f"KMeans found {distinct} distinct cluster(s), fewer than n_clusters={k}: the data holds "
        f"fewer distinct points than clusters (duplicate rows). Lower n_clusters to {distinct}.",
        ConvergenceWarning, stacklevel=3,
    )


def _best_state(best):
    if best is None:
        return None
    return {"centres": best[0], "inertia": best[1], "n_iter": best[2], "history": best[3]}
