"""The time-step engine shared by DynamicMeans and AnytimeDPMeans: state, one batch, carry-over, history.

All temporal state lives in learned attributes that :func:`dclust.save` stores as arrays or JSON (ids, centres,
weights, ages, the next id, the base seed, the batch counter and the history), so a saved model resumes exactly.
The randomness of batch ``t``, restart ``r`` comes from ``(seed_, t, r)`` alone, never from a live Generator.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.passes import (
    block_offsets, compute, current_client, from_array, map_labels, on_cluster, single_chunk,
)
from .._dask.occ import DMRule, KeyedPass, keyed_pass, keyed_prefix
from .._fit import ProgressEvent, Step, Stopwatch, emit, fit_loop
from .._validation import InputInfo, as_generator, check_array, check_sample_weight
from ..cluster._base import BaseEstimator, finite_rows, non_finite_error, raise_if_bad_block, wrap_output
from ..errors import ConvergenceWarning, InvalidDataError, NotFittedError, message
from ..kernels.distances import seed_mix
from ..kernels.dynmeans import (StepResult, StepState, assign_instantiated, carry_over, end_of_pass,
                                first_nonfinite_row, gammas)
from ..kernels.kmeans import block_rng
from ..kernels.stats import ClusterStats
from ._checkpoint import check_resumed_length, resume_state, save_state
from typing import Self
from ..typing import ArrayLike, CheckpointLike, Ignored, SeedLike

if TYPE_CHECKING:
    from .._store._checkpoint import Checkpointer

__all__ = ["DynamicBase"]

_ORDER_STREAM = 0xD3
#: A batch in driver memory and its weights (or None), as :func:`load_block` gives them.
LoadedBatch = tuple[npt.NDArray[Any], npt.NDArray[np.float64] | None]
_HISTORY_KEYS = ("n_clusters", "objective", "births", "deaths", "revivals", "n_samples", "n_iter", "seconds")


def _labels_kernel(Xb: npt.NDArray[Any], *, offset: int, block_index: int, theta: npt.NDArray[np.float64],
                   ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    slots = assign_instantiated(Xb, theta)
    return ids[slots] if ids.size else np.full(Xb.shape[0], -1, np.int64)


def _as_float(batch: Any) -> np.ndarray:
    """A validated numpy batch with the dtype rules of ``check_array`` (ints -> float64, float16 -> float32)."""
    Y = np.asarray(batch)
    if Y.dtype.kind in "iu":
        return Y.astype(np.float64)
    return Y.astype(np.float32) if Y.dtype == np.float16 else Y


class DynamicBase(BaseEstimator):
    """Shared machinery; subclasses define ``_rates()`` -> (lam, Q, tau) and ``_predict_mask()``."""

    _transient_attributes = ("serial_order_",)
    _estimator_name = "DynamicMeans"

    # the parameters the subclasses' constructors set, which the shared machinery reads
    random_state: SeedLike
    checkpoint: CheckpointLike
    max_iter: int
    n_restarts: int
    prefix_size: int
    max_proposals: int
    split_every: Any

    # learned attributes
    seed_: int
    n_features_in_: int
    n_batches_: int
    next_id_: int
    cluster_ids_: npt.NDArray[np.int64]
    cluster_centers_: npt.NDArray[np.float64]
    weights_: npt.NDArray[np.float64]
    ages_: npt.NDArray[np.int64]
    labels_: Any  # of the last batch, shaped like it (numpy, dask or xarray); None before the first batch
    objective_: float
    objective_history_: list[float]
    n_iter_: int
    converged_: bool
    history_: dict[str, list[Any]]
    _order_records: tuple[int, int, list[KeyedPass]] | None

    # ------------------------------------------------------------------------------------------ state
    def _rates(self) -> tuple[float, float, float]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _reset(self, n_features: int) -> None:
        self.seed_ = int(as_generator(self.random_state).integers(2**62))
        self.n_features_in_ = int(n_features)
        self.n_batches_ = 0
        self.next_id_ = 0
        self.cluster_ids_ = np.zeros(0, dtype=np.int64)
        self.cluster_centers_ = np.zeros((0, n_features))
        self.weights_ = np.zeros(0)
        self.ages_ = np.zeros(0, dtype=np.int64)
        self.labels_ = None
        self.objective_ = 0.0
        self.objective_history_ = []
        self.n_iter_ = 0
        self.converged_ = True
        self.history_ = {k: [] for k in _HISTORY_KEYS}
        self._order_records = None

    def _after_batch(self) -> None:
        """Subclass hook: update derived state after a batch (before the checkpoint is saved)."""

    def _check_restored(self, ck: Checkpointer) -> None:
        """Shapes of a state restored from a checkpoint (see :mod:`dclust.stream._checkpoint`)."""
        d = int(self.n_features_in_)
        k = ck.require_shape("cluster_ids_", self.cluster_ids_, (None,)).shape[0]
        ck.require_shape("cluster_centers_", self.cluster_centers_, (k, d))
        ck.require_shape("weights_", self.weights_, (k,))
        ck.require_shape("ages_", self.ages_, (k,))
        if set(self.history_) != set(_HISTORY_KEYS) or int(self.n_batches_) != len(self.history_["n_samples"]):
            raise ValueError(f"a history of {self.n_batches_} batches with the keys {sorted(_HISTORY_KEYS)}")
        self._order_records = None

    def _clear(self) -> None:
        for k in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, k)
        self._order_records = None

    @property
    def n_clusters_(self) -> int:
        """Number of clusters a ``predict`` call assigns to."""
        self._check_fitted("cluster_ids_")
        return int(np.count_nonzero(self._predict_mask()))

    def _predict_mask(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def serial_order_(self) -> list[np.ndarray]:
        """Per pass of the last batch's kept restart, the permutation of its rows serial D-Means visits to give
        the same result (built on demand; not saved)."""
        rec = getattr(self, "_order_records", None)
        if rec is None:
            raise NotFittedError(
                message("serial_order_", "a model that processed a batch in this session",
                        "none (not fitted, an empty batch, or a loaded model)", "Call partial_fit(batch) first.")
            )
        mix, n, records = rec
        return [r.permutation(mix, n) for r in records]

    # ------------------------------------------------------------------------------------------ input
    def _check_batch(self, batch: ArrayLike, name: str = "batch") -> tuple[da.Array, InputInfo]:
        fitted = hasattr(self, "cluster_ids_")
        arr, info = check_array(batch, name=name, n_features=self.n_features_in_ if fitted else None,
                                min_samples=0)
        if not fitted:
            self._reset(arr.shape[1])
        return arr, info

    @staticmethod
    def _weights(sample_weight: ArrayLike | None, arr: da.Array) -> da.Array | None:
        if sample_weight is None:
            return None
        w = check_sample_weight(sample_weight, arr)
        assert w is not None  # None only for sample_weight=None
        if arr.shape[0] and bool((w <= 0).any().compute()):
            raise InvalidDataError(
                message("sample_weight", "weights > 0 (D-Means needs w > 0 for every observed cluster)",
                        "a zero weight", "Drop the rows of weight 0 from the batch.")
            )
        return w

    # ------------------------------------------------------------------------------------------ one step
    def partial_fit(self, batch: ArrayLike, y: Ignored = None, sample_weight: ArrayLike | None = None) -> Self:
        """Process one time step.

        Parameters
        ----------
        batch : array-like of shape (n_t, n_features)
            numpy, dask, zarr or xarray. Every batch is processed with keyed optimistic concurrency
            (docs/algorithms.md 8.5): a batch of one block in memory, others over Dask, with the same epochs and so the
            same result for any chunking. ``n_t = 0`` is allowed: the ages advance
            and the deletion check runs, nothing else changes.
        sample_weight : array-like of shape (n_t,), optional
            Weights > 0.

        Returns
        -------
        self
        """
        return self._fit_batch(batch, sample_weight)

    def _fit_batch(self, batch: ArrayLike, sample_weight: ArrayLike | None = None,
                   loaded: LoadedBatch | None = None) -> Self:
        """:meth:`partial_fit`; ``loaded`` is ``(rows, weights)``: the batch (a dask array of one block) already in
        memory, checked for NaN/inf (as :func:`load_block` gives it) or to be checked by ``_step`` (AnytimeDPMeans'
        labelling pass), so that it is not computed again."""
        self._validate_params()
        lam, Q, tau = self._rates()
        if self.checkpoint is not None and not hasattr(self, "cluster_ids_"):
            resume_state(self, getattr(self, "_ck_fp", None))
        arr, info = self._check_batch(batch)
        w = self._weights(sample_weight, arr)
        watch = Stopwatch()
        t = int(self.n_batches_)
        state = StepState(self.cluster_centers_, gammas(self.weights_, self.ages_, tau), self.ages_, lam, Q)
        labels: npt.NDArray[Any] | None
        if arr.shape[0] == 0:
            best, labels, order_rec = None, np.zeros(0, dtype=np.int64), None
        elif info.kind == "numpy" or arr.numblocks[0] == 1:  # one block: the same epochs, in memory
            if loaded is not None:
                Y, wn = loaded
            elif info.kind == "numpy":
                Y, wn = _finite(_as_float(batch)), None if w is None else np.asarray(compute(w)[0], dtype=np.float64)
            else:
                Y, wn = load_block(arr, w)
            best, labels, order_rec = self._step(Y, wn, state, t, arr)
        else:
            best, labels, order_rec = self._step(arr, w, state, t, arr)
        event = self._commit(best, state, arr, info, labels, watch, lam, Q)
        self._order_records = order_rec
        self._after_batch()
        save_state(self, getattr(self, "_ck_fp", None))  # before the event: an announced batch is durable
        emit(event)
        return self

    def _seed(self, t: int, r: int) -> int:
        return int(block_rng(self.seed_, _ORDER_STREAM, t, r).integers(2**62))

    def _step(self, X: ArrayLike, w: ArrayLike | None, state: StepState, t: int, arr: da.Array
              ) -> tuple[StepResult | None, npt.NDArray[Any] | None, tuple[int, int, list[KeyedPass]] | None]:
        """The time step on ``X`` (numpy in memory, or dask) with keyed OCC: the best of ``n_restarts`` orders.
        Returns ``(best StepResult, labels (kept slots) or None for dask, order record)``."""
        best, best_mix = None, None
        for r in range(self.n_restarts):
            mix = seed_mix(self._seed(t, r))
            res, all_stats = _keyed_step(X, w, state, mix=mix, max_iter=self.max_iter, prefix_size=self.prefix_size,
                                         max_proposals=self.max_proposals, split_every=self.split_every)
            if res is None:
                raise_if_bad_block(all_stats, arr, "batch")
            assert res is not None  # None only with a bad block, which raised
            if best is None or res.result.objective < best.result.objective:
                best, best_mix = res, mix
        assert best is not None and best_mix is not None  # n_restarts >= 1
        labels = None
        if isinstance(X, np.ndarray):
            has = np.flatnonzero(best.result.has_data)
            labels = has[assign_instantiated(X, best.result.theta[has])] if has.size else np.zeros(0, np.int64)
        return best, labels, (best_mix, X.shape[0], best.orders)

    def _commit(self, best: StepResult | None, state: StepState, arr: da.Array, info: InputInfo,
                labels: npt.NDArray[Any] | None, watch: Stopwatch, lam: float, Q: float) -> ProgressEvent:
        n_old = state.n_old
        if best is None:  # empty batch: only the ages advance
            from ..kernels.dynmeans import PassResult

            res = PassResult(np.zeros((n_old, state.phi.shape[1])), np.zeros(n_old, bool), np.zeros(n_old), 0.0,
                             np.arange(n_old))
            history, n_iter, converged = [], 0, True
        else:
            res, history, n_iter, converged = best.result, best.history, best.n_iter, best.converged
        ids, phi, wts, ages, next_id, slot_ids, counts = carry_over(
            self.cluster_ids_, self.cluster_centers_, self.weights_, self.ages_, self.next_id_, state.gamma, res,
            Q, lam)
        if best is not None and not converged:
            warnings.warn(f"{type(self).__name__} did not converge in max_iter={self.max_iter} passes on batch "
                          f"{self.n_batches_}; increase max_iter.", ConvergenceWarning, stacklevel=3)
        if labels is not None:
            out = slot_ids[labels] if labels.size else labels
            self.labels_ = out if info.kind == "numpy" else wrap_output(
                from_array(out, (arr.chunks[0],)), info, "labels")
        else:
            has = res.has_data
            lazy = map_labels(_labels_kernel, arr, dtype=np.int64, theta=res.theta[has], ids=slot_ids[has])
            self.labels_ = wrap_output(lazy, info, "labels")
        self.cluster_ids_, self.cluster_centers_, self.weights_, self.ages_ = ids, phi, wts, ages
        self.next_id_ = int(next_id)
        self.objective_ = float(res.objective)
        self.objective_history_ = [float(j) for j in history]
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        seconds = watch.lap()
        k = int(np.count_nonzero(res.has_data))
        row = {"n_clusters": k, "objective": self.objective_, "n_samples": int(arr.shape[0]), "n_iter": n_iter,
               "seconds": seconds, **counts}
        for key in _HISTORY_KEYS:
            self.history_[key].append(row[key])
        self.n_batches_ = int(self.n_batches_) + 1
        return ProgressEvent(type(self).__name__, "iter", self.n_batches_, self.objective_, k, seconds,
                             {key: row[key] for key in ("births", "deaths", "revivals", "n_samples")})

    # ------------------------------------------------------------------------------------------ use
    def predict(self, X: ArrayLike) -> ArrayLike:
        """Persistent id of the nearest cluster (see ``_predict_mask``) for every row; lowest id on ties.

        Returns an ndarray for numpy input, a lazy dask array for dask/zarr input, a DataArray for xarray.
        """
        self._check_fitted("cluster_ids_")
        mask = self._predict_mask()
        if not mask.any():
            raise NotFittedError(
                message(f"{type(self).__name__}.predict", "a model with at least one cluster", "none yet",
                        "Call partial_fit with a non-empty batch first.")
            )
        arr, info = check_array(X, n_features=self.n_features_in_)
        lazy = map_labels(_labels_kernel, finite_rows(arr, "predict"), dtype=np.int64,
                          theta=self.cluster_centers_[mask],
                          ids=self.cluster_ids_[mask])
        return wrap_output(lazy, info, "labels")


def load_block(arr: da.Array, w: da.Array | None) -> LoadedBatch:
    """A batch of one block and its weights (or None) in driver memory, the rows checked for NaN/inf
    (InvalidDataError naming the first bad row).

    The batch is processed on the driver, so it is read there: a block that a cluster does not hold (a chunk of a
    store, a slice of an array) is computed by Dask's threaded scheduler in this process, which saves a worker's
    read and the transfer of every row to the driver (at 8 features that transfer, not the read, bounds a stream
    over a ``LocalCluster``: about 5 x the read itself); data persisted on a cluster is fetched from it.
    Where the driver cannot reach the store (an ``OSError``: its files are on the workers' side only) and a cluster
    is up, the cluster's workers read the block.
    """
    parts = _chunk(arr), _chunk(w)
    if on_cluster(arr, w):
        Y, wn = compute(*parts)
    else:
        try:
            Y, wn = compute(*parts, scheduler="threads")
        except OSError:
            if current_client() is None:
                raise
            Y, wn = compute(*parts)
    return _finite(np.asarray(Y)), None if wn is None else np.asarray(wn, dtype=np.float64)


def _chunk(a: da.Array | None) -> Any:
    """``a``'s single chunk as a Delayed (no concatenation copy when computed), or ``a`` itself when it has several
    chunks (or is None)."""
    return single_chunk(a) if a is not None and all(n == 1 for n in a.numblocks) else a


def time_step_error(exc: InvalidDataError, t: int, arr: da.Array | None, single: bool = False,
                    name: str = "batches") -> InvalidDataError:
    """The error of a fit over time steps whose step ``t`` failed with ``exc``: for NaN/inf rows (``exc.batch_row``
    set) one that names the step and its row, or, when the steps are the row chunks of one array ``arr`` (called
    ``name``; ``t`` its chunk), the chunk and the row of the array (``single``: the fit's X was one numpy time
    step); ``exc`` itself otherwise."""
    row = getattr(exc, "batch_row", None)
    if row is None:
        return exc
    if arr is not None:
        first = int(block_offsets(arr.chunks[0])[t])
        return non_finite_error(name, t, first, first + arr.chunks[0][t] - 1, "fit", first + int(row))
    return nonfinite_row_error("X" if single else f"batches[{t}]", int(row), "Drop or impute those rows and fit again"
                               + ("." if single else " (the time steps before it are in the model)."))


def nonfinite_row_error(what: str, row: int, fix: str) -> InvalidDataError:
    """The error for NaN or infinity in row ``row`` of one time step (``what``), marked with that row
    (``batch_row``) so that a fit over many steps can name the step and the row of its X
    (:func:`time_step_error`)."""
    err = InvalidDataError(message(what, "finite values", f"NaN or infinity in row {row}", fix))
    err.batch_row = row  # type: ignore[attr-defined]
    return err


def fit_time_steps(model: Any, batches: Iterable[Any], fit_step: Callable[[Any, Any], Any], *, fp: Any,
                   n_done: str, arr: da.Array | None, single: bool, sample_weight: Iterable[Any] | None = None
                   ) -> None:
    """The loop of a ``fit`` over time steps: ``fit_step(batch, weights)`` for each batch (with the matching entry of
    ``sample_weight``, or None), after those a checkpoint at ``fp`` has done (the model's ``n_done`` attribute once
    restored); a stream shorter than the checkpoint's raises, and NaN/inf in a step is named by
    :func:`time_step_error`."""
    model._ck_fp = fp
    t = 0
    try:
        done = int(getattr(model, n_done)) if resume_state(model, fp) else 0
        weights = iter(sample_weight) if sample_weight is not None else None
        seen = 0
        for t, batch in enumerate(batches):
            w = None if weights is None else next(weights)
            seen = t + 1
            if t >= done:  # the batches before are in the restored state
                fit_step(batch, w)
        check_resumed_length(model, done, seen)
    except InvalidDataError as exc:
        raise time_step_error(exc, t, arr, single) from None
    finally:
        model._ck_fp = None


def _finite(Y: np.ndarray) -> np.ndarray:
    """``Y`` itself, or InvalidDataError naming the first row with NaN or infinity."""
    if Y.dtype.kind == "f" and np.isfinite(Y).all():  # the common case, vectorised (4 x the row search)
        return Y
    bad = first_nonfinite_row(Y)
    if bad >= 0:
        raise nonfinite_row_error("batch", int(bad), "Drop or impute those rows and pass the batch again.")
    return Y


class _DMPasses(Step):
    """The passes of one restart of a D-Means time step (keyed OCC, docs/algorithms.md 8.5), for the fit loop: the
    first covers the keys after the serial ``prefix`` (run on the driver first), later ones all keys, until the
    partition repeats. The state is a dict: ``cur`` (the :class:`StepState` the next pass starts from), ``res``
    (the last pass's :class:`PassResult`), ``fp`` (its partition fingerprint), ``history`` and ``records``."""

    name = "DynamicMeans"

    def __init__(self, X: ArrayLike, w: ArrayLike | None, state: StepState, prefix: tuple[int, Any, Any, Any], *,
                 mix: int, max_proposals: int, split_every: Any) -> None:
        self.X, self.w, self.state, self.prefix, self.mix = X, w, state, prefix, mix
        self.max_proposals, self.split_every = max_proposals, split_every

    def start(self) -> dict[str, Any]:
        st = self.state
        return {"cur": StepState(st.phi, st.gamma, st.ages, st.lam, st.Q), "res": None, "fp": None, "history": [],
                "records": []}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        st, cur, first = self.state, s["cur"], not s["history"]
        prefix_end, p_index, p_rows, p_w = self.prefix if first else (0, None, None, None)
        rule = DMRule(cur)
        rate = 0.0
        if first:
            assert p_index is not None  # the prefix of the first pass
            rate = rule.accept(None, p_index, p_rows, p_w, ()) / max(p_index.size, 1) if p_index.size else 1.0
        epochs, _ = keyed_pass(self.X, self.w, rule, mix=self.mix, start=prefix_end, rate=rate,
                               max_proposals=self.max_proposals, split_every=self.split_every)
        stats = rule.stats()
        res = end_of_pass(stats.weight, stats.mean, stats.scatter, cur)
        fp = np.zeros(cur.n_slots, dtype=np.uint64)
        fp[: stats.fingerprint.shape[0]] = stats.fingerprint[: cur.n_slots]
        return {"cur": StepState(st.phi, st.gamma, st.ages, st.lam, st.Q, res.theta.copy(), res.has_data.copy()),
                "res": res, "fp": fp[res.keep], "history": s["history"] + [res.objective],
                "records": s["records"] + [KeyedPass(prefix_end, epochs)]}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return old["fp"] is not None and np.array_equal(new["fp"], old["fp"])

    def objective(self, s: dict[str, Any]) -> float:
        return s["history"][-1] if s["history"] else float("nan")

    def n_clusters(self, s: dict[str, Any]) -> int:
        return 0 if s["res"] is None else int(np.count_nonzero(s["res"].has_data))


def _keyed_step(X: ArrayLike, w: ArrayLike | None, state: StepState, *, mix: int, max_iter: int, prefix_size: int,
                max_proposals: int, split_every: Any = None) -> tuple[StepResult | None, ClusterStats]:
    """One time step (one restart) of D-Means with keyed OCC (docs/algorithms.md 8.5) on ``X`` (numpy or dask): the
    passes of :class:`_DMPasses`, run by the fit loop (no events or checkpoints of their own: a stream announces
    and saves whole batches).

    Returns ``(StepResult, first_pass_stats)``: ``first_pass_stats`` covers every row with one cluster (its
    ``bad_block`` names a chunk holding NaN/inf; the StepResult is then None). ``StepResult.orders`` holds one
    :class:`~dclust._dask.occ.KeyedPass` per pass; ``labels`` is None.
    """
    all_stats, prefix_end, p_index, p_rows, p_w = keyed_prefix(X, w, mix=mix, prefix_size=prefix_size,
                                                               split_every=split_every)
    if all_stats.bad_block >= 0:
        return None, all_stats
    passes = _DMPasses(X, w, state, (prefix_end, p_index, p_rows, p_w), mix=mix, max_proposals=max_proposals,
                       split_every=split_every)
    run = fit_loop(passes, max_iter=max_iter, announce=False)
    s = run.state
    return StepResult(s["res"], None, s["history"], run.n_iter, run.converged, s["records"]), all_stats


def row_blocks(arr: da.Array) -> list[da.Array]:
    """The row blocks of ``arr`` as separate dask arrays (the time steps of ``fit``)."""
    offsets = block_offsets(arr.chunks[0])
    return [arr[o : o + n] for o, n in zip(offsets, arr.chunks[0])]
