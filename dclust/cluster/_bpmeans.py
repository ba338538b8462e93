"""BP-means on Dask (docs/algorithms.md 2.2 and 8.3): latent binary features learned with a penalty per feature,
features opened with optimistic concurrency control."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.features import FeatureOverflow, Gram, greedy_init, init_bits, transform_bits
from .._fit import finish, fit_loop, persisted, restore_finished, warn_unconverged
from .._dask.passes import persist_aligned
from .._dask.occ import (
    BPBits, BPRule, KeyedPass, keyed_pass, keyed_records_from, keyed_records_state, patch_bits,
)
from .._registry import register
from .._validation import Interval, Options, as_generator, check_array
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
from ._base import HistoryStep, OCC_PARAMETERS, BaseEstimator, wrap_output
from ._features import FeatureMixin, FirstPass, first_pass, overflow_error
from typing import Literal
from ..typing import ArrayLike, CheckpointLike, Ignored, PersistMode, SeedLike

__all__ = ["BPMeans"]


def _swept(rows: npt.NDArray[np.float64], A: npt.NDArray[np.float64]) -> npt.NDArray[np.uint8]:
    """Bits of in-memory rows swept from zero over ``A`` until stable (what :func:`transform_bits` gives)."""
    Z = np.zeros((rows.shape[0], A.shape[0]), np.uint8)
    if A.shape[0]:
        sweep_rows(rows, Z, A, repeat=True)
    return Z


def _pad_gram(g: Gram, k: int) -> Gram:
    return Gram.merge_all([g, Gram(np.zeros((k, k)), np.zeros((k, g.B.shape[1])))])


class _Passes(HistoryStep):
    """The passes of one BP-means fit, for the fit loop.

    :meth:`start` draws the seed, makes the first pass over the data (NaN check, mean, ``||X||_F^2``, the rows of
    the serial prefix; a resumed fit makes it at its first :meth:`step`) and the initial features; the first
    :meth:`step` sweeps the serial prefix on the driver, then the other keys with optimistic concurrency. The
    state is a dict: ``seed``, ``features`` (A), ``init_features``, ``bits`` (the allocation Z, a
    :class:`~dclust._dask.occ.BPBits`: on the workers, in the last epoch's results), the histories, ``records``
    and ``proposals`` (per pass); after a pass also ``epochs``, ``opened``, ``flips`` and ``settled`` (no flip,
    no feature opened or removed: converged), for the event, not saved.
    """

    name, unit = "BPMeans", "passes"
    model_key = "features"

    def __init__(self, est: "BPMeans", X: da.Array, ck: Any) -> None:
        self.est, self.X, self.ck = est, X, ck
        self.lam = float(est.lam)
        self.prefix: FirstPass | None = None  # what first_pass returns
        self.passes = 0  # passes of the initialization

    def _first_pass(self, seed: int) -> FirstPass:
        if self.prefix is None:
            self.prefix = first_pass(self.X, split_every=self.est.split_every, mix=seed_mix(seed),
                                     prefix_size=self.est.prefix_size, check_content=self.ck.check_content)
        return self.prefix

    def start(self) -> dict[str, Any]:
        est, X, lam = self.est, self.X, self.lam
        seed = int(as_generator(est.random_state).integers(2**62))
        mean, _, _, _, p_rows = self._first_pass(seed)
        greedy = est.init == "greedy"
        if greedy:
            A, _, self.passes = greedy_init(X, mean, lam=lam, n_features=None, seed=seed,
                                            max_features=est.max_features, split_every=est.split_every,
                                            capped=est.capped)
        elif est.init == "sample" and p_rows.shape[0]:
            try:
                A, _ = sample_restarts(p_rows, lam, n_init=est.n_init, seed=seed, max_features=est.max_features,
                                       cap=est.max_features if est.capped else None)
            except OverflowError:
                q = (p_rows * p_rows).sum(axis=1)
                raise FeatureOverflow(est.max_features + 1, float(q.max()), "initialisation sample") from None
        else:
            A = np.zeros((0, X.shape[1]))
        # in memory where the tasks of the passes over X will run (on a cluster: their groups of blocks dealt to
        # the threads in turn): the first epoch's tasks go where their bits are, and every later one follows them
        Z = persist_aligned(init_bits(X, A, greedy) if greedy or A.shape[0] == 0 else transform_bits(X, A), X)
        return {"seed": seed, "features": A, "init_features": A.copy(), "bits": BPBits.of(Z), "history": [],
                "assign_history": [], "records": [], "proposals": []}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        est, X, lam, A, first = self.est, self.X, self.lam, s["features"], not s["history"]
        _, sq_norm, p_end, p_index, p_rows = self._first_pass(s["seed"])
        start, rate, bits, pre, n_new = 0, 0.0, s["bits"], None, 0
        if first and p_index.size:
            Zp = greedy_rows(p_rows, A)[0] if est.init == "greedy" else _swept(p_rows, A)
            Zp, new, q, flips, overflow = serial_sweep(p_rows, Zp, A, lam,
                                                       max_new=max(0, est.max_features - A.shape[0]),
                                                       saturate=est.capped)
            if overflow >= 0:
                raise FeatureOverflow(est.max_features + 1, float(np.max(q[:overflow], initial=lam)),
                                      "serial prefix")
            G_pre, B_pre = gram_partial(p_rows, Zp)
            pre = Gram(G_pre, B_pre, float(q.sum()), int(flips))
            A, n_new = np.vstack([A, new]), new.shape[0]
            bits = bits.patched(A.shape[0], patch_bits(p_index, 0, Zp, tuple(X.chunks[0])))
            rate = n_new / p_index.size
        if first:  # after the prefix, epochs sized by its opening rate (1 when it is too short to tell)
            start, rate = p_end, (rate if p_index.size >= 16 else 1.0)
        k_start = A.shape[0] - n_new
        rule = BPRule(X, bits, A, lam, max_features=est.max_features, capped=est.capped)
        epochs, _ = keyed_pass(X, None, rule, mix=seed_mix(s["seed"]), start=start, rate=rate,
                               max_proposals=est.max_proposals, split_every=est.split_every)
        bits, gram = rule.result()
        k_all = rule.features.shape[0]
        gram = _pad_gram(Gram.merge_all([gram] + ([pre] if pre is not None else [])), k_all)
        keep, _ = prune_features(gram.G)
        G, B = gram.G[np.ix_(keep, keep)], gram.B[keep]
        opened = k_all - k_start
        return {"seed": s["seed"], "features": feature_means(G, B), "init_features": s["init_features"],
                "bits": bits.select(keep),
                "history": s["history"] + [collapsed_objective(G, B, sq_norm, lam)],
                "assign_history": s["assign_history"] + [gram.sse + lam * k_all],
                "records": s["records"] + [KeyedPass(start, epochs)],
                "proposals": s["proposals"] + [[int(ep.proposals.size) for ep in epochs]],
                "epochs": len(epochs), "opened": opened, "flips": gram.flips,
                "settled": gram.flips == 0 and opened == 0 and keep.size == k_all}

    def start_extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"lam": self.lam, "passes": self.passes}

    def extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"epochs": s["epochs"], "opened": s["opened"], "flips": s["flips"]}

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {k: s[k] for k in ("seed", "features", "init_features", "history", "assign_history", "proposals")} | {
            "Z": s["bits"].array(self.X.chunks[0]), "records": keyed_records_state(s["records"])}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        (n, d), chunks = self.X.shape, tuple(self.X.chunks[0])
        A = ck.require_shape("features", saved["features"], (None, d)).astype(np.float64)
        A0 = ck.require_shape("initial features", saved["init_features"], (None, d)).astype(np.float64)
        Z = saved["Z"]
        if (not hasattr(Z, "chunks") or Z.shape != (n, A.shape[0]) or tuple(Z.chunks[0]) != chunks
                or A.shape[0] > self.est.max_features):
            raise ValueError(f"an allocation of shape {getattr(Z, 'shape', None)} for {A.shape[0]} features")
        out = {"seed": int(saved["seed"]), "features": A, "init_features": A0, "bits": BPBits.of(Z.astype(np.uint8)),
               "history": [float(v) for v in saved["history"]],
               "assign_history": [float(v) for v in saved["assign_history"]],
               "records": keyed_records_from(saved["records"]),
               "proposals": [[int(v) for v in p] for p in saved["proposals"]]}
        if not (iteration > 0 and all(len(out[k]) == iteration
                                      for k in ("history", "assign_history", "records", "proposals"))):
            raise ValueError(f"histories that are not of {iteration} passes")
        return out


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

    features_: npt.NDArray[np.float64]
    n_latent_features_: int
    init_features_: npt.NDArray[np.float64]
    allocation_: ArrayLike
    objective_: float
    objective_history_: list[float]
    assignment_objective_history_: list[float]
    proposals_per_epoch_: list[list[int]]
    n_iter_: int
    converged_: bool
    _order_records: tuple[int, int, list[KeyedPass]]

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "left")],
        "init": [Options(("sample", "greedy", "empty"))],
        "n_init": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "max_features": [Interval("int", 1, None)],
        "capped": [Options((True, False))],
        **OCC_PARAMETERS,
    }
    _transient_attributes = ("serial_order_", "allocation_")
    _checkpoint_since = 2  # the loop state of format 1 was BPMeans' own

    def __init__(
        self, *, lam: float = 1.0, init: Literal["sample", "greedy", "empty"] = "sample", n_init: int = 10,
        max_iter: int = 100, max_features: int = 100, capped: bool = False, random_state: SeedLike = None,
        prefix_size: int = 1000, max_proposals: int = 4096, persist: PersistMode = "auto",
        split_every: int | None = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.init, self.n_init, self.max_iter = lam, init, n_init, max_iter
        self.max_features, self.capped, self.random_state = max_features, capped, random_state
        self.prefix_size, self.max_proposals, self.persist = prefix_size, max_proposals, persist
        self.split_every, self.checkpoint = split_every, checkpoint

    def fit(self, X: ArrayLike, y: Ignored = None) -> "BPMeans":
        """Learn features from ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features))."""
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        ck = self._checkpointer(arr)
        state = ck.resume()
        extra = restore_finished(self, ck, state)
        if extra is not None:
            with ck.reading():
                Z = extra["allocation"]
                if not hasattr(Z, "chunks") or Z.shape != (n, self.n_latent_features_):
                    raise ValueError(f"an allocation of shape {getattr(Z, 'shape', None)}")
                self._order_records = (seed_mix(int(extra["seed"])), n, keyed_records_from(extra["records"]))
            self.allocation_ = wrap_output(Z, info, "allocation")
            if not self.converged_:
                warn_unconverged("BPMeans", self.max_iter, unit="passes")
            finish(self, ck, n_iter=self.n_iter_, objective=self.objective_, n_clusters=self.n_latent_features_,
                   save=False)
            return self
        passes = _Passes(self, persisted(arr, info.kind, self.persist), ck)
        try:
            run = fit_loop(passes, max_iter=self.max_iter, ck=ck, resume=None if state is None else state["loop"],
                           warn=True)
        except FeatureOverflow as exc:
            raise overflow_error("BPMeans", self.lam, self.max_features, exc) from None
        s = run.state
        Z = s["bits"].array(arr.chunks[0])
        self.features_ = s["features"]
        self.n_latent_features_ = int(s["features"].shape[0])
        self.init_features_ = s["init_features"]
        self.allocation_ = wrap_output(Z, info, "allocation")
        self.objective_ = s["history"][-1]
        self.objective_history_ = s["history"]
        self.assignment_objective_history_ = s["assign_history"]
        self.proposals_per_epoch_ = s["proposals"]
        self.n_iter_ = run.n_iter
        self.converged_ = run.converged
        self.n_features_in_ = d
        self._order_records = (seed_mix(s["seed"]), n, s["records"])
        finish(self, ck, n_iter=run.n_iter, objective=self.objective_, n_clusters=self.n_latent_features_,
               seed=s["seed"], records=keyed_records_state(s["records"]), allocation=Z)
        return self

    @property
    def serial_order_(self) -> list[np.ndarray]:
        self._check_fitted("_order_records")
        mix, n, records = self._order_records
        return [r.permutation(mix, n) for r in records]

