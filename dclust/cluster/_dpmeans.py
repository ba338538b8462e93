"""DP-means on Dask: k-means with a penalty ``lam`` per cluster, clusters opened with optimistic concurrency."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.init import furthest_first
from .._fit import finish, fit_loop, persisted, restore_finished, warn_unconverged
from .._dask.occ import (
    DPRule, KeyedPass, keyed_pass, keyed_prefix, keyed_records_from, keyed_records_state, opening_rate,
)
from .._registry import register
from .._validation import (
    Interval, Options, as_generator, check_array, check_lam_or_n_clusters, check_sample_weight,
)
from ..errors import InvalidDataError, message
from ..kernels.distances import seed_mix
from ..kernels.stats import ClusterStats
from ._base import HistoryStep, OCC_PARAMETERS, BaseEstimator, CentroidMixin, raise_if_bad_block
from ._partial import dpmeans_partial_fit
from ..typing import ArrayLike, CheckpointLike, DPMeansInit, Ignored, PersistMode, SeedLike

__all__ = ["DPMeans", "heuristic_lam"]


def heuristic_lam(est: Any, X: da.Array, mean: npt.NDArray[np.float64]) -> float:
    """The ``lam`` of a DP-means-like estimator ``est``: ``est.lam``, or for ``n_clusters=`` (``lam=None``) the
    squared distance of the k-th furthest-first point (from ``mean``, one pass per point); InvalidDataError when X
    has fewer distinct points."""
    if est.lam is not None:
        return float(est.lam)
    lams, _ = furthest_first(X, est.n_clusters, mean, est.split_every)
    lam = float(lams[-1])
    if lam <= 0:
        raise InvalidDataError(
            message(f"{type(est).__name__}(n_clusters=...)", f"at least {est.n_clusters} distinct points",
                    "fewer distinct points", "Lower n_clusters or pass lam directly.")
        )
    return lam


class _Passes(HistoryStep):
    """The passes of one DP-means fit, for the fit loop.

    :meth:`start` makes the first pass over the data (one-cluster statistics, NaN check, the rows of the serial
    prefix), chooses ``lam`` and runs the prefix serially; the first :meth:`step` covers the rest of the keys,
    every later one all of them. The state is a dict: ``seed``, ``lam``, ``centers``, ``fp`` (the partition
    fingerprint of the last pass; of the start for ``init="mean"``, else None), the histories and the OCC pass
    ``records``; after a pass also ``epochs`` and ``opened`` (for its event, not saved).
    """

    name, unit = "DPMeans", "passes"

    def __init__(self, est: "DPMeans", X: da.Array, w: da.Array | None, ck: Any) -> None:
        self.est, self.X, self.w, self.ck = est, X, w, ck
        #: (statistics, end key, opening rate) of the serial prefix: the first pass only
        self.prefix: tuple[ClusterStats, int, float] | None = None
        self.check_content = False  # the first pass after a resume compares the data with the interrupted run's

    def start(self) -> dict[str, Any]:
        est, X, w, ck = self.est, self.X, self.w, self.ck
        seed = int(as_generator(est.random_state).integers(2**62))
        all_stats, prefix_end, p_index, p_rows, p_w = keyed_prefix(
            X, w, mix=seed_mix(seed), prefix_size=est.prefix_size, split_every=est.split_every)
        raise_if_bad_block(all_stats, X)
        ck.check_content(*all_stats.total())
        mean = all_stats.mean[:1]
        lam = heuristic_lam(est, X, mean)
        if est.init == "mean":
            C, fp = mean.copy(), all_stats.fingerprint[:1].copy()
        else:
            C, fp = np.empty((0, X.shape[1])), None
        rule = DPRule(C, lam)
        rule.accept(None, p_index, p_rows, p_w, ())
        self.prefix = (rule.stats(), prefix_end, opening_rate(rule.labels, C.shape[0]))
        return {"seed": seed, "lam": lam, "centers": rule.centers, "fp": fp, "history": [], "assign_history": [],
                "records": []}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        est, lam, first = self.est, s["lam"], not s["history"]
        prefix_stats, start, rate = self.prefix if first and self.prefix is not None else (None, 0, 0.0)
        rule = DPRule(s["centers"], lam)
        epochs, _ = keyed_pass(self.X, self.w, rule, mix=seed_mix(s["seed"]), start=start, rate=rate,
                               max_proposals=est.max_proposals, split_every=est.split_every)
        stats, k_all = rule.stats(), rule.centers.shape[0]
        if first:
            assert prefix_stats is not None, "start() ran the serial prefix before the first step"
            stats = stats.merge(prefix_stats)
            self.prefix = None
        elif self.check_content:
            self.ck.check_content(*stats.total())  # every row is in a pass after the first: the resumed data
            self.check_content = False
        keep = np.flatnonzero(stats.weight > 0)
        stats = stats.select(keep)
        return {"seed": s["seed"], "lam": lam, "centers": stats.mean, "fp": stats.fingerprint,
                "history": s["history"] + [float(stats.scatter.sum() + lam * keep.size)],
                "assign_history": s["assign_history"] + [stats.cost + lam * k_all],
                "records": s["records"] + [KeyedPass(start, epochs)],
                "epochs": len(epochs), "opened": int(sum(e.accepted for e in epochs))}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return old["fp"] is not None and np.array_equal(new["fp"], old["fp"])

    def start_extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"lam": s["lam"]}

    def extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"epochs": s["epochs"], "opened": s["opened"]}

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"seed": s["seed"], "lam": s["lam"], "centers": s["centers"], "fp": s["fp"], "history": s["history"],
                "assign_history": s["assign_history"], "records": keyed_records_state(s["records"])}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        lam = float(saved["lam"])
        if not (lam > 0 and np.isfinite(lam)):
            raise ValueError(f"lam={lam}")
        C = ck.require_shape("centers", saved["centers"], (None, self.X.shape[1])).astype(np.float64)
        fp = ck.require_shape("partition fingerprint", saved["fp"], (C.shape[0],)).astype(np.uint64)
        history = [float(v) for v in saved["history"]]
        assign_history = [float(v) for v in saved["assign_history"]]
        records = keyed_records_from(saved["records"])
        if not len(history) == len(assign_history) == len(records) == iteration > 0:
            raise ValueError(f"histories of {len(history)}, {len(assign_history)}, {len(records)} passes; "
                             f"expected {iteration}")
        self.check_content = True
        return {"seed": int(saved["seed"]), "lam": lam, "centers": C, "fp": fp, "history": history,
                "assign_history": assign_history, "records": records}


@register
class DPMeans(CentroidMixin, BaseEstimator):
    """DP-means (Kulis & Jordan 2012): k-means whose number of clusters is learned through a penalty.

    Minimises ``sum_n ||x_n - mu_{z_n}||^2 + lam * K``. A point farther than ``lam`` (a squared distance) from
    every centre opens a new cluster. Clusters are opened with optimistic concurrency control: blocks propose,
    the driver validates serially, and the result equals serial DP-means on the order ``serial_order_``. That order
    is a function of ``random_state`` and the global row index only: the same data and seed give the same model for
    any row chunking, any number of workers and any scheduler (centres equal up to summation rounding).

    Parameters
    ----------
    lam : float, optional
        Penalty per cluster in squared-distance units (docs/algorithms.md section 0). Give ``lam`` or ``n_clusters``.
    n_clusters : int, optional
        Target number of clusters: ``lam`` is chosen by the k-th furthest-first heuristic (``lam_``).
    init : {"mean", "empty"}, default "mean"
        Start from one cluster at the mean of X, or from no cluster.
    max_iter : int, default 100
        Maximum number of passes.
    random_state : int, Generator or None
        Fixes the processing order (and so the result).
    prefix_size : int, default 1000
        About this many points (those of lowest order key) are processed serially on the driver at the start of
        the first pass.
    max_proposals : int, default 4096
        Target number of proposals per epoch, all blocks together: each epoch covers as many rows as, at the
        proposal rate measured in the last one, should propose about this many (the first epochs of the first pass
        are short, later passes usually take one epoch).
    persist, split_every, checkpoint
        As in :class:`KMeans`: with ``checkpoint``, the state is saved atomically after every pass and an
        interrupted fit resumes from it with the identical result.

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters_, n_features)
    n_clusters_ : int
    lam_ : float
        The penalty used (``lam`` or the heuristic's choice).
    objective_ : float
        ``SSE + lam_ * n_clusters_`` at the end.
    objective_history_ : list of float
        The objective after each pass's mean update (non-increasing).
    assignment_objective_history_ : list of float
        The objective after each label pass, before the mean update.
    n_iter_ : int
    converged_ : bool
    serial_order_ : list of ndarray
        Per pass, the permutation of rows serial DP-means must visit to give the same result (built on demand;
        O(n_samples) memory).

    Examples
    --------
    >>> import numpy as np, dclust
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> dp = dclust.DPMeans(lam=4.0, random_state=0).fit(X)
    >>> dp.n_clusters_, dp.objective_
    (2, 9.0)
    """

    cluster_centers_: npt.NDArray[np.float64]
    n_clusters_: int
    lam_: float
    objective_: float
    objective_history_: list[float]
    assignment_objective_history_: list[float]
    n_iter_: int
    converged_: bool
    _order_records: tuple[int, int, list[KeyedPass]]

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "neither"), Options((None,))],
        "n_clusters": [Interval("int", 1, None), Options((None,))],
        "init": [Options(("mean", "empty"))],
        "max_iter": [Interval("int", 1, None)],
        **OCC_PARAMETERS,
    }
    _transient_attributes = ("serial_order_",)
    _checkpoint_since = 2  # the loop state of format 1 was DPMeans' own

    def __init__(
        self, *, lam: float | None = None, n_clusters: int | None = None, init: DPMeansInit = "mean",
        max_iter: int = 100, random_state: SeedLike = None, prefix_size: int = 1000, max_proposals: int = 4096,
        persist: PersistMode = "auto", split_every: int | None = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.n_clusters, self.init, self.max_iter = lam, n_clusters, init, max_iter
        self.random_state, self.prefix_size, self.max_proposals = random_state, prefix_size, max_proposals
        self.persist, self.split_every, self.checkpoint = persist, split_every, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> "DPMeans":
        """Cluster ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        check_lam_or_n_clusters("DPMeans", self.lam, self.n_clusters, n)
        w = check_sample_weight(sample_weight, arr)
        ck = self._checkpointer(arr, w)
        state = ck.resume()
        extra = restore_finished(self, ck, state)
        if extra is not None:
            with ck.reading():
                self._order_records = (int(extra["seed"]), n, keyed_records_from(extra["records"]))
            if not self.converged_:
                warn_unconverged("DPMeans", self.max_iter, unit="passes")
            finish(self, ck, n_iter=self.n_iter_, objective=self.objective_, n_clusters=self.n_clusters_, save=False)
            return self
        passes = _Passes(self, persisted(arr, info.kind, self.persist), w, ck)
        run = fit_loop(passes, max_iter=self.max_iter, ck=ck, resume=None if state is None else state["loop"],
                       warn=True)
        s = run.state
        self.cluster_centers_ = s["centers"]
        self.n_clusters_ = int(s["centers"].shape[0])
        self.lam_ = s["lam"]
        self.objective_ = s["history"][-1]
        self.objective_history_ = s["history"]
        self.assignment_objective_history_ = s["assign_history"]
        self.n_iter_ = run.n_iter
        self.converged_ = run.converged
        self.n_features_in_ = d
        self._order_records = (s["seed"], n, s["records"])
        finish(self, ck, n_iter=run.n_iter, objective=self.objective_, n_clusters=self.n_clusters_,
               seed=s["seed"], records=keyed_records_state(s["records"]))
        return self

    def partial_fit(self, X: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> "DPMeans":
        """Update the model with one batch of a stream (the any-time DP-means step of :class:`AnytimeDPMeans`).

        >>> import dclust
        >>> stream = dclust.make_blobs(300, 2, centers=[[0, 0], [10, 0]], cluster_std=0.3, chunk_rows=100).X
        >>> dp = dclust.DPMeans(lam=4.0, random_state=0)
        >>> for batch in stream.blocks:  # three batches of 100 rows
        ...     dp = dp.partial_fit(batch)
        >>> dp.n_clusters_
        2
        """
        return dpmeans_partial_fit(self, X, sample_weight)

    @property
    def serial_order_(self) -> list[np.ndarray]:
        self._check_fitted("_order_records")
        seed, n, records = self._order_records
        return [r.permutation(seed_mix(seed), n) for r in records]

