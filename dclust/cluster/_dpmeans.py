"""DP-means on Dask: k-means with a penalty ``lam`` per cluster, clusters opened with optimistic concurrency."""

from __future__ import annotations

import warnings

import numpy as np

from .._dask.passes import persist_if_fits
from .._dask.init import furthest_first
from .._fit import ProgressEvent, Stopwatch, emit, logger
from .._dask.occ import (
    DPRule, KeyedPass, keyed_pass, keyed_prefix, keyed_records_from, keyed_records_state, opening_rate,
)
from .._registry import register
from .._validation import (
    SEED, Interval, Options, as_generator, check_array, check_lam_or_n_clusters, check_sample_weight,
)
from ..errors import ConvergenceWarning, InvalidDataError, message
from ..kernels.distances import seed_mix
from ._base import CHECKPOINT, BaseEstimator, CentroidMixin, raise_if_bad_block
from ._partial import dpmeans_partial_fit

__all__ = ["DPMeans"]


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

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "neither"), Options((None,))],
        "n_clusters": [Interval("int", 1, None), Options((None,))],
        "init": [Options(("mean", "empty"))],
        "max_iter": [Interval("int", 1, None)],
        "random_state": [SEED],
        "prefix_size": [Interval("int", 0, None)],
        "max_proposals": [Interval("int", 1, None)],
        "persist": [Options(("auto", True, False))],
        "split_every": [Interval("int", 2, None), Options((None,))],
        "checkpoint": [CHECKPOINT],
    }
    _transient_attributes = ("serial_order_",)

    def __init__(
        self, *, lam=None, n_clusters=None, init="mean", max_iter=100, random_state=None, prefix_size=1000,
        max_proposals=4096, persist="auto", split_every=None, checkpoint=None,
    ):
        self.lam = lam
        self.n_clusters = n_clusters
        self.init = init
        self.max_iter = max_iter
        self.random_state = random_state
        self.prefix_size = prefix_size
        self.max_proposals = max_proposals
        self.persist = persist
        self.split_every = split_every
        self.checkpoint = checkpoint

    def fit(self, X, y=None, sample_weight=None) -> "DPMeans":
        """Cluster ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        check_lam_or_n_clusters("DPMeans", self.lam, self.n_clusters, n)
        w = check_sample_weight(sample_weight, arr)
        ck = self._checkpointer(arr, w)
        state = ck.resume()
        if state is not None and state.get("phase") == "done":
            extra = ck.restore_attributes(self, state)
            with ck.reading():
                self._order_records = (int(extra["seed"]), n, keyed_records_from(extra["records"]))
            if not self.converged_:
                warnings.warn(f"DPMeans did not converge in max_iter={self.max_iter} passes; increase max_iter.",
                              ConvergenceWarning, stacklevel=2)
            emit(ProgressEvent("DPMeans", "done", self.n_iter_, self.objective_, self.n_clusters_, 0.0))
            return self
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        watch = Stopwatch()
        if state is not None:
            first, seed, lam, C, prev_fp, history, assign_history, records = self._unpack(ck, state, d)
            prefix_stats, start, rate = None, 0, 0.0
        else:
            first, seed, lam, C, prev_fp, prefix_stats, start, rate, prefix_end = self._start(arr, w, d, ck, watch)
            history, assign_history, records = [], [], []
        mix = seed_mix(seed)
        converged = False
        for it in range(first, self.max_iter):
            rule = DPRule(C, lam)
            epochs, _ = keyed_pass(arr, w, rule, mix=mix, start=start if it == 0 else 0,
                                   rate=rate if it == 0 else 0.0, max_proposals=self.max_proposals,
                                   split_every=self.split_every)
            stats, C_all = rule.stats(), rule.centers
            if it == 0:
                stats = stats.merge(prefix_stats)
            elif it == first:
                ck.check_content(*stats.total())  # every row is in a pass after the first: the resumed data
            assign_history.append(stats.cost + lam * C_all.shape[0])
            keep = np.flatnonzero(stats.weight > 0)
            stats = stats.select(keep)
            C = stats.mean
            history.append(float(stats.scatter.sum() + lam * keep.size))
            records.append(KeyedPass(prefix_end if it == 0 else 0, epochs))
            converged = prev_fp is not None and np.array_equal(stats.fingerprint, prev_fp)
            if ck.active and not converged and it + 1 < self.max_iter:
                ck.save({"phase": "iter", "iteration": it + 1, "seed": seed, "lam": lam, "centres": C,
                         "prev_fp": stats.fingerprint, "history": history, "assign_history": assign_history,
                         "records": keyed_records_state(records)})
            emit(ProgressEvent("DPMeans", "iter", it + 1, history[-1], keep.size, watch.lap(),
                               {"epochs": len(epochs), "opened": int(sum(e.accepted for e in epochs))}))
            if converged:
                break
            prev_fp = stats.fingerprint
        if not converged:
            warnings.warn(
                f"DPMeans did not converge in max_iter={self.max_iter} passes; increase max_iter.",
                ConvergenceWarning, stacklevel=2,
            )
        self.cluster_centers_ = C
        self.n_clusters_ = int(C.shape[0])
        self.lam_ = lam
        self.objective_ = history[-1]
        self.objective_history_ = history
        self.assignment_objective_history_ = assign_history
        self.n_iter_ = it + 1
        self.converged_ = converged
        self.n_features_in_ = d
        self._order_records = (seed, n, records)
        if ck.active:
            ck.save_done(self, seed=seed, records=keyed_records_state(records))
        emit(ProgressEvent("DPMeans", "done", it + 1, history[-1], self.n_clusters_, 0.0))
        return self

    def partial_fit(self, X, y=None, sample_weight=None) -> "DPMeans":
        """Update the model with one batch of a stream (the any-time DP-means step of :class:`AnytimeDPMeans`).

        >>> import numpy as np, dclust
        >>> dp = dclust.DPMeans(lam=4.0, random_state=0)
        >>> for batch in np.array_split(np.array([[0.0, 0], [10, 0], [0, 1], [10, 1]] * 3), 3):
        ...     dp = dp.partial_fit(batch)
        >>> dp.n_clusters_
        2
        """
        return dpmeans_partial_fit(self, X, sample_weight)

    def _start(self, arr, w, d, ck, watch):
        """The first pass (statistics, NaN check, the serial prefix), lam, and the prefix run serially."""
        rng = as_generator(self.random_state)
        seed = int(rng.integers(2**62))
        all_stats, prefix_end, p_index, p_rows, p_w = keyed_prefix(
            arr, w, mix=seed_mix(seed), prefix_size=self.prefix_size, split_every=self.split_every)
        raise_if_bad_block(all_stats, arr)
        ck.check_content(*all_stats.total())
        mean = all_stats.mean[:1]
        if self.n_clusters is not None:
            lams, _ = furthest_first(arr, self.n_clusters, mean, self.split_every)
            lam = float(lams[-1])
            if lam <= 0:
                raise InvalidDataError(
                    message("DPMeans(n_clusters=...)", f"at least {self.n_clusters} distinct points",
                            "fewer distinct points", "Lower n_clusters or pass lam directly.")
                )
        else:
            lam = float(self.lam)
        emit(ProgressEvent("DPMeans", "init", 0, float("nan"), 1, watch.lap(), {"lam": lam}))
        if self.init == "mean":
            C, prev_fp = mean.copy(), all_stats.fingerprint[:1].copy()
        else:
            C, prev_fp = np.empty((0, d)), None
        rule = DPRule(C, lam)
        rule.accept(None, p_index, p_rows, p_w, ())
        return 0, seed, lam, rule.centers, prev_fp, rule.stats(), prefix_end, opening_rate(rule.labels, C.shape[0]), \
            prefix_end

    def _unpack(self, ck, state, d):
        """The loop state of a checkpoint after a pass, shapes checked."""
        with ck.reading():
            first, seed, lam = int(state["iteration"]), int(state["seed"]), float(state["lam"])
            if state["phase"] != "iter" or not 0 < first < self.max_iter or not (lam > 0 and np.isfinite(lam)):
                raise ValueError(f"phase {state['phase']!r}, pass {first} (max_iter={self.max_iter}), lam={lam}")
            C = ck.require_shape("centres", state["centres"], (None, d)).astype(np.float64)
            prev_fp = ck.require_shape("partition fingerprint", state["prev_fp"], (C.shape[0],)).astype(np.uint64)
            history = [float(v) for v in state["history"]]
            assign_history = [float(v) for v in state["assign_history"]]
            records = keyed_records_from(state["records"])
            if not len(history) == len(assign_history) == len(records) == first:
                raise ValueError(f"histories of {len(history)}, {len(assign_history)}, {len(records)} passes; "
                                 f"expected {first}")
        return first, seed, lam, C, prev_fp, history, assign_history, records

    @property
    def serial_order_(self) -> list[np.ndarray]:
        self._check_fitted("_order_records")
        seed, n, records = self._order_records
        return [r.permutation(seed_mix(seed), n) for r in records]

