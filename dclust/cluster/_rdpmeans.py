"""RDP-means on Dask: DP-means with soft must-link / cannot-link side information ([TV] Alg. 1,
docs/algorithms.md 5)."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import numpy.typing as npt

from .._dask.passes import map_blocks, map_labels
from .._dask.links import LinkLayout, build_layout
from .._fit import finish, fit_loop, persisted, restore_finished, warn_unconverged
from .._dask.rdp import extract_linked, final_labels, init_pass, rdp_pass, records_from, records_state
from .._registry import register
from .._validation import Interval, Options, as_generator, check_array, check_lam_or_n_clusters
from ..constraints._check import check_constraints
from ..constraints import ConstraintGraph
from ..errors import InvalidParameterError, message
from ..kernels.distances import seed_mix
from ..kernels.divergence import divergence_nearest, neg_entropy, smooth_rows
from ..kernels.rdpmeans import link_term
from ..kernels.stats import ClusterStats
from ._dpmeans import heuristic_lam
from ._base import HistoryStep, OCC_PARAMETERS, BaseEstimator, CentroidMixin, raise_if_bad_block, wrap_output
from typing import Literal
from ..typing import ArrayLike, CheckpointLike, ConstraintsLike, Ignored, PersistMode, SeedLike

__all__ = ["RDPMeans"]


def _kl_labels(Xb: npt.NDArray[Any], *, offset: int, block_index: int, centers: npt.NDArray[np.float64],
               smoothing: float) -> npt.NDArray[Any]:
    return divergence_nearest(smooth_rows(Xb, smoothing), centers, "kl")[0]


class _Passes(HistoryStep):
    """The passes of one RDP-means fit, for the fit loop, along the xi schedule.

    :meth:`start` draws the seed, makes the first pass over the data (one-cluster statistics, NaN check, the
    rows of the serial prefix), chooses ``lam`` and persists the linked rows (a resumed fit does the latter at its
    first :meth:`step`). The state is a dict: ``seed``, ``lam``, ``H`` (the data's entropy term for KL),
    ``next_xi``, ``centers``, ``z`` (labels of the linked rows by node id), ``fp`` (the partition fingerprint of
    the last pass), ``data`` (its data term), the four histories and the pass ``records``; after a pass also ``xi``
    (of that pass), ``changed``, ``settled`` (unchanged at ``xi >= max_xi``: converged), ``phase0_epochs`` and
    ``pass`` (what :func:`~dclust._dask.rdp.final_labels` needs), not saved.
    """

    name = "RDPMeans"

    def __init__(self, est: "RDPMeans", X: da.Array, layout: LinkLayout, ck: Any) -> None:
        self.est, self.X, self.layout, self.ck, self.kind = est, X, layout, ck, est.divergence
        self.max_xi = est.xi0 * est.xi_rate ** (est.max_iter - 1) if est.max_xi is None else float(est.max_xi)
        #: (end key, rows, their index) of the serial prefix: the first pass only
        self.prefix: tuple[Any, Any, Any] | None = None
        self.lparts: Any = None  # the persisted linked rows
        self.check_content = False  # the first pass after a resume compares the data with the interrupted run's

    def links(self, z: npt.NDArray[np.int64]) -> float:
        lay = self.layout
        return link_term(z[lay.pair_a], z[lay.pair_b], lay.pair_v) if lay.pair_v.size else 0.0

    def data_term(self, stats: ClusterStats, H: float) -> float:
        if self.kind == "euclidean":
            return float(stats.scatter.sum())
        return float(H - (stats.weight * neg_entropy(stats.mean)).sum())

    def _linked(self, seed: int) -> Any:
        if self.lparts is None and self.layout.n_nodes:
            self.lparts = extract_linked(self.X, self.layout, mix=seed_mix(seed))
        return self.lparts

    def start(self) -> dict[str, Any]:
        est, X, kind = self.est, self.X, self.kind
        seed = int(as_generator(est.random_state).integers(2**62))
        stats0, H, p_end, p_index, p_rows = init_pass(X, self.layout, mix=seed_mix(seed), prefix_size=est.prefix_size,
                                                      kind=kind, split_every=est.split_every)
        if stats0.bad_block >= 0 and kind == "kl":
            raise_if_bad_block(stats0, X, name="X (counts for divergence='kl', which must be finite and >= 0)")
        raise_if_bad_block(stats0, X)
        self.ck.check_content(*stats0.total())
        mean = stats0.mean[:1]
        lam = heuristic_lam(est, X, mean)
        self._linked(seed)
        self.prefix = (p_end, p_index, p_rows)
        return {"seed": seed, "lam": lam, "H": H, "next_xi": float(est.xi0), "centers": mean.copy(),
                "z": np.zeros(self.layout.n_nodes, dtype=np.int64), "fp": stats0.fingerprint[:1].copy(),
                "data": self.data_term(stats0, H), "history": [], "assign_history": [], "start_history": [],
                "xi_history": [], "records": []}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        est, lam, xi, C, H = self.est, s["lam"], s["next_xi"], s["centers"], s["H"]
        z = s["z"].copy()  # rdp_pass updates it in place
        start_objective = s["data"] + xi * self.links(z) + lam * C.shape[0]
        res = rdp_pass(self.X, self._linked(s["seed"]), self.layout, C, z, lam=lam, xi=xi, kind=self.kind,
                       mix=seed_mix(s["seed"]), max_proposals=est.max_proposals, split_every=est.split_every,
                       prefix=self.prefix)
        self.prefix = None
        if self.check_content:
            self.ck.check_content(*res.stats.total())  # every row is in a pass: the resumed data
            self.check_content = False
        assign_objective = res.stats.cost + xi * self.links(z) + lam * res.centers.shape[0]
        keep = np.flatnonzero(res.stats.weight > 0)
        remap = np.full(res.centers.shape[0], -1, dtype=np.int64)
        remap[keep] = np.arange(keep.size)
        z_pass = z.copy()
        stats = res.stats.select(keep)
        z = remap[z]
        data = self.data_term(stats, H)
        changed = not np.array_equal(stats.fingerprint, s["fp"])
        return {"seed": s["seed"], "lam": lam, "H": H, "next_xi": xi * est.xi_rate, "centers": stats.mean, "z": z,
                "fp": stats.fingerprint, "data": data,
                "history": s["history"] + [data + xi * self.links(z) + lam * keep.size],
                "assign_history": s["assign_history"] + [assign_objective],
                "start_history": s["start_history"] + [start_objective],
                "xi_history": s["xi_history"] + [xi], "records": s["records"] + [res.record],
                "xi": xi, "changed": changed, "settled": not changed and xi >= self.max_xi,
                "phase0_epochs": len(res.record.phase0.epochs), "pass": (res, z_pass, remap)}

    def start_extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"lam": s["lam"], "colors": self.layout.n_colors, "linked_rows": self.layout.n_nodes}

    def extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"xi": s["xi"], "changed": s["changed"], "phase0_epochs": s["phase0_epochs"]}

    def unconverged_note(self, s: dict[str, Any]) -> str:
        xi = s["xi"]
        return (": the labels still changed in the last pass" if xi >= self.max_xi
                else f": xi={xi:g} < max_xi={self.max_xi:g}")

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {k: s[k] for k in ("seed", "lam", "H", "next_xi", "centers", "z", "fp", "data", "history",
                                  "assign_history", "start_history", "xi_history")} | {
            "records": records_state(s["records"])}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        lam = float(saved["lam"])
        if not (lam > 0 and np.isfinite(lam)):
            raise ValueError(f"lam={lam}")
        C = ck.require_shape("centers", saved["centers"], (None, self.X.shape[1])).astype(np.float64)
        z = ck.require_shape("labels of the linked rows", saved["z"], (self.layout.n_nodes,)).astype(np.int64)
        if z.size and not (0 <= z.min() and z.max() < C.shape[0]):
            raise ValueError(f"labels of the linked rows outside 0..{C.shape[0] - 1}")
        fp = ck.require_shape("partition fingerprint", saved["fp"], (C.shape[0],)).astype(np.uint64)
        out = {"seed": int(saved["seed"]), "lam": lam, "H": float(saved["H"]), "next_xi": float(saved["next_xi"]),
               "centers": C, "z": z, "fp": fp, "data": float(saved["data"]),
               **{k: [float(v) for v in saved[k]] for k in ("history", "assign_history", "start_history",
                                                            "xi_history")},
               "records": records_from(saved["records"])}
        lengths = [len(out[k]) for k in ("history", "assign_history", "start_history", "xi_history", "records")]
        if not (iteration > 0 and all(v == iteration for v in lengths)):
            raise ValueError(f"histories and pass records of {lengths} iterations; expected {iteration}")
        self.check_content = True
        return out


@register
class RDPMeans(CentroidMixin, BaseEstimator):
    """RDP-means: DP-means whose assignments also reward must-links and penalise cannot-links inside clusters.

    Minimises (each linked pair counted once, docs/algorithms.md 5.2)
    ``J = sum_n D(x_n, mu_{z_n}) - xi * #must-links inside clusters + xi * #cannot-links inside clusters
    + lam * K``, by the serial pass of [TV] Algorithm 1 while the link weight ``xi`` grows from ``xi0`` by
    ``xi_rate`` each iteration. Links are soft, so noisy side information is fine.

    Distribution (docs/algorithms.md 8.4): each pass first assigns the rows without links (DP-means with optimistic
    concurrency over the row blocks, new clusters validated serially), then the linked rows one
    colour class of the link graph at a time (rows of one class share no link, so they run in parallel). All
    color phases of a pass run in one task, next to the linked rows (gathered once per fit, one tile per colour):
    each phase's proposals are validated serially before the next phase starts; that task also validates phase
    0's last epoch, so a pass costs one round trip (one more per extra phase-0 epoch; ``max_proposals`` bounds
    phase 0's epochs only). The result equals serial RDP-means on the order ``serial_order_``, a function of
    ``random_state`` and the global row index (and the link graph) only: the same data, links and seed give the
    same model for any row chunking and any number of workers. ``mode="jacobi"`` puts all linked rows in one
    class, updated from the previous labels: fewer phases, not serialisable, no monotonicity guarantee.

    Parameters
    ----------
    lam : float, optional
        Penalty per cluster in units of ``D`` (squared distance for Euclidean). Give ``lam`` or ``n_clusters``.
    n_clusters : int, optional
        Target number of clusters: ``lam`` from the k-th furthest-first heuristic (Euclidean only).
    xi0 : float, default 0.001
        Link weight of the first iteration (> 0).
    xi_rate : float, default 2
        Factor applied to ``xi`` after every iteration (>= 1; 1 keeps ``xi`` fixed).
    max_xi : float, optional
        The run stops once a pass at ``xi >= max_xi`` leaves the labels unchanged. Default
        ``xi0 * xi_rate**(max_iter - 1)``: the whole schedule runs (stopping earlier leaves DP-means).
    divergence : {"euclidean", "kl"}, default "euclidean"
        Squared Euclidean distance, or the generalised KL divergence for count data (rows Laplace-smoothed by
        ``smoothing`` and normalised; values must be >= 0).
    smoothing : float, default 0.3
        Laplace pseudo-count per bin for ``divergence="kl"``.
    mode : {"serial", "jacobi"}, default "serial"
    max_iter : int, default 20
    random_state : int, Generator or None
        Fixes the processing order (and so the result).
    prefix_size, max_proposals, persist, split_every
        As in :class:`DPMeans`.
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: the state (centres, labels of the linked rows, xi schedule, seed, histories and
        pass records) is saved atomically after every iteration, and a refit with the same parameters, data and
        constraint graph resumes from it with the identical model.

    Attributes
    ----------
    cluster_centers_ : ndarray (n_clusters_, n_features)
        Means of the clusters (of the smoothed rows for KL).
    labels_ : ndarray or dask array (n_samples,)
        Labels of the last pass (they account for the links; ``predict`` does not).
    n_clusters_, lam_, n_iter_, converged_
    xi_ : float
        Link weight of the last pass.
    objective_ : float
        ``J`` above at the end, at ``xi_``.
    objective_paper_ : float
        [TV] eq. 20 as printed (pair terms counted twice).
    objective_history_, assignment_objective_history_, start_objective_history_ : list of float
        Per iteration, at that iteration's xi: after the mean update; after the label pass (empty clusters still
        counted); before the pass. Each iteration is non-increasing in that order (``mode="serial"``).
    xi_history_ : list of float
    n_colors_ : int
        Colour classes of the link graph (phases per pass besides the unlinked rows).
    n_violated_ : tuple of int
        ``(must-links split, cannot-links joined)`` by ``labels_``.
    serial_order_ : list of ndarray
        Per pass, the permutation serial RDP-means must visit to give the same result (``mode="serial"``).

    Examples
    --------
    >>> import numpy as np, dclust
    >>> from dclust.constraints import ConstraintGraph
    >>> X = np.array([[0.0], [0.2], [3.0], [3.2]])
    >>> G = ConstraintGraph.from_pairs([1], [2], [True], n_samples=4)
    >>> m = dclust.cluster._rdpmeans.RDPMeans(lam=25.0, random_state=0).fit(X, constraints=G)
    >>> m.n_clusters_, m.labels_.tolist()
    (1, [0, 0, 0, 0])
    """

    cluster_centers_: npt.NDArray[np.float64]
    n_clusters_: int
    labels_: ArrayLike
    lam_: float
    xi_: float
    objective_: float
    objective_paper_: float
    objective_history_: list[float]
    assignment_objective_history_: list[float]
    start_objective_history_: list[float]
    xi_history_: list[float]
    n_iter_: int
    converged_: bool
    n_colors_: int
    n_violated_: tuple[int, int]
    _order_records: tuple[int, int, LinkLayout, list[Any]]

    _parameter_constraints = {
        "lam": [Interval("real", 0, None, "neither"), Options((None,))],
        "n_clusters": [Interval("int", 1, None), Options((None,))],
        "xi0": [Interval("real", 0, None, "neither")],
        "xi_rate": [Interval("real", 1, None)],
        "max_xi": [Interval("real", 0, None, "neither"), Options((None,))],
        "divergence": [Options(("euclidean", "kl"))],
        "smoothing": [Interval("real", 0, None, "neither")],
        "mode": [Options(("serial", "jacobi"))],
        "max_iter": [Interval("int", 1, None)],
        **OCC_PARAMETERS,
    }
    _transient_attributes = ("serial_order_",)
    _checkpoint_since = 2  # the loop state of format 1 was RDPMeans' own

    def __init__(
        self, *, lam: float | None = None, n_clusters: int | None = None, xi0: float = 0.001, xi_rate: float = 2.0,
        max_xi: float | None = None, divergence: Literal["euclidean", "kl"] = "euclidean", smoothing: float = 0.3,
        mode: Literal["serial", "jacobi"] = "serial", max_iter: int = 20, random_state: SeedLike = None,
        prefix_size: int = 1000, max_proposals: int = 4096, persist: PersistMode = "auto",
        split_every: int | None = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.lam, self.n_clusters, self.xi0, self.xi_rate, self.max_xi = lam, n_clusters, xi0, xi_rate, max_xi
        self.divergence, self.smoothing, self.mode, self.max_iter = divergence, smoothing, mode, max_iter
        self.random_state, self.prefix_size, self.max_proposals = random_state, prefix_size, max_proposals
        self.persist, self.split_every, self.checkpoint = persist, split_every, checkpoint

    # ------------------------------------------------------------------------------------------------------

    def _check_setup(self, n: int) -> None:
        check_lam_or_n_clusters("RDPMeans", self.lam, self.n_clusters, n)
        if self.n_clusters is not None and self.divergence != "euclidean":
            raise InvalidParameterError(
                message("RDPMeans(n_clusters=..., divergence='kl')", "lam with the KL divergence",
                        "n_clusters", "The furthest-first heuristic is Euclidean; pass lam in KL units.")
            )

    @staticmethod
    def _graph(constraints: ConstraintsLike, arr: da.Array, kind: str) -> ConstraintGraph:
        n = arr.shape[0]
        if constraints is None:
            return ConstraintGraph.from_pairs([], [], [], n_samples=n, chunks=arr.chunks[0])
        graph: ConstraintGraph = check_constraints("RDPMeans", constraints, n, arr.chunks[0], kind)
        return graph

    def fit(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> "RDPMeans":
        """Cluster ``X`` (numpy, dask, zarr or xarray; shape (n_samples, n_features)) with side information.

        Parameters
        ----------
        X : array-like (n_samples, n_features)
        y : ignored
            Present for API consistency.
        constraints : ConstraintGraph, optional
            Must/cannot links over the rows of X, aligned to ``X.chunks[0]`` for dask input (numpy input is
            re-aligned automatically). Without links RDP-means is DP-means (with the xi schedule run out).
        """
        self._validate_params()
        arr, info = check_array(X)
        n, d = arr.shape
        self._check_setup(n)
        G = self._graph(constraints, arr, info.kind)
        ck = self._checkpointer(arr, constraints=G)
        state = ck.resume()
        extra = restore_finished(self, ck, state)
        if extra is not None:
            layout = build_layout(G, tuple(arr.chunks[0]), self.mode)
            with ck.reading():
                self._order_records = (seed_mix(int(extra["seed"])), n, layout, records_from(extra["records"]))
            if not self.converged_:
                warn_unconverged("RDPMeans", self.max_iter)
            finish(self, ck, n_iter=self.n_iter_, objective=self.objective_, n_clusters=self.n_clusters_, save=False)
            return self
        if self.divergence == "kl":
            arr = map_blocks(arr, smooth_rows, float(self.smoothing), dtype=np.float64)
        arr = persisted(arr, info.kind, self.persist)
        layout = build_layout(G, tuple(arr.chunks[0]), self.mode)
        passes = _Passes(self, arr, layout, ck)
        run = fit_loop(passes, max_iter=self.max_iter, ck=ck, resume=None if state is None else state["loop"],
                       warn=True)
        s = run.state
        passes.lparts = None  # release the persisted colour tiles (the layout is kept for serial_order_)
        labels = final_labels(arr, layout, *s["pass"], mix=seed_mix(s["seed"]), kind=self.divergence)
        z, xi = s["z"], s["xi"]
        self.cluster_centers_ = s["centers"]
        self.n_clusters_ = int(s["centers"].shape[0])
        self.labels_ = labels.compute() if info.kind == "numpy" else labels
        self.lam_ = s["lam"]
        self.xi_ = xi
        self.objective_ = s["history"][-1]
        self.objective_paper_ = s["history"][-1] + xi * passes.links(z)
        self.objective_history_ = s["history"]
        self.assignment_objective_history_ = s["assign_history"]
        self.start_objective_history_ = s["start_history"]
        self.xi_history_ = s["xi_history"]
        self.n_iter_ = run.n_iter
        self.converged_ = run.converged
        self.n_colors_ = int(layout.n_colors)
        same = z[layout.pair_a] == z[layout.pair_b]
        self.n_violated_ = (int((~same & (layout.pair_v > 0)).sum()), int((same & (layout.pair_v < 0)).sum()))
        self.n_features_in_ = d
        self._order_records = (seed_mix(s["seed"]), n, layout, s["records"])
        finish(self, ck, n_iter=run.n_iter, objective=self.objective_, n_clusters=self.n_clusters_,
               seed=s["seed"], records=records_state(s["records"]))
        return self

    @property
    def serial_order_(self) -> list[np.ndarray]:
        self._check_fitted("_order_records")
        if self.mode == "jacobi":
            raise InvalidParameterError(
                message("RDPMeans.serial_order_", "a model fitted with mode='serial'", "mode='jacobi'",
                        "Jacobi updates are not serialisable; refit with mode='serial' to get a serial order.")
            )
        mix, n, layout, records = self._order_records
        return [r.permutation(mix, n, layout) for r in records]

    def predict(self, X: ArrayLike) -> ArrayLike:
        """Nearest centre (by the model's divergence) of every row; new rows carry no links."""
        if self.divergence == "euclidean":
            return super().predict(X)
        arr, info = self._input(X)
        labels = map_labels(_kl_labels, arr, centers=np.asarray(self.cluster_centers_, dtype=np.float64),
                            smoothing=float(self.smoothing))
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> ArrayLike:
        """``fit(X, constraints=...)`` then ``labels_`` (which account for the links)."""
        return self.fit(X, constraints=constraints).labels_
