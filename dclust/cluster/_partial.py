"""``partial_fit`` of the batch estimators: learning from a stream of arrays, one array at a time.

KMeans: mini-batch k-means (Sculley 2010, as scikit-learn's ``MiniBatchKMeans``): each centre is the running
(weighted) mean of every row ever assigned to it, ``c_k += (w_k / n_k) (mean_k - c_k)`` with ``n_k`` the weight it
has received so far (``counts_``); one pass over each batch, through the same tree-reduced statistics as ``fit``.

DPMeans: the any-time DP-means update of :class:`dclust.AnytimeDPMeans` (D-Means with ``Q = tau = 0``, [DM] 4.1),
run with a finer penalty (``SUMMARY_FACTOR * lam``) so that it keeps fine cluster summaries (weight, running mean);
after every batch the model's centres are the consolidation of those summaries at ``lam``
(:func:`dclust.stream._consolidate.consolidate`: weighted DP-means over the summaries, on the driver, no pass over
the data; docs/algorithms.md 3.8). The summaries stay in the stream, so later batches still see the fine clusters.

Both keep the state of the stream in a private attribute (``_partial``: the centres it produced and the counts or
the stream), so the next call continues it. A model whose centres are not those of its last ``partial_fit`` --
unfitted, refitted by ``fit``, or loaded by :func:`dclust.load` (the stream state is not saved) -- starts a new
stream from the batch, seeded as ``fit`` would seed it.

Quality (measured on ``make_blobs(6000, 2, 5, cluster_std=s)`` fed in 12 random pieces, objective
``SSE + lam K`` on all rows, partial over fit; ``tests/cluster/test_partial_fit.py``): KMeans 0.86-1.06 (the running
means often beat a single k-means|| seeding); DPMeans 0.39-0.99 for s in {1, 2, 3} and lam in {20, 60}: batch
DP-means stops at the first local optimum its serial order reaches, while the fine summaries and their
consolidation search more partitions. With ``SUMMARY_FACTOR = 1`` (no finer summaries) the stream ends with fewer
clusters than batch DP-means on overlapping data and reached 1.2-1.6 x fit's objective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._dask.init import reduce_stats
from .._validation import as_generator, check_array, check_sample_weight
from ..errors import InvalidDataError, message
from ._base import raise_if_bad_block

if TYPE_CHECKING:  # the estimators import this module
    from ..stream import AnytimeDPMeans
    from ._dpmeans import DPMeans
    from ._kmeans import KMeans

__all__ = ["kmeans_partial_fit", "dpmeans_partial_fit", "SUMMARY_FACTOR"]

#: The any-time stream behind DPMeans.partial_fit runs at ``SUMMARY_FACTOR * lam`` (finer summaries than the model).
SUMMARY_FACTOR = 0.25


def kmeans_partial_fit(est: KMeans, X: Any, sample_weight: Any = None) -> KMeans:
    """One mini-batch step of :class:`dclust.KMeans` on the rows ``X`` (see the module docstring). Returns ``est``."""
    est._validate_params()
    arr, _ = check_array(X)
    w = check_sample_weight(sample_weight, arr)
    counts = _stream_state(est)
    if counts is None:  # a new stream: seed the centres from this batch, as fit seeds them
        n, d = arr.shape
        if est.n_clusters > n:
            raise InvalidDataError(
                message("KMeans.partial_fit(X)", f"a first batch of at least n_clusters={est.n_clusters} rows",
                        f"{n} rows", "Pass a larger first batch (later batches may be of any size).")
            )
        est._check_init(d)
        est.cluster_centers_ = est._seed(arr, w, as_generator(est.random_state))
        counts = np.zeros(est.n_clusters)
        est.n_iter_, est.objective_history_, est.n_features_in_ = 0, [], d
    stats = reduce_stats(arr, w, est.cluster_centers_, est.split_every)
    raise_if_bad_block(stats, arr)
    counts = counts + stats.weight
    step = np.divide(stats.weight, counts, out=np.zeros_like(counts), where=counts > 0)
    touched = stats.weight > 0
    centers = est.cluster_centers_.copy()
    centers[touched] += step[touched, None] * (stats.mean[touched] - centers[touched])
    est.cluster_centers_, est._partial = centers, (centers, counts)
    est.inertia_ = float(stats.cost)  # of this batch, against the centres before its update
    est.objective_history_ = [*est.objective_history_, est.inertia_]
    est.n_iter_ = int(est.n_iter_) + 1
    return est


#: The learned attributes of DPMeans that mirror its any-time stream after each partial_fit.
_MIRRORED = ("cluster_centers_", "n_clusters_", "lam_", "objective_", "n_iter_", "converged_", "n_features_in_")


def dpmeans_partial_fit(est: DPMeans, X: Any, sample_weight: Any = None) -> DPMeans:
    """One any-time DP-means step of :class:`dclust.DPMeans` on the rows ``X``. Returns ``est``.

    The first batch starts the stream: it is clustered by ``fit`` (so ``init``, ``lam`` or the ``n_clusters``
    heuristic act as in ``fit``), and its clusters, with their weights, become the first clusters of an
    :class:`dclust.AnytimeDPMeans` that takes every later batch. ``objective_`` is the last batch's objective.
    """
    stream = _stream_state(est)
    if stream is None:
        first = _fit_first_batch(est, X, sample_weight)
        stream = _any_time_stream(est, first)
        est.objective_history_ = [float(first.objective_)]
        for name in _MIRRORED:
            setattr(est, name, getattr(first, name))
        est.cluster_centers_ = np.asarray(stream.cluster_centers_, dtype=np.float64)
    else:
        from ..stream._consolidate import consolidate  # same layer, imported when used

        stream.partial_fit(X, sample_weight=sample_weight)
        for name in _MIRRORED:
            setattr(est, name, getattr(stream, name))
        est.lam_ = float(stream.lam) / SUMMARY_FACTOR
        est.objective_history_ = [*est.objective_history_, float(est.objective_)]
        est.cluster_centers_ = consolidate(np.asarray(stream.cluster_centers_, dtype=np.float64),
                                           np.asarray(stream.weights_, dtype=np.float64), est.lam_)[0]
    est.n_clusters_ = int(est.cluster_centers_.shape[0])
    est._partial = (est.cluster_centers_, stream)
    est.__dict__.pop("_order_records", None)  # serial_order_ belongs to fit's passes, not to a stream
    return est


def _fit_first_batch(est: DPMeans, X: Any, sample_weight: Any) -> DPMeans:
    """A fresh estimator of ``est``'s parameters (without checkpoint), fitted on the first batch, and the weight
    of each of its clusters (one pass over the batch)."""
    first = type(est)(**{**est.get_params(deep=False), "checkpoint": None})
    first.fit(X, sample_weight=sample_weight)
    arr, _ = check_array(X)
    w = check_sample_weight(sample_weight, arr)
    first.counts_ = reduce_stats(arr, w, first.cluster_centers_, est.split_every).weight
    return first


def _any_time_stream(est: DPMeans, first: DPMeans) -> AnytimeDPMeans:
    """An :class:`dclust.AnytimeDPMeans` whose clusters are those of ``first`` (ids 0..K-1, their weights)."""
    from ..stream import AnytimeDPMeans  # same layer, imported when used

    stream = AnytimeDPMeans(lam=first.lam_ * SUMMARY_FACTOR, max_iter=est.max_iter, random_state=est.random_state)
    keep = first.counts_ > 0
    stream.partial_fit(np.empty((0, first.n_features_in_)))  # an empty step: the state, with no cluster yet
    stream.cluster_centers_ = np.asarray(first.cluster_centers_[keep], dtype=np.float64)
    stream.weights_ = np.asarray(first.counts_[keep], dtype=np.float64)
    stream.cluster_ids_ = np.arange(int(keep.sum()), dtype=np.int64)
    stream.ages_ = np.zeros(int(keep.sum()), dtype=np.int64)
    stream.next_id_ = int(keep.sum())
    return stream


def _stream_state(est: KMeans | DPMeans) -> Any:
    """The counts (KMeans) or stream (DPMeans) of the last partial_fit, if the model still holds its centres."""
    state = vars(est).get("_partial")
    if state is None or state[0] is not vars(est).get("cluster_centers_"):
        return None
    return state[1]
