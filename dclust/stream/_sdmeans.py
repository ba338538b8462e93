"""SD-Means: Spectral Dynamic Means ([DM] sections 5 and 6; docs/algorithms.md section 4)."""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal

import dask.array as da
import numpy as np
from scipy.linalg import eigvalsh

from .._dask.gram import pairwise_matrix
from .._dask.passes import compute
from .._fit import ProgressEvent, emit
from .._registry import register
from .._validation import (
    CALLABLE, SEED, Interval, Options, check_array, temporal_rates, validate_params,
)
from ..cluster._base import CHECKPOINT, BaseEstimator
from ..errors import DclustError, InvalidDataError, InvalidParameterError, NotFittedError, message
from ..kernels import sdmeans as K
from ._checkpoint import fingerprint_of, resume_state, save_state
from ._dynamic import fit_time_steps, nonfinite_row_error
from ._sdstate import OldClusters
from ..typing import CheckpointLike, SeedLike

if TYPE_CHECKING:
    from .._store._checkpoint import Checkpointer

__all__ = ["SpectralDynamicMeans"]

_HISTORY_KEYS = ("n_clusters", "objective", "lower_bound", "births", "deaths", "revivals", "n_samples", "seconds")
_STATE_ATTRIBUTES = (
    "labels_", "cluster_ids_", "ages_", "weights_", "support_", "support_coef_", "support_size_", "objective_",
    "lower_bound_", "n_clusters_", "n_steps_", "next_id_", "seed_", "n_features_in_", "history_", "lam_", "Q_",
    "tau_",
)


@register
class SpectralDynamicMeans(BaseEstimator):
    """SD-Means: kernelised D-Means solved by a spectral relaxation, one batch (time step) at a time.

    Each batch is clustered in the feature space of a kernel: the matrix ``G`` of docs/algorithms.md 4.3 (batch Gram
    matrix plus one row per old cluster) is eigendecomposed, the eigenvectors with eigenvalue above ``lam`` are
    rotated to a partition (Yu & Shi), and the clusters are matched optimally to old clusters (Hungarian) so that
    cluster ids persist over time. Old centres are kept in feature space as sparse support sets (at most
    ``max_support`` points each).

    Parameters
    ----------
    lam : float
        Penalty for a new cluster, in kernel (Gram-eigenvalue) units (e.g. 55 for the rings of [DM]).
    T_Q, k_tau : float, optional
        The reparameterisation of [DM] eq. 30: ``T_Q > 1`` is the number of steps an unobserved cluster stays
        revivable, ``k_tau >= 1`` scales the revival radius. Give this pair or ``Q``, ``tau``.
    Q, tau : float, optional
        Revival cost per step of absence (>= 0) and motion parameter (>= 0), instead of ``T_Q``, ``k_tau``.
    kernel : {"rbf", "linear", "mst", "mst-rss"} or callable, default "rbf"
        ``"rbf"``: ``exp(-||a-b||^2 / (2 bandwidth^2))``; ``"linear"``: ``a.b`` (then SD-Means finds at most
        ``n_features + K_old`` clusters, docs/algorithms.md 4.5); ``"mst"``: the MST-path kernel of [DM] 8.2, on the
        tree of the batch (support points of old centres are attached to their nearest batch point, as in the
        authors' program), with the path length the sum of the edges longer than omega (docs/algorithms.md E-DM8);
        ``"mst-rss"``: the same with the root of the sum of their squares, as the authors' program computes it
        (it reproduces [DM] 8.2 best, see docs/reproduction.md); or a callable ``f(A, B) -> (len(A), len(B))``
        symmetric kernel. For the MST kernels, which change with every batch's tree, the support points of old
        centres are selected in the RBF space of the same bandwidth (see ``support_space``).
    bandwidth : float, optional
        omega of the ``"rbf"``, ``"mst"`` and ``"mst-rss"`` kernels (required for them, not accepted for the others).
    n_restarts : int, default 1
        Rotations started from different random rows; the partition with the lowest exact cost (eq. 32) is kept.
    max_iter : int, default 100
        Cap on the rotation iterations per restart.
    max_support : int, default 50
        Budget m of support points per old centre (docs/algorithms.md 4.2).
    support_space : {"auto", "kernel"}, default "auto"
        Feature space in which the support of an old centre is chosen (the sparse fit of eq. 36). ``"kernel"``: the
        kernel's own, for the MST kernels the tree of the batch just clustered, as the authors' program does (there a
        whole ring is one light component, so the fit keeps a single point per ring). ``"auto"``: the kernel's own,
        except for the MST kernels, whose support is chosen in the RBF space of the same bandwidth so that it stays
        spread over the cluster (it tracks the rings of [DM] 8.2 far better, docs/reproduction.md). The
        coefficients are refitted in that space too; the centre is then used with the batch's kernel as always.
    max_batch : int, default 5000
        Largest Gram matrix side (batch rows + support points) accepted; larger batches raise
        :class:`~dclust.errors.InvalidDataError` naming the memory needed.
    random_state : int, numpy.random.Generator or None
        Seeds the restarts. The generator of step t is derived from ``seed_`` and t, so a stream resumed from
        :func:`dclust.save` gives the same result as an uninterrupted one.
    checkpoint : str or os.PathLike, optional
        A directory where the whole state is saved atomically after every batch (Zarr + JSON, no pickle). An
        estimator without state restores it at its first ``partial_fit`` (which then processes the batch after
        the checkpoint's ``n_steps_``); ``fit`` restores it and skips the batches already done, so a rerun after
        a crash ends with the identical model. A callable ``kernel`` cannot be checkpointed.

    Attributes
    ----------
    labels_ : ndarray (n_t,) int64
        Persistent cluster ids of the last batch's points.
    cluster_ids_ : ndarray (K,) int64
        Ids of the clusters kept in the state (revivable), in state order.
    ages_ : ndarray (K,) int64
        Steps since each cluster last had data (1 = it had data in the last batch).
    weights_ : ndarray (K,) float64
        Weight ``w`` of each cluster (an inverse variance in units of sigma).
    support_, support_coef_, support_size_ : ndarray (K, M, D), (K, M), (K,)
        Centre k in feature space is ``sum_j support_coef_[k, j] omega(support_[k, j])`` for
        ``j < support_size_[k]`` (padded with zeros).
    objective_, lower_bound_ : float
        Exact cost (eq. 32) and spectral lower bound of the last batch.
    n_clusters_ : int
        Number of clusters in the state.
    n_steps_ : int
        Batches processed.
    history_ : dict of lists
        Per batch (the keys of :class:`DynamicMeans` plus ``lower_bound``): ``n_clusters`` (clusters with data in
        the batch), ``objective`` (eq. 32), ``lower_bound``, ``births``, ``deaths`` (clusters deleted because
        ``Q * age > lam``), ``revivals`` (old clusters absent at the previous step that got data), ``n_samples``,
        ``seconds``.
    lam_, Q_, tau_ : float
        The parameters used.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> centres = 10 * np.eye(3)
    >>> sd = SpectralDynamicMeans(lam=10.0, T_Q=5, k_tau=1.5, kernel="linear", random_state=0)
    >>> for t in range(3):
    ...     y = np.repeat(np.arange(3), 20)
    ...     _ = sd.partial_fit(centres[y] + 0.1 * rng.standard_normal((60, 3)))
    >>> sd.cluster_ids_.tolist(), len(np.unique(sd.labels_))
    ([0, 1, 2], 3)
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "neither"), Options((None,))],
        "T_Q": [Interval("real", 1, None, "neither"), Options((None,))],
        "k_tau": [Interval("real", 1, None, "left"), Options((None,))],
        "Q": [Interval("real", 0, None, "left"), Options((None,))],
        "tau": [Interval("real", 0, None, "left"), Options((None,))],
        "kernel": [Options(("rbf", "linear", "mst", "mst-rss")), CALLABLE],
        "bandwidth": [Interval("real", 0, None, "neither"), Options((None,))],
        "n_restarts": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "max_support": [Interval("int", 1, None)],
        "support_space": [Options(("auto", "kernel"))],
        "max_batch": [Interval("int", 1, None)],
        "random_state": [SEED],
        "checkpoint": [CHECKPOINT],
    }

    # learned attributes (_STATE_ATTRIBUTES)
    labels_: np.ndarray
    cluster_ids_: np.ndarray
    ages_: np.ndarray
    weights_: np.ndarray
    support_: np.ndarray
    support_coef_: np.ndarray
    support_size_: np.ndarray
    objective_: float
    lower_bound_: float
    n_clusters_: int
    n_steps_: int
    next_id_: int
    seed_: int
    n_features_in_: int
    history_: dict[str, list[Any]]
    lam_: float
    Q_: float
    tau_: float
    _ck_fp: dict[str, Any] | None

    def __init__(
        self, *, lam: float | None = None, T_Q: float | None = None, k_tau: float | None = None, Q: float | None = None,
        tau: float | None = None, kernel: Literal["rbf", "linear", "mst", "mst-rss"] | Callable[..., Any] = "rbf",
        bandwidth: float | None = None, n_restarts: int = 1, max_iter: int = 100, max_support: int = 50,
        support_space: Literal["auto", "kernel"] = "auto", max_batch: int = 5000, random_state: SeedLike = None,
        checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.T_Q, self.k_tau, self.Q, self.tau, self.kernel = lam, T_Q, k_tau, Q, tau, kernel
        self.bandwidth, self.n_restarts, self.max_iter = bandwidth, n_restarts, max_iter
        self.max_support, self.support_space = max_support, support_space
        self.max_batch, self.random_state = max_batch, random_state
        self.checkpoint = checkpoint

    # ----------------------------------------------------------------------------------------------------------
    # parameters
    # ----------------------------------------------------------------------------------------------------------

    def _resolve_params(self) -> tuple[float, float, float]:
        validate_params(self)
        name = type(self).__name__
        if self.lam is None:
            raise InvalidParameterError(
                message(f"{name}(lam=...)", "a penalty lam > 0 (kernel units)", "None",
                        f"Pass lam, e.g. {name}(lam=55)."))
        lam = float(self.lam)
        rates = temporal_rates(name, lam, self.T_Q, self.k_tau, self.Q, self.tau)  # checks the pair first
        needs_bw = isinstance(self.kernel, str) and self.kernel in ("rbf", "mst", "mst-rss")
        if needs_bw != (self.bandwidth is not None):
            kname = self.kernel if isinstance(self.kernel, str) else "a callable"
            raise InvalidParameterError(
                message(f"{name}(bandwidth=...)",
                        "a bandwidth > 0 with kernel 'rbf' or 'mst', and none with other kernels",
                        f"bandwidth={self.bandwidth!r} with kernel {kname!r}",
                        "Pass bandwidth=omega for 'rbf'/'mst' (e.g. 0.07 for the rings), and leave it None otherwise."))
        return (lam, *rates)

    # ----------------------------------------------------------------------------------------------------------
    # kernel
    # ----------------------------------------------------------------------------------------------------------

    def _gram(self, P: np.ndarray, n_data: int) -> np.ndarray:
        """Kernel matrix of the point set P (rows), (n, n), built blockwise with dask.

        The first ``n_data`` rows are the batch (the MST kernel builds its tree on them; support points of old
        centres are attached to their nearest batch point).
        """
        n = P.shape[0]
        if self.kernel == "linear":
            return pairwise_matrix(P, K.linear_kernel)
        if self.kernel == "rbf":
            assert self.bandwidth is not None  # _resolve_params: rbf and mst kernels have a bandwidth
            return pairwise_matrix(P, partial(K.rbf_kernel, bandwidth=float(self.bandwidth)))
        if self.kernel in ("mst", "mst-rss"):
            combine = "rss" if self.kernel == "mst-rss" else "sum"
            assert self.bandwidth is not None  # _resolve_params: rbf and mst kernels have a bandwidth
            return K.mst_kernel(pairwise_matrix(P, K.squared_distances), float(self.bandwidth), n_data, combine)
        assert callable(self.kernel)  # validate_params: the named kernels are handled above
        G = pairwise_matrix(P, _checked_callable(self.kernel))
        if G.shape != (n, n) or not np.isfinite(G).all():
            raise InvalidParameterError(
                message(f"{type(self).__name__}(kernel=callable)", f"a finite ({n}, {n}) matrix from kernel(P, P)",
                        f"shape {G.shape} (finite: {bool(np.isfinite(G).all())})",
                        "Return kernel(A, B) of shape (len(A), len(B)) with finite values."))
        return G

    # ----------------------------------------------------------------------------------------------------------
    # input
    # ----------------------------------------------------------------------------------------------------------

    def _check_batch(self, batch: Any, what: str, state: OldClusters | None) -> np.ndarray:
        n_features = getattr(self, "n_features_in_", None)
        arr, _ = check_array(batch, name=what, n_features=n_features, min_samples=0)
        n_support = 0 if state is None else int(state.size.sum())
        side = arr.shape[0] + n_support
        if side > self.max_batch:
            gib = side * side * 8 / 2**30
            raise InvalidDataError(
                message(f"{what} ({arr.shape[0]} rows, plus {n_support} support points of the old centres)",
                        f"a Gram matrix side of at most max_batch={self.max_batch}",
                        f"a side of {side}: its dense float64 Gram matrix alone needs {side}^2 x 8 bytes = "
                        f"{gib:.2f} GiB (and the eigendecomposition costs O(side^3))",
                        "Split the stream into smaller batches (e.g. X.rechunk({0: 2000})), or raise max_batch "
                        "if the memory is available."))
        Y = np.asarray(compute(arr)[0] if isinstance(arr, da.Array) else arr, dtype=np.float64)
        bad = ~np.isfinite(Y).all(axis=1)
        if bad.any():
            raise nonfinite_row_error(what, int(np.flatnonzero(bad)[0]),
                                      "Drop or impute those rows before passing the batch.")
        return Y

    def _state(self) -> OldClusters:
        return OldClusters(self.cluster_ids_, self.weights_, self.ages_, self.support_, self.support_coef_,
                           self.support_size_)

    def _start(self, n_features: int) -> None:
        if isinstance(self.random_state, np.random.Generator):
            seed = int(self.random_state.integers(2**63))
        elif self.random_state is None:
            seed = int(np.random.SeedSequence().entropy % 2**63)  # type: ignore[operator]  # an int: drawn from the OS
        else:
            seed = int(self.random_state)
        self.seed_ = seed
        self.n_features_in_ = int(n_features)
        self.n_steps_ = 0
        self.next_id_ = 0
        self.history_ = {k: [] for k in _HISTORY_KEYS}
        self._set_state(OldClusters.empty(n_features))

    def _set_state(self, s: OldClusters) -> None:
        self.cluster_ids_, self.weights_, self.ages_ = s.ids, s.weights, s.ages
        self.support_, self.support_coef_, self.support_size_ = s.support, s.coef, s.size
        self.n_clusters_ = s.n_clusters

    # ----------------------------------------------------------------------------------------------------------
    # public API
    # ----------------------------------------------------------------------------------------------------------

    def partial_fit(self, batch: Any, y: Any = None) -> "SpectralDynamicMeans":
        """Process one time step.

        Parameters
        ----------
        batch : array-like (n_t, n_features)
            numpy, dask, zarr or xarray; gathered on the driver (it must fit ``max_batch``). An empty batch is
            allowed: every cluster ages by one step and the deletion rule runs.
        y : ignored
            Present for API compatibility.

        Returns
        -------
        self
        """
        lam, Q, tau = self._resolve_params()
        if self.checkpoint is not None and not hasattr(self, "n_steps_"):
            resume_state(self, getattr(self, "_ck_fp", None))
        fitted = hasattr(self, "n_steps_")
        Y = self._check_batch(batch, "batch", self._state() if fitted else None)
        if not fitted:
            self._start(Y.shape[1])
        self.lam_, self.Q_, self.tau_ = lam, Q, tau
        watch = time.perf_counter()
        t = self.n_steps_
        rng = np.random.default_rng(np.random.SeedSequence(self.seed_, spawn_key=(t,)))
        old = self._state()
        N, Kold = Y.shape[0], old.n_clusters
        gamma = 1.0 / (1.0 / old.weights + tau * old.ages) if Kold else np.zeros(0)
        penalty = Q * old.ages.astype(np.float64)
        U, _ = old.points()
        P = np.vstack([Y, U])
        Gp = self._gram(P, N)
        kyy = Gp[:N, :N]
        kyphi, kphiphi = old.feature_products(Gp[:N, N:], Gp[N:, N:])
        labels, linked, J, lb = self._partition(rng, kyy, kyphi, kphiphi, gamma, penalty, lam)
        new_state, point_ids, counts = self._carry_over(old, P, Gp, labels, linked, gamma, N, Q, lam)
        self._set_state(new_state)
        self.labels_ = point_ids
        self.objective_, self.lower_bound_ = float(J), float(lb)
        self.n_steps_ = t + 1
        seconds = time.perf_counter() - watch
        rec = dict(n_clusters=len(linked), objective=float(J), lower_bound=float(lb), n_samples=N, seconds=seconds,
                   **counts)
        for k in _HISTORY_KEYS:
            self.history_[k].append(rec[k])
        save_state(self, getattr(self, "_ck_fp", None))
        emit(ProgressEvent(type(self).__name__, "iter", self.n_steps_, float(J), len(linked), seconds, counts))
        return self

    def fit(self, batches: Any, y: Any = None) -> "SpectralDynamicMeans":
        """Forget any state, then :meth:`partial_fit` every batch in order.

        Parameters
        ----------
        batches : iterable of array-like, or a dask array
            One (n_t, n_features) array per time step. A 2-D dask array is split along its row chunks, one chunk
            per time step; a 2-D numpy array is a single time step.

        Returns
        -------
        self
        """
        self._resolve_params()
        for name in _STATE_ATTRIBUTES:
            self.__dict__.pop(name, None)
        fp, arr = None, None
        single = isinstance(batches, np.ndarray) and batches.ndim == 2
        if isinstance(batches, da.Array) and batches.ndim == 2:
            arr = batches
            fp = fingerprint_of(self, arr)
            batches = (arr.blocks[i] for i in range(arr.numblocks[0]))
        elif single:
            batches = [batches]
        elif not isinstance(batches, Iterable) or isinstance(batches, (str, bytes)):
            raise InvalidDataError(
                message("fit(batches)", "an iterable of (n_t, n_features) arrays or a row-chunked dask array",
                        f"a {type(batches).__name__}", "Pass a list (or generator) of batches."))
        fit_time_steps(self, batches, lambda batch, _: self.partial_fit(batch), fp=fp, n_done="n_steps_", arr=arr,
                       single=single)
        return self

    def _check_restored(self, ck: Checkpointer) -> None:
        """Shapes of a state restored from a checkpoint (see :mod:`dclust.stream._checkpoint`)."""
        d = int(self.n_features_in_)
        k = ck.require_shape("cluster_ids_", self.cluster_ids_, (None,)).shape[0]
        for name in ("weights_", "ages_", "support_size_"):
            ck.require_shape(name, getattr(self, name), (k,))
        m = ck.require_shape("support_coef_", self.support_coef_, (k, None)).shape[1]
        ck.require_shape("support_", self.support_, (k, m, d))
        if set(self.history_) != set(_HISTORY_KEYS) or int(self.n_steps_) != len(self.history_["n_samples"]):
            raise ValueError(f"a history of {self.n_steps_} batches with the keys {sorted(_HISTORY_KEYS)}")

    def predict(self, X: Any) -> np.ndarray:
        """Id of the nearest feature-space centre (of the clusters in the state) for every row of X.

        The squared feature-space distance is ``k(x, x) - 2 k(x, phi_k) + phi_k.phi_k``; ties go to the first
        cluster in state order.

        Returns
        -------
        ndarray (n_samples,) int64
        """
        if not hasattr(self, "n_steps_"):
            raise NotFittedError(
                message(f"{type(self).__name__}.predict", "a fitted model", "one that has seen no batch",
                        "Call partial_fit(batch) or fit(batches) first."))
        self._resolve_params()
        old = self._state()
        if old.n_clusters == 0:
            raise DclustError(
                message(f"{type(self).__name__}.predict", "a model with at least one cluster in its state",
                        "a model with none (every cluster was deleted, or only empty batches were seen)",
                        "Process a non-empty batch first."))
        Y = self._check_batch(X, "X", old)
        N = Y.shape[0]
        if N == 0:
            return np.zeros(0, np.int64)
        U, _ = old.points()
        Gp = self._gram(np.vstack([Y, U]), N)
        kyphi, kphiphi = old.feature_products(Gp[:N, N:], Gp[N:, N:])
        d = np.diag(Gp)[:N, None] - 2.0 * kyphi + kphiphi[None, :]
        ids: np.ndarray = old.ids[np.argmin(d, axis=1)].astype(np.int64)
        return ids

    # ----------------------------------------------------------------------------------------------------------
    # one step
    # ----------------------------------------------------------------------------------------------------------

    def _partition(self, rng: np.random.Generator, kyy: np.ndarray, kyphi: np.ndarray, kphiphi: np.ndarray,
                   gamma: np.ndarray, penalty: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(labels in [0, L), linked (L,), exact cost eq. 32, spectral lower bound) of one batch."""
        N, Kold = kyphi.shape
        const = K.relaxation_constant(float(np.trace(kyy)), kphiphi, gamma, penalty, lam)
        G = K.build_G(kyy, kyphi, kphiphi, gamma, penalty)
        if N == 0:
            lb = K.lower_bound(eigvalsh(G) if Kold else np.zeros(0), lam, const)
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 0.0, lb
        Vbar, sigma = K.spectral_embedding(G, N, lam)
        return (*self._best_partition(Vbar, rng, kyy, kyphi, kphiphi, gamma, penalty, lam),
                K.lower_bound(sigma, lam, const))

    def _best_partition(self, Vbar: np.ndarray, rng: np.random.Generator, kyy: np.ndarray, kyphi: np.ndarray,
                        kphiphi: np.ndarray, gamma: np.ndarray, penalty: np.ndarray, lam: float
                        ) -> tuple[np.ndarray, np.ndarray, float]:
        """(labels in [0, L), linked (L,), exact cost) of the best restart."""
        best = None
        for _ in range(self.n_restarts):
            first = int(rng.integers(Vbar.shape[0]))
            raw, _ = K.discretize(Vbar, first, self.max_iter)
            _, labels = np.unique(raw, return_inverse=True)  # drop empty columns
            L = int(labels.max()) + 1
            cost = K.matching_costs(labels, L, kyy, kyphi, kphiphi, gamma, penalty, lam)
            linked = K.match_clusters(cost)
            J = K.exact_cost(labels, linked, kyy, kyphi, kphiphi, gamma, penalty, lam)
            if best is None or J < best[2]:
                best = (labels.astype(np.int64), linked, J)
        assert best is not None  # n_restarts >= 1
        return best

    def _support_gram(self, V: np.ndarray, gram: np.ndarray) -> np.ndarray:
        """Gram matrix that the support selection (eq. 36) approximates the old centre in.

        The MST kernels depend on the batch's tree, which is rebuilt at every step: in this batch's tree a whole
        ring is one light component (kernel 1 between all its points), so an exact sparse fit keeps a single point,
        and in the next batch's tree that one point may attach to another ring. For them the support is chosen in
        the RBF feature space of the same bandwidth, a fixed kernel under which the fit keeps points spread over
        the cluster (so the old centre stays an average over its shape). ``support_space="kernel"`` keeps the
        batch's own Gram matrix, as the authors' program does.
        """
        if self.support_space == "auto" and self.kernel in ("mst", "mst-rss"):
            assert self.bandwidth is not None  # _resolve_params: rbf and mst kernels have a bandwidth
            return K.rbf_kernel(V, V, float(self.bandwidth))
        return gram

    def _carry_over(self, old: OldClusters, P: np.ndarray, Gp: np.ndarray, labels: np.ndarray, linked: np.ndarray,
                    gamma: np.ndarray, N: int, Q: float, lam: float) -> tuple[OldClusters, np.ndarray, dict[str, int]]:
        """Eq. 24 with the feature-space centres of 4.2, then deletion; returns (state, point ids, counts)."""
        offsets = old.offsets()
        coef_flat = old.flat_coef()
        ids = list(old.ids)
        weights = list(old.weights)
        ages = list(old.ages + 1)
        U_old = [P[N + offsets[k]:N + offsets[k + 1]] for k in range(old.n_clusters)]
        supports: list[Any] = list(U_old)  # (None marks a new cluster's slot until it is filled below)
        coefs: list[Any] = [coef_flat[offsets[k]:offsets[k + 1]] for k in range(old.n_clusters)]
        point_ids = np.empty(N, np.int64)
        births = revivals = 0
        next_id = int(self.next_id_)
        for l, k in enumerate(linked):
            idx = np.flatnonzero(labels == l)
            n = idx.size
            if k >= 0:
                g, a_old = gamma[k], coefs[k]
                v_idx = np.concatenate([np.arange(N + offsets[k], N + offsets[k + 1]), idx])
                revivals += int(old.ages[k] > 1)
                slot = int(k)
            else:
                g, a_old = 0.0, np.zeros(0)
                v_idx = idx
                births += 1
                ids.append(next_id)
                next_id += 1
                weights.append(0.0)
                ages.append(0)
                supports.append(None)
                coefs.append(None)
                slot = len(ids) - 1
            abar = np.concatenate([g / (g + n) * a_old, np.full(n, 1.0 / (g + n))])
            if self.kernel == "linear":  # the centre is explicit: one support point, the centre itself
                supports[slot], coefs[slot] = (abar @ P[v_idx])[None, :], np.ones(1)
            else:
                keep, a = K.sparsify(self._support_gram(P[v_idx], Gp[np.ix_(v_idx, v_idx)]), abar,
                                     int(self.max_support))
                supports[slot], coefs[slot] = P[v_idx[keep]], a
            weights[slot], ages[slot] = g + n, 1
            point_ids[idx] = ids[slot]
        self.next_id_ = next_id
        alive = [i for i in range(len(ids)) if not Q * ages[i] > lam]
        deaths = len(ids) - len(alive)
        state = OldClusters.from_lists([ids[i] for i in alive], [weights[i] for i in alive],
                                       [ages[i] for i in alive], [supports[i] for i in alive],
                                       [coefs[i] for i in alive], P.shape[1])
        return state, point_ids, dict(births=births, deaths=deaths, revivals=revivals)


def _checked_callable(fn: Callable[..., Any]) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def call(A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return np.asarray(fn(A, B), dtype=np.float64)

    return call
