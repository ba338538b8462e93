"""Any-time DP-means ([DM] 4.1): D-Means with ``Q = tau = 0`` over random disjoint row blocks of one data set."""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterator, Self

import dask
import dask.array as da
import numpy as np
import numpy.typing as npt
from dask.core import get_dependencies

from .._dask.passes import current_client, on_cluster, rechunk
from .._registry import register
from .._validation import SEED, Interval, Options, check_array, check_sample_weight
from ..errors import InvalidDataError, InvalidParameterError, NotFittedError, message
from ..kernels.distances import seed_mix
from ..kernels.kmeans import block_rng
from ..cluster._base import CHECKPOINT, raise_if_bad_block
from ._anytime_step import Sample, keyed_sample, sampled_step
from ._checkpoint import fingerprint_of, resume_state, save_state
from ._consolidate import consolidate as consolidate_summaries
from ._consolidate import refine_pass
from ._dynamic import DynamicBase, LoadedBatch, _finite, load_block, time_step_error
from ..typing import ArrayLike, CheckpointLike, Ignored, SeedLike

if TYPE_CHECKING:
    from .._dask.occ import KeyedPass
    from .._store._checkpoint import Checkpointer
    from ..kernels.dynmeans import StepResult, StepState

__all__ = ["AnytimeDPMeans"]

_BATCH_STREAM = 0xA7
#: Batches read (and sampled) ahead of the one processed, one after the other in one thread. Two, or two reads side
#: by side, measured no faster at 10M x 8 on 2 cores (20 batches: the reads are ~2 x faster than the batches'
#: passes, and a second reader only competes with the two threads of the pass).
_READ_AHEAD = 1


class _BlockReader:
    """Row block ``j`` of ``arr`` (one column chunk, as ``check_array`` gives it) and of the weights ``w``, in
    driver memory and checked for NaN/inf, as :func:`~dclust.stream._dynamic.load_block` gives it (with
    ``check=False`` a block read from the graph is not checked here: the labelling pass of the batch checks every
    row, :func:`~dclust.stream._anytime_step.sampled_step`).

    A block no cluster holds is read by its own tasks, run in the calling thread from the array's graph,
    materialized once (no scheduler, no graph optimization per batch): a Dask compute per batch took about 3 x the
    wall time of the read itself (20 chunks of 500,000 x 8 float32, one after the other: 0.54 s against 0.19 s).
    Data persisted on a cluster, and a store the driver cannot reach (``OSError``) while a cluster is up, go
    through :func:`load_block`.
    """

    def __init__(self, arr: da.Array, w: da.Array | None, *, check: bool = True) -> None:
        self.arr, self.w, self.check = arr, w, check
        self.graphs: list[tuple[da.Array, dict[Any, Any]]] | None = None
        if not on_cluster(arr, w):
            self.graphs = [(a, dict(a.__dask_graph__())) for a in (arr, w) if a is not None]

    def __call__(self, j: int) -> LoadedBatch:
        if self.graphs is not None:
            try:
                Y, *wn = (_task_value(g, (a.name, j) + (0,) * (a.ndim - 1)) for a, g in self.graphs)
            except OSError:
                if current_client() is None:
                    raise
            else:
                Y = np.asarray(Y)
                return _finite(Y) if self.check else Y, np.asarray(wn[0], dtype=np.float64) if wn else None
        return load_block(self.arr.blocks[j], None if self.w is None else self.w.blocks[j])


def _task_value(graph: dict[Any, Any], key: Any) -> Any:
    """The value of ``key`` in the materialized task ``graph``: its tasks alone, run in this thread."""
    needed, todo = {}, [key]
    while todo:
        k = todo.pop()
        if k not in needed:
            needed[k] = graph[k]
            todo.extend(get_dependencies(graph, k))
    return dask.get(needed, key)


def _prefetched(arr: da.Array, w: da.Array | None, order: npt.NDArray[np.int64], start: int,
                prepare: Callable[[int, LoadedBatch], Any], *, check: bool = True
                ) -> Iterator[tuple[int, da.Array, da.Array | None, LoadedBatch, Any]]:
    """``(j, batch, weights, loaded, prepared)`` for the batches ``order[start:]`` of ``arr`` (and ``w``): each
    batch (and its weights) as a dask array of one block, ``loaded`` the same in driver memory
    (:class:`_BlockReader`, with ``check``) and ``prepare(j, loaded)``, all made in a background thread up to
    ``_READ_AHEAD`` batches ahead of the one processed."""
    read = _BlockReader(arr, w, check=check)

    def load(j: int) -> tuple[da.Array, da.Array | None, LoadedBatch, Any]:
        b = int(order[j])
        loaded = read(b)
        return arr.blocks[b], None if w is None else w.blocks[b], loaded, prepare(j, loaded)

    pool = ThreadPoolExecutor(1)
    try:
        ahead = deque(pool.submit(load, j) for j in range(start, min(start + _READ_AHEAD, len(order))))
        for j in range(start, len(order)):
            batch, wb, loaded, prepared = ahead.popleft().result()
            if j + _READ_AHEAD < len(order):
                ahead.append(pool.submit(load, j + _READ_AHEAD))
            yield j, batch, wb, loaded, prepared
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a stop after batch j leaves only the reads under way


@register
class AnytimeDPMeans(DynamicBase):
    """DP-means that reads a large data set once, in random disjoint batches, with a usable model after each.

    It is D-Means with ``Q = 0`` (no cluster is ever deleted, revival costs no penalty) and ``tau = 0`` (a
    cluster's centre is the running mean of every point it ever received). With ``lam`` the DP-means penalty,
    after a full pass the clusters approximate batch :class:`dclust.DPMeans` ([DM] 4.1; docs/algorithms.md DM4).

    Each batch is read once into the driver's memory, by the driver itself (the block's own tasks, run in a
    background thread) unless a ``distributed`` cluster holds the data (persisted), and the next one is read, and
    its keyed sample drawn, while this one is processed. D-Means' iterations
    run on a keyed sample of ``sample_rows`` rows of the batch; one labelling pass over every row (two threads, a
    fused kernel with no per-row output, which also checks every row for NaN/inf) then gives the centres, the
    weights and the objective of the whole batch; the batch that starts the read first has one full D-Means
    pass, so that its clusters open as in D-Means (:mod:`dclust.stream._anytime_step`). The model is the same for
    any chunking of the data and any number of workers.

    Parameters
    ----------
    lam : float
        Penalty per cluster, in squared-distance units (> 0).
    batch_rows : int, optional
        Rows per batch. The data is re-chunked to this many rows (prefer a multiple of the store's chunk size);
        by default each row chunk of the data is one batch. Every batch is loaded into memory.
    sample_rows : int or None, default 4096
        Per batch, D-Means iterates to convergence on a keyed random sample of about this many rows (the same rows
        for any chunking and any number of workers), then one labelling pass over the whole batch assigns every
        row (eq. 28 against the sample's fixed point) and updates the centres (eq. 29) from all of them: two reads
        of a batch, one when it fits in memory, instead of one per D-Means iteration. None iterates D-Means on
        every row of the batch (the algorithm of [DM] 4.1 as written; slower).
    max_iter, n_restarts, random_state
        As in :class:`DynamicMeans`; ``random_state`` also fixes the random order of the batches and the samples.
    summary_factor : float in (0, 1], default 1.0
        The read runs D-Means with penalty ``summary_factor * lam``: below 1 it keeps finer cluster summaries
        (more, smaller clusters), which the consolidation at the end of the read merges under ``lam``. 1 is the
        algorithm of [DM] 4.1 (DM4 holds); about 0.25 brings one read within a few percent of (or below) batch
        DP-means' objective on overlapping clusters, where a plain read stays 10-20 % above it.
    consolidate : bool, default True
        At the end of the read, merge the retained summaries by weighted DP-means under ``lam``
        (:func:`dclust.stream._consolidate.consolidate`, O(K^2 D) on the driver, no pass over the data). The
        objective of the data never rises; on well-separated data with ``summary_factor=1`` nothing changes.
    checkpoint : str or os.PathLike, optional
        A directory where the whole state is saved atomically after every batch (Zarr + JSON, no pickle).
        ``iter_fit``/``fit`` over the same data resume from it at the next batch (as ``resume=True``), so a rerun
        after a crash ends with the identical model; once every batch is done a rerun returns at once.

    Attributes
    ----------
    cluster_centers_ : ndarray, shape (n_clusters_, n_features)
        Every cluster found so far (running means).
    cluster_ids_, weights_, ages_, labels_, objective_, history_, n_batches_ :
        As in :class:`DynamicMeans`; ``labels_`` are the last batch's (lazy for dask input: computed when read),
        ``objective_`` its eq. 18 objective; ``serial_order_`` has one order per full pass of the last batch (the
        sample's passes are serial D-Means on the sample's key order).
    n_clusters_ : int
        Number of clusters so far.
    batch_order_ : ndarray of int64
        The order in which the row blocks are read.
    n_seen_ : int
        Rows processed so far.

    Examples
    --------
    >>> import numpy as np, dask.array as da, dclust
    >>> X = np.concatenate([np.zeros((50, 2)), np.full((50, 2), 10.0)])[np.random.default_rng(0).permutation(100)]
    >>> model = dclust.AnytimeDPMeans(lam=4.0, random_state=0)
    >>> for m in model.iter_fit(da.from_array(X, chunks=(25, 2))):
    ...     if m.n_clusters_ == 2:
    ...         break
    >>> model.n_clusters_, model.n_seen_ <= 100
    (2, True)
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "neither")],
        "batch_rows": [Interval("int", 1, None), Options((None,))],
        "max_iter": [Interval("int", 1, None)],
        "n_restarts": [Interval("int", 1, None)],
        "random_state": [SEED],
        "checkpoint": [CHECKPOINT],
        "summary_factor": [Interval("real", 0, 1, "right")],
        "consolidate": [Options((True, False))],
        "sample_rows": [Interval("int", 1, None), Options((None,))],
    }
    # the in-memory path is used for every batch (one block each); these fix the OCC knobs of the base class
    prefix_size = 1000
    max_proposals = 4096
    split_every = None

    lam_: float
    n_seen_: int
    batch_order_: npt.NDArray[np.int64]
    _ck_fp: dict[str, Any] | None
    #: ``(t, {(mix, sample_rows): sample})``: the samples of batch ``t`` drawn while it was read
    #: (:meth:`_draw_samples`)
    _samples: tuple[int, dict[tuple[int, int], Sample]] | None = None

    def __init__(
        self, *, lam: float | None = None, batch_rows: int | None = None, max_iter: int = 100, n_restarts: int = 1,
        random_state: SeedLike = None, checkpoint: CheckpointLike = None, summary_factor: float = 1.0,
        consolidate: bool = True, sample_rows: int | None = 4096,
    ) -> None:
        self.lam, self.sample_rows, self.summary_factor = lam, sample_rows, summary_factor
        self.consolidate, self.batch_rows, self.max_iter = consolidate, batch_rows, max_iter
        self.n_restarts, self.random_state, self.checkpoint = n_restarts, random_state, checkpoint

    def _rates(self) -> tuple[float, float, float]:
        assert self.lam is not None  # lam=None is refused by _validate_params
        self.lam_ = float(self.lam)
        return self.lam_ * float(self.summary_factor), 0.0, 0.0

    def _predict_mask(self) -> np.ndarray:
        return np.ones(self.cluster_ids_.shape[0], dtype=bool)

    def _reset(self, n_features: int) -> None:
        super()._reset(n_features)
        self.n_seen_ = 0
        self.batch_order_ = np.zeros(0, dtype=np.int64)

    def partial_fit(self, batch: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> Self:
        """Process one batch (see :meth:`DynamicMeans.partial_fit`)."""
        return super().partial_fit(batch, sample_weight=sample_weight)

    def _check_restored(self, ck: Checkpointer) -> None:
        super()._check_restored(ck)
        order = ck.require_shape("batch_order_", self.batch_order_, (None,))
        if order.size and (int(self.n_batches_) > order.size or np.sort(order).tolist() != list(range(order.size))):
            raise ValueError(f"batch_order_ that is a permutation covering the {self.n_batches_} batches done")

    def _step(self, X: ArrayLike, w: ArrayLike | None, state: StepState, t: int, arr: da.Array
              ) -> tuple[StepResult | None, npt.NDArray[Any] | None, tuple[int, int, list[KeyedPass]] | None]:
        """The batch with :func:`~dclust.stream._anytime_step.sampled_step` (``sample_rows`` set), the best of
        ``n_restarts`` samples and orders; ``labels_`` stay lazy (computed from the batch when read)."""
        if self.sample_rows is None:
            return super()._step(X, w, state, t, arr)
        best, best_mix = None, None
        drawn = self._samples if self._samples is not None and self._samples[0] == t else (t, {})
        for r in range(self.n_restarts):
            mix = seed_mix(self._seed(t, r))
            res, check = sampled_step(X, w, state, mix=mix, sample_rows=self.sample_rows, max_iter=self.max_iter,
                                      max_proposals=self.max_proposals, split_every=self.split_every,
                                      sample=drawn[1].get((mix, self.sample_rows)))
            if check.bad_block >= 0 and isinstance(X, np.ndarray):
                _finite(X)  # names the first row with NaN/inf (a batch read unchecked: the pass found it)
            raise_if_bad_block(check, arr, "batch")
            assert res is not None  # None only with a bad block, which raised
            if best is None or res.result.objective < best.result.objective:
                best, best_mix = res, mix
        assert best is not None and best_mix is not None  # n_restarts >= 1
        return best, None, (best_mix, X.shape[0], best.orders)

    def _after_batch(self) -> None:
        self.n_seen_ = int(self.n_seen_) + int(self.history_["n_samples"][-1])

    def _batches(self, X: ArrayLike, sample_weight: ArrayLike | None = None) -> tuple[da.Array, da.Array | None]:
        """``(X, sample_weight)`` validated, as dask arrays whose row blocks are the batches."""
        self._validate_params()
        arr, _ = check_array(X)
        if self.batch_rows is not None and arr.chunks[0][0] != self.batch_rows:
            arr = rechunk(arr, {0: self.batch_rows})
        return arr, check_sample_weight(sample_weight, arr)

    def iter_fit(
        self, X: ArrayLike, sample_weight: ArrayLike | None = None, *, resume: bool = False,
    ) -> Iterator["AnytimeDPMeans"]:
        """Yield the model after each batch; stop iterating whenever it is good enough.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Dask, zarr, xarray or numpy. Its row blocks (of ``batch_rows`` rows) are read once each, in a random
            order fixed by ``random_state``.
        sample_weight : array-like of shape (n_samples,), optional
            Weights > 0.
        resume : bool, default False
            Continue a fit of the same ``X`` (for example a model loaded from a checkpoint) after its
            ``n_batches_`` batches, instead of starting afresh.

        Yields
        ------
        AnytimeDPMeans
            ``self``, with ``cluster_centers_`` and ``n_clusters_`` usable.
        """
        arr, w = self._batches(X, sample_weight)
        n_blocks = arr.numblocks[0]
        fp = fingerprint_of(self, arr, w)
        if self.checkpoint is not None:
            self._ck_fp = fp
            if resume_state(self, fp):
                resume = True
        if resume and hasattr(self, "batch_order_") and len(self.batch_order_):
            if len(self.batch_order_) != n_blocks or arr.shape[1] != self.n_features_in_:
                raise InvalidDataError(
                    message("AnytimeDPMeans.iter_fit(X, resume=True)",
                            f"the data of the interrupted fit ({len(self.batch_order_)} batches of "
                            f"{self.n_features_in_} features)", f"{n_blocks} batches of {arr.shape[1]} features",
                            "Pass the same X and batch_rows, or resume=False to start afresh.")
                )
        else:
            self._clear()
            self._reset(arr.shape[1])
            self.batch_order_ = block_rng(self.seed_, _BATCH_STREAM).permutation(n_blocks).astype(np.int64)
        self._ck_fp = fp
        at = int(self.n_batches_)  # the batch being read or processed
        try:
            for j, batch, wb, loaded, samples in _prefetched(arr, w, self.batch_order_, at, self._draw_samples,
                                                             check=self.sample_rows is None):
                self._samples = (j, samples)
                self._fit_batch(batch, wb, loaded)  # partial_fit with the batch in memory
                self._samples = None
                if j == n_blocks - 1 and self.consolidate:
                    self._set_summaries(*consolidate_summaries(self.cluster_centers_, self.weights_, self.lam_)[:2])
                    save_state(self, fp)  # a rerun after the read resumes the consolidated model
                at = j + 1
                yield self
        except InvalidDataError as exc:  # NaN/inf in a batch: named as a chunk and row of X (the batches done stay)
            raise time_step_error(exc, int(self.batch_order_[at]), arr, name="X") from None
        finally:
            self._ck_fp = None
            self._samples = None

    def _draw_samples(self, t: int, loaded: LoadedBatch) -> dict[tuple[int, int], Sample]:
        """The keyed samples of batch ``t`` (already in memory), one per restart, by ``(mix, sample_rows)``: drawn
        in the prefetch thread, as they depend on the rows and the seed only."""
        if self.sample_rows is None:
            return {}
        Y, wn = loaded
        mixes = (seed_mix(self._seed(t, r)) for r in range(self.n_restarts))
        return {(mix, self.sample_rows): keyed_sample(Y, wn, mix=mix, sample_rows=self.sample_rows) for mix in mixes}

    def fit(
        self, X: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None, *,
        callback: Callable[["AnytimeDPMeans"], Any] | None = None, resume: bool = False,
    ) -> Self:
        """Run :meth:`iter_fit` to the end, or until ``callback(self)`` returns a true value.

        Returns
        -------
        self
        """
        for model in self.iter_fit(X, sample_weight, resume=resume):
            if callback is not None and callback(model):
                break
        return self

    def _set_summaries(self, centers: np.ndarray, weights: np.ndarray) -> None:
        """Replace the clusters by consolidated ones (fresh ids, age 1).

        ``labels_`` keep the ids of the last batch as it was read; :meth:`predict` gives the consolidated ids.
        """
        k = len(weights)
        self.cluster_ids_ = np.arange(self.next_id_, self.next_id_ + k, dtype=np.int64)
        self.next_id_ = int(self.next_id_) + k
        self.cluster_centers_, self.weights_ = np.asarray(centers, np.float64), np.asarray(weights, np.float64)
        self.ages_ = np.ones(k, dtype=np.int64)

    def refine(self, X: ArrayLike, sample_weight: ArrayLike | None = None, *, n_passes: int = 1) -> "AnytimeDPMeans":
        """Extra reads of X after a fit: each is a Lloyd pass (tree-reduced) followed by a consolidation.

        Each pass lowers (or keeps) the DP-means objective ``SSE + lam K`` of the data; passes stop early at a
        fixed point. ``objective_history_`` gets the objective each pass measured.

        Parameters
        ----------
        X, sample_weight
            The data of the fit (any layout :meth:`iter_fit` accepts).
        n_passes : int, default 1
            Maximum number of reads.

        Returns
        -------
        self
        """
        if not hasattr(self, "n_batches_") or not self.n_batches_:
            raise NotFittedError(message("AnytimeDPMeans.refine", "a fitted model", "one that has seen no batch",
                                         "Call fit(X) first."))
        if not isinstance(n_passes, (int, np.integer)) or isinstance(n_passes, bool) or n_passes < 1:
            raise InvalidParameterError(message("AnytimeDPMeans.refine(n_passes=...)", "an integer >= 1",
                                                repr(n_passes), "Pass n_passes=1 (or more)."))
        arr, w = self._batches(X, sample_weight)
        if arr.shape[1] != self.n_features_in_:
            raise InvalidDataError(message("AnytimeDPMeans.refine(X)", f"{self.n_features_in_} features",
                                           f"{arr.shape[1]}", "Pass the data the model was fitted on."))
        history = []
        for _ in range(n_passes):
            centers, weights, objective = refine_pass(arr, w, self.cluster_centers_, self.lam_)
            history.append(objective)
            same = centers.shape == self.cluster_centers_.shape and np.allclose(centers, self.cluster_centers_,
                                                                                   rtol=1e-12, atol=0.0)
            self._set_summaries(centers, weights)
            if same:
                break
        self.objective_history_ = history
        return self
