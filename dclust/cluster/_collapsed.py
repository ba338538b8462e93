"""In-memory serial variants of MAD-Bayes ([MB] section 4.1): collapsed DP-means (docs/algorithms.md 1.4), capped
DP-means (1.5) and collapsed BP-means (2.3).

Both accept numpy, dask, zarr or xarray input, check the number of rows from metadata against ``max_samples`` (a
clear :class:`~dclust.errors.InvalidDataError` above it) and only then compute the data into memory.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import numpy as np
import numpy.typing as npt

from .._fit import LoopResult, NoCheckpoint, finish, fit_loop
from .._registry import register
from .._validation import Interval, Options, as_generator
from ..errors import InvalidParameterError, message
from ..kernels import collapsed as K
from ..kernels.bpmeans import feature_means
from ._base import HistoryStep, MEMORY_PARAMETERS, CentroidMixin
from ._features import FeatureMixin
from ._inmemory import _InMemory
from ..typing import ArrayLike, CheckpointLike, DPMeansInit, Ignored, SeedLike

__all__ = ["CollapsedDPMeans", "CappedDPMeans", "CollapsedBPMeans"]

_E = TypeVar("_E", bound=_InMemory)


def _processing_order(n: int, shuffle: bool, random_state: SeedLike) -> npt.NDArray[np.int64]:
    """The permutation drawn once per fit and reused in every pass (docs/algorithms.md section 0)."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return as_generator(random_state).permutation(n).astype(np.int64)


def _restart_orders(n: int, random_state: SeedLike, n_init: int) -> list[npt.NDArray[np.int64]]:
    """Processing orders of restarts 1..n_init-1: independent streams spawned from ``random_state``."""
    if n_init <= 1:
        return []
    base = (int(random_state) if isinstance(random_state, (int, np.integer))
            else int(as_generator(random_state).integers(2**63)))
    return [np.random.default_rng(np.random.SeedSequence(base, spawn_key=(r,))).permutation(n).astype(np.int64)
            for r in range(1, n_init)]


class _Passes(HistoryStep):
    """Serial passes of an in-memory estimator for the fit loop: every pass visits the rows in one processing order
    drawn once per fit (docs/algorithms.md section 0). The state: ``order``, ``history`` (the objective after every
    pass), ``changed`` (the last pass changed the model) and the model's arrays. A subclass gives ``initial()``
    (the model's arrays before the first pass), ``one_pass(state)`` (``(model arrays, objective, changed,
    event extra)``), ``size(state)`` (clusters or features) and ``read(ck, saved, n)`` (the model's arrays of a
    checkpoint, checked)."""

    unit = "passes"

    def __init__(self, est: Any, X: npt.NDArray[np.float64], order: npt.NDArray[np.int64] | None = None) -> None:
        self.name, self.est, self.X, self.order = type(est).__name__, est, X, order
        self.lam = float(est.lam)

    def initial(self) -> dict[str, Any]:
        """The model's arrays before the first pass."""
        raise NotImplementedError  # pragma: no cover - each subclass's

    def one_pass(self, s: dict[str, Any]) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        """One pass from the state ``s``: ``(model arrays, objective, changed, event extra)``."""
        raise NotImplementedError  # pragma: no cover - each subclass's

    def size(self, s: dict[str, Any]) -> int:
        """The number of clusters or features of the state ``s``."""
        raise NotImplementedError  # pragma: no cover - each subclass's

    def read(self, ck: Any, saved: dict[str, Any], n: int) -> dict[str, Any]:
        """The model's arrays of the checkpoint state ``saved`` of ``n`` rows, checked."""
        raise NotImplementedError  # pragma: no cover - each subclass's

    def start(self) -> dict[str, Any]:
        order = self.order
        if order is None:
            order = _processing_order(self.X.shape[0], self.est.shuffle, self.est.random_state)
        return {"order": order, "history": [], "changed": True, "extra": {}, **self.initial()}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        model, objective, changed, extra = self.one_pass(s)
        return {**s, **model, "history": s["history"] + [objective], "changed": changed, "extra": extra}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return not new["changed"]

    def n_clusters(self, s: dict[str, Any]) -> int:
        return self.size(s)

    def extra(self, s: dict[str, Any]) -> dict[str, Any]:
        extra: dict[str, Any] = s["extra"]
        return extra

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in s.items() if k not in ("changed", "extra")}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        n = self.X.shape[0]
        order = ck.require_shape("processing order", saved["order"], (n,)).astype(np.int64)
        if not np.array_equal(np.sort(order), np.arange(n)):
            raise ValueError("a processing order that is not a permutation of the rows")
        history = [float(v) for v in saved["history"]]
        if len(history) != iteration:
            raise ValueError(f"a history of {len(history)} passes; expected {iteration}")
        return {"order": order, "history": history, "changed": True, "extra": {}, **self.read(ck, saved, n)}


def _fit_serial(est: _E, X: ArrayLike, make: Callable[[_E, npt.NDArray[np.float64]], _Passes],
                store: Callable[[LoopResult, npt.NDArray[np.float64]], tuple[LoopResult, int]]) -> _E:
    """Run the serial fit of ``est`` on ``X`` and return ``est``: the passes ``make(est, X in memory)``, resumed from
    the checkpoint when it holds an interrupted fit (a finished fit's checkpoint gives its model back at once);
    ``store(run, X in memory)`` sets the estimator's own fitted attributes and returns the run it kept and its size
    (clusters or features); then the attributes every serial fit has, the finished checkpoint and the "done" event."""
    est._validate_params()
    Xn, _ = est._load(X)
    ck, state = est._memory_checkpointer(Xn)
    if est._restore_done(ck, state):
        return est
    run = fit_loop(make(est, Xn), max_iter=est.max_iter, ck=ck, resume=None if state is None else state["loop"],
                   warn=True)
    run, size = store(run, Xn)
    history = run.state["history"]
    est.objective_ = history[-1]
    est.objective_history_ = history
    est.n_iter_ = run.n_iter
    est.converged_ = run.converged
    est.order_ = run.state["order"]
    est.n_features_in_ = Xn.shape[1]
    finish(est, ck, n_iter=run.n_iter, objective=history[-1], n_clusters=size)
    return est


class _CollapsedPasses(_Passes):
    """Collapsed DP-means passes (the model: ``labels``)."""

    def initial(self) -> dict[str, Any]:
        n = self.X.shape[0]
        labels = np.zeros(n, dtype=np.int64) if self.est.init == "mean" else np.full(n, -1, dtype=np.int64)
        return {"labels": labels}

    def one_pass(self, s: dict[str, Any]) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        labels, moved = K.collapsed_pass(self.X, s["order"], s["labels"], self.lam)
        return {"labels": labels}, K.collapsed_objective(self.X, labels, self.lam), moved != 0, {"moved": moved}

    def size(self, s: dict[str, Any]) -> int:
        return int(s["labels"].max()) + 1

    def read(self, ck: Any, saved: dict[str, Any], n: int) -> dict[str, Any]:
        labels = ck.require_shape("labels", saved["labels"], (n,)).astype(np.int64)
        if labels.min() < 0:
            raise ValueError("negative labels after a pass")
        return {"labels": labels}


class _CappedPasses(_Passes):
    """Capped DP-means passes (the model: ``labels`` and ``centres``)."""

    def __init__(self, est: Any, X: npt.NDArray[np.float64]) -> None:
        super().__init__(est, X)
        self.kmax = X.shape[0] if est.max_clusters is None else int(est.max_clusters)

    def initial(self) -> dict[str, Any]:
        n, d = self.X.shape
        if self.est.init == "mean":
            return {"centres": self.X.mean(axis=0, keepdims=True), "labels": np.zeros(n, dtype=np.int64)}
        return {"centres": np.empty((0, d)), "labels": np.full(n, -1, dtype=np.int64)}

    def one_pass(self, s: dict[str, Any]) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        new, C = K.capped_pass(self.X, s["order"], s["centres"], s["labels"], self.lam, self.kmax)
        changed = not np.array_equal(new, s["labels"])
        return {"labels": new, "centres": C}, K.collapsed_objective(self.X, new, self.lam), changed, {}

    def size(self, s: dict[str, Any]) -> int:
        return int(s["centres"].shape[0])

    def read(self, ck: Any, saved: dict[str, Any], n: int) -> dict[str, Any]:
        C = ck.require_shape("centres", saved["centres"], (None, self.X.shape[1])).astype(np.float64)
        labels = ck.require_shape("labels", saved["labels"], (n,)).astype(np.int64)
        if C.shape[0] > self.kmax or labels.min() < 0 or labels.max() >= C.shape[0]:
            raise ValueError(f"{C.shape[0]} centres and labels up to {labels.max()} (max_clusters={self.kmax})")
        return {"centres": C, "labels": labels}


class _CollapsedBPPasses(_Passes):
    """Collapsed BP-means passes (the model: the allocation ``Z``)."""

    def __init__(self, est: Any, X: npt.NDArray[np.float64], order: npt.NDArray[np.int64] | None = None) -> None:
        super().__init__(est, X, order)
        self.sq_norm = float((X * X).sum())

    def initial(self) -> dict[str, Any]:
        return {"Z": np.zeros((self.X.shape[0], 0), np.uint8)}

    def one_pass(self, s: dict[str, Any]) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        Z, moves, J = K.collapsed_bp_pass(self.X, s["order"], s["Z"], self.lam, self.sq_norm)
        return {"Z": Z}, J, moves != 0, {"moves": moves}

    def size(self, s: dict[str, Any]) -> int:
        return int(s["Z"].shape[1])

    def read(self, ck: Any, saved: dict[str, Any], n: int) -> dict[str, Any]:
        return {"Z": ck.require_shape("Z", saved["Z"], (n, None)).astype(np.uint8)}


@register
class CollapsedDPMeans(CentroidMixin, _InMemory):
    """Collapsed DP-means ([MB] eq. 8/9, docs/algorithms.md 1.4): the centres are always the cluster means.

    Minimises ``J_C(z) = sum_k SSE_k + lam * K`` by a Hartigan-style descent: every point, in a seeded processing
    order reused in every pass, leaves its cluster and joins the cluster with the smallest exact increase
    ``n_k/(n_k+1) * ||x - xbar_k||^2``, or opens a new cluster when every increase is strictly above ``lam``.
    A point moves only when that strictly lowers ``J_C`` (ties: stay, then lowest index), so ``J_C`` never
    increases and the descent stops at a point where no single move lowers it. Serial, O(N K D) per pass.

    Parameters
    ----------
    lam : float, default 1.0
        Penalty per cluster in squared-distance units (``lam = λ²`` of [MB]); ``lam >= 0``.
    init : {"mean", "empty"}, default "mean"
        Start with every row in one cluster, or with no cluster (the first pass seats the rows one by one).
    max_iter : int, default 100
        Maximum number of passes.
    shuffle : bool, default True
        Visit the rows in a random permutation drawn from ``random_state``; False uses the row order.
    random_state : int, Generator or None
        Fixes the processing order (and so the result).
    max_samples : int, default 100000
        Largest number of rows accepted (the data are computed into memory).
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`: the state after every pass (the labels, the processing order and the
        history) is saved atomically; an interrupted fit resumes at the next pass with the identical result, and
        a finished fit's checkpoint holds the model (a rerun returns it at once).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters_, n_features)
        Means of the clusters, numbered in creation order.
    labels_ : ndarray (n_samples,) int64
    cluster_sizes_ : ndarray (n_clusters_,) int64
    n_clusters_ : int
    objective_ : float
        ``J_C = SSE + lam * n_clusters_`` at the end (the [KJ] offset; [MB] charges ``lam`` less).
    objective_history_ : list of float
        ``J_C`` after every pass (non-increasing).
    n_iter_ : int
    converged_ : bool
    order_ : ndarray (n_samples,) int64
        The processing order used.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster._collapsed import CollapsedDPMeans
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> m = CollapsedDPMeans(lam=4.0, random_state=0).fit(X)
    >>> m.n_clusters_, m.objective_
    (2, 9.0)
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "left")],
        "init": [Options(("mean", "empty"))],
        "max_iter": [Interval("int", 1, None)],
        "shuffle": [Options((True, False))],
        **MEMORY_PARAMETERS,
    }
    _cost_note = "a serial in-memory descent, O(N K D) per pass"

    def __init__(
        self, *, lam: float = 1.0, init: DPMeansInit = "mean", max_iter: int = 100, shuffle: bool = True,
        random_state: SeedLike = None, max_samples: int = 100_000, checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.init, self.max_iter, self.shuffle = lam, init, max_iter, shuffle
        self.random_state, self.max_samples, self.checkpoint = random_state, max_samples, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "CollapsedDPMeans":
        """Cluster ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        return _fit_serial(self, X, _CollapsedPasses, self._store)

    def _store(self, run: LoopResult, X: npt.NDArray[np.float64]) -> tuple[LoopResult, int]:
        labels = run.state["labels"]
        k = int(labels.max()) + 1
        counts, sums = K.collapsed_stats(X, labels, k)
        self.cluster_centers_ = sums / counts[:, None]
        self.labels_ = labels
        self.cluster_sizes_ = counts
        self.n_clusters_ = k
        return run, k


@register
class CappedDPMeans(CentroidMixin, _InMemory):
    """Capped DP-means ([MB] eq. 12, docs/algorithms.md 1.5): serial DP-means that never opens more than
    ``max_clusters`` clusters.

    Each pass visits the rows in a seeded order (reused in every pass) against fixed centres: a row farther than
    ``lam`` from every centre opens a new cluster at itself while fewer than ``max_clusters`` exist, otherwise it
    joins its nearest centre (lowest index on ties). Then empty clusters are deleted (creation order kept) and the
    centres move to the means. With ``max_clusters=None`` this is serial DP-means (1.2) in memory.

    Parameters
    ----------
    lam : float, default 1.0
        Penalty per cluster in squared-distance units; ``lam >= 0``.
    max_clusters : int or None, default None
        The cap ``K_max`` (None: no cap).
    init : {"mean", "empty"}, default "mean"
        Start from one cluster at the mean of X, or from no cluster.
    max_iter : int, default 100
    shuffle : bool, default True
        Visit the rows in a random permutation drawn from ``random_state``; False uses the row order.
    random_state : int, Generator or None
    max_samples : int, default 100000
        Largest number of rows accepted (the data are computed into memory).
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`: the state after every pass (the labels and centres, the processing
        order and the history) is saved atomically; an interrupted fit resumes at the next pass with the identical
        result, and a finished fit's checkpoint holds the model (a rerun returns it at once).

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters_, n_features)
    labels_ : ndarray (n_samples,) int64
    n_clusters_ : int
    objective_ : float
        ``SSE + lam * n_clusters_`` at the end (the [KJ] offset; as ``n_clusters_ <= max_clusters``, this is
        [MB] eq. 12 plus ``lam``).
    objective_history_ : list of float
        The objective after each pass's mean update (non-increasing).
    n_iter_ : int
    converged_ : bool
    order_ : ndarray (n_samples,) int64
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster._collapsed import CappedDPMeans
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0], [20.0, 0.0]])
    >>> CappedDPMeans(lam=4.0, max_clusters=2, random_state=0).fit(X).n_clusters_
    2
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "left")],
        "max_clusters": [Interval("int", 1, None), Options((None,))],
        "init": [Options(("mean", "empty"))],
        "max_iter": [Interval("int", 1, None)],
        "shuffle": [Options((True, False))],
        **MEMORY_PARAMETERS,
    }
    _cost_note = "a serial in-memory algorithm, O(N K D) per pass"

    def __init__(
        self, *, lam: float = 1.0, max_clusters: int | None = None, init: DPMeansInit = "mean", max_iter: int = 100,
        shuffle: bool = True, random_state: SeedLike = None, max_samples: int = 100_000,
        checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.max_clusters, self.init, self.max_iter = lam, max_clusters, init, max_iter
        self.shuffle, self.random_state, self.max_samples = shuffle, random_state, max_samples
        self.checkpoint = checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "CappedDPMeans":
        """Cluster ``X`` into at most ``max_clusters`` clusters (numpy, dask, zarr or xarray)."""
        return _fit_serial(self, X, _CappedPasses, self._store)

    def _store(self, run: LoopResult, X: npt.NDArray[np.float64]) -> tuple[LoopResult, int]:
        self.cluster_centers_ = run.state["centres"]
        self.labels_ = run.state["labels"]
        self.n_clusters_ = int(self.cluster_centers_.shape[0])
        return run, self.n_clusters_


@register
class CollapsedBPMeans(FeatureMixin, _InMemory):
    """Collapsed BP-means ([MB] eq. 10, docs/algorithms.md 2.3): BP-means with the features integrated out.

    Minimises ``J_CBP(Z) = ||X||^2 - tr(B' pinv(G) B) + lam * K`` over binary ``Z`` (``G = Z'Z``, ``B = Z'X``):
    the features are always the least-squares ``A = pinv(G) B`` (E-MB1, E-MB2). Every row, in a seeded order
    reused in every pass, flips each of its bits iff that strictly lowers ``J_CBP`` (``G`` and ``B`` change by a
    rank-one term and ``J_CBP`` is re-solved, K being small); then empty and duplicate features are deleted, and
    the singleton feature ``{n}`` is opened iff that strictly lowers ``J_CBP``. ``J_CBP`` never increases, and
    at convergence no single bit flip or singleton opening lowers it.

    In memory and serial: every candidate move re-solves a K x K system, ``O(N K (K^3 + K^2 D))`` per pass, so
    the data are computed into memory and more than ``max_samples`` rows raise a clear error (use
    :class:`~dclust.cluster.BPMeans` for large data).

    Parameters
    ----------
    lam : float, default 1.0
        Penalty per feature in squared-distance units; ``lam >= 0``.
    max_iter : int, default 100
        Maximum number of passes.
    shuffle : bool, default True
        Visit the rows in a random permutation drawn from ``random_state``; False uses the row order.
    n_init : int, default 1
        Restarts, each from the empty allocation with its own processing order (the first is the order of a single
        fit; the others come from independent streams spawned from ``random_state``); the lowest ``J_CBP`` is kept.
        The descent is greedy, and one order can stop far above the generating model's objective (measured on the
        tabletop-style generator: one of three seeds at 1.58x), so [MB] restarts it. ``n_init > 1`` needs
        ``shuffle=True`` and no ``checkpoint``.
    random_state : int, Generator or None
    max_samples : int, default 5000
        Largest number of rows accepted.
    checkpoint : str or os.PathLike, optional
        As in :class:`~dclust.cluster.KMeans`: the state after every pass (the allocation Z, the processing order and
        the history) is saved atomically; an interrupted fit resumes at the next pass with the identical result, and
        a finished fit's checkpoint holds the model (a rerun returns it at once).

    Attributes
    ----------
    features_ : ndarray (n_latent_features_, n_features_in_), ``pinv(G) B``
    n_latent_features_ : int
    allocation_ : ndarray (n_samples, n_latent_features_) uint8
    objective_ : float, ``J_CBP`` at the end
    objective_history_ : list of float, ``J_CBP`` after every pass (non-increasing)
    n_iter_, converged_, order_, n_features_in_

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.cluster._collapsed import CollapsedBPMeans
    >>> Z = np.array([[1, 0], [0, 1], [1, 1]] * 4)
    >>> X = Z @ np.array([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    >>> m = CollapsedBPMeans(lam=1.0, shuffle=False).fit(X)
    >>> m.n_latent_features_, bool(np.allclose(m.allocation_ @ m.features_, X))
    (2, True)
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "left")],
        "max_iter": [Interval("int", 1, None)],
        "shuffle": [Options((True, False))],
        "n_init": [Interval("int", 1, None)],
        **MEMORY_PARAMETERS,
    }
    _cost_note = "a serial in-memory descent that re-solves a K x K system per candidate move"

    def __init__(
        self, *, lam: float = 1.0, max_iter: int = 100, shuffle: bool = True, n_init: int = 1,
        random_state: SeedLike = None, max_samples: int = 5000, checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.max_iter, self.shuffle, self.n_init = lam, max_iter, shuffle, n_init
        self.random_state, self.max_samples, self.checkpoint = random_state, max_samples, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "CollapsedBPMeans":
        """Learn a binary feature allocation of ``X`` (numpy, dask, zarr or xarray)."""
        self._validate_params()
        if self.n_init > 1 and (self.checkpoint is not None or not self.shuffle):
            raise InvalidParameterError(
                message("CollapsedBPMeans(n_init=...)", "n_init=1 with checkpoint= or shuffle=False",
                        f"n_init={self.n_init}, shuffle={self.shuffle}, checkpoint={self.checkpoint!r}",
                        "Use n_init=1, or shuffle=True without a checkpoint (restarts differ by their order).")
            )
        return _fit_serial(self, X, _CollapsedBPPasses, self._store)

    def _store(self, run: LoopResult, X: npt.NDArray[np.float64]) -> tuple[LoopResult, int]:
        for order in _restart_orders(X.shape[0], self.random_state, self.n_init):  # restarts: other orders
            other = fit_loop(_CollapsedBPPasses(self, X, order), max_iter=self.max_iter, ck=NoCheckpoint(),
                             resume=None, warn=True)
            if other.state["history"][-1] < run.state["history"][-1]:
                run = other
        Z = run.state["Z"]
        Zf = Z.astype(np.float64)
        self.features_ = feature_means(Zf.T @ Zf, Zf.T @ X)
        self.n_latent_features_ = int(Z.shape[1])
        self.allocation_ = Z
        return run, self.n_latent_features_
