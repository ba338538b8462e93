"""k-means on Dask: Lloyd iterations, one fused pass over the data per iteration, run by the fit loop."""

from __future__ import annotations

import warnings
from typing import Any, Callable

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.init import farthest_rows, kmeans_parallel, kmeans_plusplus_sample, random_rows, reduce_stats
from .._fit import LoopResult, Step, best_of, finish, logger, persisted, restore_finished
from .._registry import register
from .._validation import ARRAY, SEED, Interval, Options, as_generator, check_array, check_sample_weight
from ..errors import ConvergenceWarning, InvalidDataError, InvalidParameterError, message
from ._base import CHECKPOINT, BaseEstimator, CentroidMixin, raise_if_bad_block
from ._partial import kmeans_partial_fit
from ..typing import ArrayLike, CheckpointLike, Ignored, KMeansInit, PersistMode, SeedLike

__all__ = ["KMeans", "Lloyd"]


class Lloyd(Step):
    """Lloyd iterations from the centres of ``seed()`` until the partition repeats, the squared centre shift is <=
    the absolute tolerance (``tol`` times the mean feature variance, as in scikit-learn), or ``max_iter``.

    Empty clusters move to the rows farthest from their centres (one extra pass, only when it happens). The state
    is a dict: ``centres``, ``history`` (the objective of every label pass), ``tol_abs``, ``old_fp`` (the
    partition fingerprint of the last pass), and after a pass ``shift`` and ``strict`` (the partition repeated).
    ``check_content(weight, mean, scatter)`` receives the one-cluster statistics of the data at the first pass.
    The result of a run (:meth:`result`) is ``centres``, ``inertia``, ``n_iter`` and ``history``.
    """

    def __init__(self, X: da.Array, w: da.Array | None, seed: Callable[[], npt.ArrayLike], *, n_clusters: int,
                 tol: float, split_every: int | None = None, name: str = "KMeans",
                 check_content: Callable[..., None] | None = None) -> None:
        self.X, self.w, self.seed, self.k, self.tol = X, w, seed, n_clusters, tol
        self.split_every, self.name, self.check_content = split_every, name, check_content

    def start(self) -> dict[str, Any]:
        C = np.asarray(self.seed(), dtype=np.float64).copy()
        return {"centres": C, "history": [], "tol_abs": 0.0, "old_fp": None}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        X, w, C = self.X, self.w, s["centres"]
        stats = reduce_stats(X, w, C, self.split_every)
        if self.check_content is not None:
            self.check_content(*stats.total())
            self.check_content = None
        tol_abs = s["tol_abs"]
        if not s["history"]:
            raise_if_bad_block(stats, X)
            total_w, _, total_scatter = stats.total()
            tol_abs = self.tol * total_scatter / max(total_w * X.shape[1], np.finfo(float).tiny)
        new = np.where(stats.weight[:, None] > 0, stats.mean, C)
        empty = np.flatnonzero(stats.weight <= 0)
        if empty.size:
            _, _, rows = farthest_rows(X, w, C, empty.size, self.split_every)
            new[empty[: len(rows)]] = rows
            logger.info("%s: %d empty cluster(s) moved to the farthest rows", self.name, empty.size)
        strict = (s["old_fp"] is not None and np.array_equal(stats.fingerprint, s["old_fp"]) and not empty.size)
        return {"centres": new, "history": s["history"] + [float(stats.cost)], "tol_abs": tol_abs,
                "old_fp": stats.fingerprint, "shift": float(((new - C) ** 2).sum()), "strict": strict,
                "scatter": float(stats.scatter.sum())}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return bool(new["strict"] or new["shift"] <= new["tol_abs"])

    def objective(self, s: dict[str, Any]) -> float:
        return float(s["history"][-1])

    def n_clusters(self, s: dict[str, Any]) -> int:
        return int(s["centres"].shape[0])

    def extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"center_shift": s["shift"]}

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {k: s[k] for k in ("centres", "history", "tol_abs", "old_fp")}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        d = self.X.shape[1]
        C = ck.require_shape("centres", saved["centres"], (self.k, d)).astype(np.float64)
        old_fp = saved["old_fp"]
        if old_fp is not None:
            old_fp = ck.require_shape("partition fingerprint", old_fp, (self.k,)).astype(np.uint64)
        history = [float(v) for v in saved["history"]]
        if len(history) != iteration:
            raise ValueError(f"a history of {len(history)} passes at iteration {iteration}")
        return {"centres": C, "history": history, "tol_abs": float(saved["tol_abs"]), "old_fp": old_fp}

    def result(self, s: dict[str, Any], run: LoopResult) -> dict[str, Any]:
        if run.converged and s["strict"]:
            inertia = s["scatter"]  # unchanged partition: the centres are its means
        else:
            inertia = float(reduce_stats(self.X, self.w, s["centres"], self.split_every).cost)
        return {"centres": s["centres"], "inertia": inertia, "n_iter": run.n_iter, "history": s["history"]}

    def result_from_checkpoint(self, ck: Any, saved: dict[str, Any]) -> dict[str, Any]:
        return {"centres": ck.require_shape("best centres", saved["centres"], (self.k, self.X.shape[1]))
                .astype(np.float64), "inertia": float(saved["inertia"]), "n_iter": int(saved["n_iter"]),
                "history": [float(v) for v in saved["history"]]}


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

    cluster_centers_: npt.NDArray[np.float64]
    inertia_: float
    n_iter_: int
    objective_history_: list[float]

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
        self, *, n_clusters: int = 8, init: KMeansInit | ArrayLike = "k-means||", n_init: int = 1, max_iter: int = 300,
        tol: float = 1e-4, random_state: SeedLike = None, oversampling_factor: float = 2.0, init_rounds: int = 1,
        init_sample_size: int = 10_000, persist: PersistMode = "auto", split_every: int | None = None,
        checkpoint: CheckpointLike = None,
    ) -> None:
        self.n_clusters, self.init, self.n_init, self.max_iter, self.tol = n_clusters, init, n_init, max_iter, tol
        self.random_state, self.oversampling_factor = random_state, oversampling_factor
        self.init_rounds, self.init_sample_size, self.persist = init_rounds, init_sample_size, persist
        self.split_every, self.checkpoint = split_every, checkpoint

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

    def _seed(self, X: da.Array, w: da.Array | None, rng: np.random.Generator) -> npt.NDArray[np.float64]:
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

    def fit(self, X: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> "KMeans":
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
        ck = self._checkpointer(arr, w)
        state = ck.resume()
        if restore_finished(self, ck, state) is not None:
            _warn_if_duplicate_centers(self.cluster_centers_)
            finish(self, ck, n_iter=self.n_iter_, objective=self.inertia_, n_clusters=self.n_clusters, save=False)
            return self
        arr = persisted(arr, info.kind, self.persist)
        check_content = ck.check_content if ck.active else None

        def make_step(j: int, rng: np.random.Generator) -> Lloyd:
            return Lloyd(arr, w, lambda: self._seed(arr, w, rng), n_clusters=self.n_clusters, tol=self.tol,
                         split_every=self.split_every, check_content=check_content)

        best = best_of(make_step, n_init=self.n_init, max_iter=self.max_iter, rng=as_generator(self.random_state),
                       key=lambda r: r["inertia"], ck=ck, resume=state)
        _warn_if_duplicate_centers(best["centres"])
        self.cluster_centers_ = best["centres"]
        self.inertia_ = best["inertia"]
        self.n_iter_ = best["n_iter"]
        self.objective_history_ = best["history"]
        self.n_features_in_ = d
        finish(self, ck, n_iter=self.n_iter_, objective=self.inertia_, n_clusters=self.n_clusters)
        return self

    def partial_fit(self, X: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> "KMeans":
        """Update the centres with one batch of a stream (mini-batch k-means; see ``dclust.cluster._partial``).

        >>> import numpy as np, dclust
        >>> km = dclust.KMeans(n_clusters=2, random_state=0)
        >>> for batch in np.array_split(np.array([[0.0, 0], [10, 0], [0, 1], [10, 1]] * 3), 3):
        ...     km = km.partial_fit(batch)
        >>> sorted(km.cluster_centers_[:, 0].round(6).tolist())
        [0.0, 10.0]
        """
        return kmeans_partial_fit(self, X, sample_weight)


def _warn_if_duplicate_centers(centers: npt.NDArray[np.float64]) -> None:
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

