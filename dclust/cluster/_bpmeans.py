"""BP-means on Dask (docs/algorithms.md 2.2 and 8.3): latent binary features learned with a penalty per feature,
features opened with optimistic concurrency control."""

from __future__ import annotations

import warnings

import numpy as np

from .._dask.passes import persist_if_fits
from .._dask.features import FeatureOverflow, Gram, greedy_init, init_bits, select_bits, transform_bits
from .._fit import ProgressEvent, Stopwatch, emit, logger
from .._dask.occ import BPRule, KeyedPass, keyed_pass, keyed_records_from, keyed_records_state, patch_bits
from .._registry import register
from .._validation import SEED, Interval, Options, as_generator, check_array
from ..errors import ConvergenceWarning
from ..kernels.distances import seed_mix
from ..kernels.bpmeans import (
    collapsed_objective,
    feature_means,
    gram_partial,
    prune_features,
    sample_restarts,
    serial_sweep,
    sweep_rows,
)
from ..kernels.kfeatures import greedy_rows
from ._base import CHECKPOINT, BaseEstimator, wrap_output
from ._features import FeatureMixin, first_pass, overflow_error

__all__ = ["BPMeans"]


def _swept(rows: np.ndarray, A: np.ndarray) -> np.ndarray:
    """Bits of in-memory rows swept from zero over ``A`` until stable (what :func:`transform_bits` gives)."""
    Z = np.zeros((rows.shape[0], A.shape[0]), np.uint8)
    if A.shape[0]:
        sweep_rows(rows, Z, A, repeat=True)
    return Z


def _pad_gram(g: Gram, k: int) -> Gram:
    return Gram.merge_all([g, Gram(np.zeros((k, k)), np.zeros((k, g.B.shape[1])))])


@register
class BPMeans(FeatureMixin, BaseEstimator):
    """BP-means (Broderick, Kulis & Jordan 2013): a binary feature allocation learned with a penalty per feature.

    Minimises ``||X - Z A||_F^2 + lam * K`` over binary ``Z`` (n_samples x K) and features ``A`` (K x D). Each
    pass sweeps every row's bits coordinate-wise and opens the row's residual as a new feature when its squared
    norm exceeds ``lam``; then empty features are deleted, identical ones merged, and ``A = pinv(Z'Z) Z'X`` is
    computed from the tree-reduced ``G = Z'Z`` and ``B = Z'X`` (docs/algorithms.md 2.2, E-MB1). Features are opened
    with optimistic concurrency control (8.3): the result equals serial BP-means on the order ``serial_order_``.

    Parameters
    ----------
    lam : float
        Penalty per feature, in squared-distance units (docs/algorithms.md section 0; [MB]'s ``lambda^2``).
    init : {"sample", "greedy", "empty"}, default "sample"
        "sample": ``n_init`` restarts of serial BP-means on the rows of the serial prefix (``prefix_size`` rows,
        already gathered by the first pass over the data, so this costs no extra pass), each followed by the
        deletion of redundant features (a feature goes when the rows using it lose less than ``lam`` of squared
        error without it) and BP-means again; the features of the restart with the lowest objective on the
        sample start the fit. This avoids the local optima where BP-means keeps "combination" features
        (``a + b`` next to ``a`` and ``-b``) that its opening rule creates from the first rows it sees. With
        ``prefix_size=0`` it is "empty".
        "greedy": the K-means++-style initialisation of docs/algorithms.md 2.6 (a base feature at the mean, then
        features drawn from the residuals of rows whose squared residual exceeds ``lam`` while the objective
        decreases; one pass per feature). "empty": K = 0.
    n_init : int, default 10
        Restarts on the sample for ``init="sample"`` (ignored otherwise).
    max_iter : int, default 100
        Maximum number of passes.
    max_features : int, default 100
        Bound on K. A ``lam`` so small that more features would be opened raises an error suggesting a larger
        ``lam``, instead of growing Z (n_samples x K bytes) until memory runs out.
    capped : bool, default False
        Capped BP-means ([MB] eq. 15, docs/algorithms.md 2.4): never more than ``max_features`` features. Once K
        reaches it, rows whose residual exceeds ``lam`` keep their swept bits instead of opening a feature (no
        error); the objective is ``||X - ZA||^2 + lam * min(K, max_features)``, which is the same number since
        K never exceeds the cap. The OCC result still equals serial capped BP-means on ``serial_order_``.
    random_state : int, Generator or None
        Fixes the processing order (a function of the seed and the global row index, as in :class:`DPMeans`: the
        model does not depend on the chunking or the number of workers) and the greedy draws.
    prefix_size : int, default 1000
        About this many rows (those of lowest order key) are processed serially on the driver at the start of
        the first pass.
    max_proposals : int, default 4096
        Target number of proposals per OCC epoch, all blocks together (as in :class:`DPMeans`).
    persist : {"auto", True, False}, default "auto"
        Keep X in (cluster) memory during the fit ("auto": when it fits).
    split_every : int, optional
        Fan-in of the tree reductions (default 8).
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: after every pass the features, the allocation Z (``n_samples x K`` bytes, a Zarr
        array), the histories, the OCC pass records and the seed are saved atomically; an interrupted fit runs
        the first pass again (it checks that the data are those of the interrupted fit) and resumes at the next
        pass with the identical result. A finished fit's checkpoint holds the model (and Z): a rerun returns it.

    Attributes
    ----------
    features_ : ndarray (n_latent_features_, n_features_in_)
        The feature means A.
    n_latent_features_ : int
        K, the number of learned features. (``n_features_in_`` is D, the number of input columns, as in
        scikit-learn.)
    allocation_ : ndarray or dask array (n_samples, n_latent_features_), uint8
        Z of the training rows (lazy for dask input; not saved by :func:`dclust.save`).
    init_features_ : ndarray
        The features the first pass started from.
    objective_ : float
        ``||X - Z A||^2 + lam * K`` at the end.
    objective_history_ : list of float
        The objective after every pass's feature update (non-increasing).
    assignment_objective_history_ : list of float
        The objective after every pass's step 1 (before pruning and the feature update).
    proposals_per_epoch_ : list of list of int
        Per pass, the number of proposals of each OCC epoch.
    n_iter_ : int
    converged_ : bool
    n_features_in_ : int
    serial_order_ : list of ndarray
        Per pass, the order on which serial BP-means gives the same result (built on demand).

    Examples
    --------
    >>> import numpy as np, dclust
    >>> A = np.array([[4.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    >>> Z = np.array([[1, 0], [0, 1], [1, 1], [1, 0], [0, 1], [1, 1]])
    >>> bp = dclust.BPMeans(lam=1.0, init="empty", random_state=0).fit(Z @ A)
    >>> bp.n_latent_features_, bool(np.allclose(bp.allocation_ @ bp.features_, Z @ A))
    (2, True)
    """

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "left")],
        "init": [Options(("sample", "greedy", "empty"))],
        "n_init": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "max_features": [Interval("int", 1, None)],
        "capped": [Options((True, False))],
        "random_state": [SEED],
        "prefix_size": [Interval("int", 0, None)],
        "max_proposals": [Interval("int", 1, None)],
        "persist": [Options(("auto", True, False))],
        "split_every": [Interval("int", 2, None), Options((None,))],
        "checkpoint": [CHECKPOINT],
    }
    _transient_attributes = ("serial_order_", "allocation_")

    def __init__(self, *, lam=1.0, init="sample", n_init=10, max_iter=100, max_features=100, capped=False,
                 random_state=None, prefix_size=1000, max_proposals=4096, persist="auto", split_every=None,
                 checkpoint=None):
        self.lam = lam
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.max_features = max_features
        self.capped = capped
        self.random_state = random_state
        self.prefix_size = prefix_size
        self.max_proposals = max_proposals
        self.persist = persist
        self.split_every = split_every
        self.checkpoint = checkpoint

    def fit(self, X, y=None) -> "BPMeans":
        """Learn features from ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        lam = float(self.lam)
        ck = self._checkpointer(arr)
        state = ck.resume()
        if state is not None and state.get("phase") == "done":
            return self._restore(ck, state, arr, info)
        resumed = None if state is None else self._unpack(ck, state, arr)
        seed = int(as_generator(self.random_state).integers(2**62)) if resumed is None else resumed["seed"]
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        watch = Stopwatch()
        prefix = first_pass(arr, split_every=self.split_every, mix=seed_mix(seed), prefix_size=self.prefix_size,
                            check_content=ck.check_content if ck.active else None)
        try:
            return self._fit(arr, info, lam, seed, prefix, watch, ck, resumed)
        except FeatureOverflow as exc:
            raise overflow_error("BPMeans", self.lam, self.max_features, exc) from None

    def _restore(self, ck, state, arr, info):
        """The model of a finished fit's checkpoint (no pass over the data)."""
        extra = ck.restore_attributes(self, state)
        with ck.reading():
            Z = extra["allocation"]
            if not hasattr(Z, "chunks") or Z.shape != (arr.shape[0], self.n_latent_features_):
                raise ValueError(f"an allocation of shape {getattr(Z, 'shape', None)}")
            self._order_records = (seed_mix(int(extra["seed"])), arr.shape[0], keyed_records_from(extra["records"]))
        self.allocation_ = wrap_output(Z, info, "allocation")
        if not self.converged_:
            warnings.warn(f"BPMeans did not converge in max_iter={self.max_iter} passes; increase max_iter.",
                          ConvergenceWarning, stacklevel=3)
        emit(ProgressEvent("BPMeans", "done", self.n_iter_, self.objective_, self.n_latent_features_, 0.0))
        return self

    def _unpack(self, ck, state, arr):
        """The loop state of a checkpoint after a pass, shapes checked."""
        n, d = arr.shape
        with ck.reading():
            first, seed = int(state["iteration"]), int(state["seed"])
            if state["phase"] != "iter" or not 0 < first < self.max_iter:
                raise ValueError(f"phase {state['phase']!r}, pass {first} (max_iter={self.max_iter})")
            A = ck.require_shape("features", state["features"], (None, d)).astype(np.float64)
            A0 = ck.require_shape("initial features", state["init_features"], (None, d)).astype(np.float64)
            Z = state["Z"]
            if (not hasattr(Z, "chunks") or Z.shape != (n, A.shape[0]) or tuple(Z.chunks[0]) != tuple(arr.chunks[0])
                    or A.shape[0] > self.max_features):
                raise ValueError(f"an allocation of shape {getattr(Z, 'shape', None)} for {A.shape[0]} features")
            out = {"first": first, "seed": seed, "A": A, "A0": A0, "Z": Z.astype(np.uint8),
                   "history": [float(v) for v in state["history"]],
                   "assign_history": [float(v) for v in state["assign_history"]],
                   "records": keyed_records_from(state["records"]),
                   "proposals": [[int(v) for v in p] for p in state["proposals"]]}
            if not all(len(out[k]) == first for k in ("history", "assign_history", "records", "proposals")):
                raise ValueError(f"histories that are not of {first} passes")
        return out

    def _fit(self, arr, info, lam, seed, prefix, watch, ck, resumed):
        n, d = arr.shape
        mean, sq_norm, p_end, p_index, p_rows = prefix
        greedy = self.init == "greedy"
        cap = self.max_features if self.capped else None
        if resumed is not None:
            resumed = {k: v for k, v in resumed.items() if k != "seed"}  # the seed of this fit
            return self._loop(arr, info, lam, seed, prefix, watch, ck, **resumed)
        if greedy:
            A, _, passes = greedy_init(arr, mean, lam=lam, n_features=None, seed=seed,
                                       max_features=self.max_features, split_every=self.split_every,
                                       capped=self.capped)
        elif self.init == "sample" and p_rows.shape[0]:
            try:
                A, _ = sample_restarts(p_rows, lam, n_init=self.n_init, seed=seed, max_features=self.max_features,
                                       cap=cap)
            except OverflowError:
                q = (p_rows * p_rows).sum(axis=1)
                raise FeatureOverflow(self.max_features + 1, float(q.max()), "initialisation sample") from None
            passes = 0
        else:
            A, passes = np.zeros((0, d)), 0
        self.init_features_ = A.copy()
        if greedy or A.shape[0] == 0:
            Z = init_bits(arr, A, greedy).persist()
        else:  # lazy: computed by the first epoch's tasks, from the same reads of X
            Z = transform_bits(arr, A)
        emit(ProgressEvent("BPMeans", "init", passes, float("nan"), A.shape[0], watch.lap(), {"lam": lam}))
        return self._loop(arr, info, lam, seed, prefix, watch, ck, first=0, A=A,
                          A0=self.init_features_, Z=Z, history=[], assign_history=[], records=[], proposals=[])

    def _loop(self, arr, info, lam, seed, prefix, watch, ck, *, first, A, A0, Z, history, assign_history, records,
              proposals):
        """The passes ``first, first + 1, ...`` of BP-means from features ``A`` and allocation ``Z``."""
        n, d = arr.shape
        _, sq_norm, p_end, p_index, p_rows = prefix
        chunks = tuple(arr.chunks[0])
        greedy = self.init == "greedy"
        mix = seed_mix(seed)
        self.init_features_ = A0
        converged = False
        for it in range(first, self.max_iter):
            start, rate, patches, pre = 0, 0.0, {}, None
            if it == 0 and p_index.size:
                Zp = greedy_rows(p_rows, A)[0] if greedy else _swept(p_rows, A)
                Zp, new, q, flips, overflow = serial_sweep(p_rows, Zp, A, lam,
                                                           max_new=max(0, self.max_features - A.shape[0]),
                                                           saturate=self.capped)
                if overflow >= 0:
                    raise FeatureOverflow(self.max_features + 1, float(np.max(q[:overflow], initial=lam)),
                                          "serial prefix")
                pre = Gram(*gram_partial(p_rows, Zp), float(q.sum()), int(flips))
                patches = patch_bits(p_index, 0, Zp, chunks)
                A = np.vstack([A, new])
                rate = new.shape[0] / p_index.size
            if it == 0:  # after the prefix, epochs sized by its opening rate (1 when it is too short to tell)
                start, rate = p_end, (rate if p_index.size >= 16 else 1.0)
            k_start = A.shape[0] - (0 if pre is None else new.shape[0])
            rule = BPRule(arr, Z, A, lam, patches=patches, max_features=self.max_features, capped=self.capped)
            epochs, _ = keyed_pass(arr, None, rule, mix=mix, start=start, rate=rate,
                                   max_proposals=self.max_proposals, split_every=self.split_every)
            Zpass, gram = rule.result()
            A_all = rule.features
            n_props = [int(ep.proposals.size) for ep in epochs]
            k_all = A_all.shape[0]
            gram = _pad_gram(Gram.merge_all([gram] + ([pre] if pre is not None else [])), k_all)
            assign_history.append(gram.sse + lam * k_all)
            keep, _ = prune_features(gram.G)
            G, B = gram.G[np.ix_(keep, keep)], gram.B[keep]
            A = feature_means(G, B)
            history.append(collapsed_objective(G, B, sq_norm, lam))
            Z = select_bits(Zpass, keep).persist()
            records.append(KeyedPass(p_end if it == 0 else 0, epochs))
            proposals.append(n_props)
            opened = k_all - k_start
            converged = gram.flips == 0 and opened == 0 and keep.size == k_all
            if ck.active and not converged and it + 1 < self.max_iter:
                ck.save({"phase": "iter", "iteration": it + 1, "seed": seed, "features": A, "init_features": A0,
                         "Z": Z, "history": history, "assign_history": assign_history,
                         "records": keyed_records_state(records), "proposals": proposals})
            emit(ProgressEvent("BPMeans", "iter", it + 1, history[-1], keep.size, watch.lap(),
                               {"epochs": len(epochs), "opened": opened, "flips": gram.flips}))
            if converged:
                break
        if not converged:
            warnings.warn(f"BPMeans did not converge in max_iter={self.max_iter} passes; increase max_iter.",
                          ConvergenceWarning, stacklevel=4)
        self.features_ = A
        self.n_latent_features_ = int(A.shape[0])
        self.allocation_ = wrap_output(Z, info, "allocation")
        self.objective_ = history[-1]
        self.objective_history_ = history
        self.assignment_objective_history_ = assign_history
        self.proposals_per_epoch_ = proposals
        self.n_iter_ = it + 1
        self.converged_ = converged
        self.n_features_in_ = d
        self._order_records = (mix, n, records)
        if ck.active:
            ck.save_done(self, seed=seed, records=keyed_records_state(records), allocation=Z)
        emit(ProgressEvent("BPMeans", "done", it + 1, history[-1], self.n_latent_features_, 0.0))
        return self

    @property
    def serial_order_(self) -> list[np.ndarray]:
        self._check_fitted("_order_records")
        mix, n, records = self._order_records
        return [r.permutation(mix, n) for r in records]

