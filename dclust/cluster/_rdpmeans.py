"""RDP-means on Dask: DP-means with soft must-link / cannot-link side information ([TV] Alg. 1, docs/algorithms.md 5)."""

from __future__ import annotations

import warnings

import numpy as np

from .._dask.passes import map_labels, persist_if_fits
from .._dask.init import furthest_first
from .._dask.links import build_layout
from .._fit import ProgressEvent, Stopwatch, emit, logger
from .._dask.rdp import extract_linked, final_labels, init_pass, rdp_pass, records_from, records_state
from .._registry import register
from .._validation import SEED, Interval, Options, as_generator, check_array, check_constraints, check_lam_or_n_clusters
from ..constraints import ConstraintGraph
from ..errors import ConvergenceWarning, InvalidDataError, InvalidParameterError, message
from ..kernels.distances import seed_mix
from ..kernels.divergence import divergence_nearest, neg_entropy, smooth_rows
from ..kernels.rdpmeans import link_term
from ._base import CHECKPOINT, BaseEstimator, CentroidMixin, raise_if_bad_block, wrap_output

__all__ = ["RDPMeans"]


def _kl_labels(Xb, *, offset, block_index, centers, smoothing):
    return divergence_nearest(smooth_rows(Xb, smoothing), centers, "kl")[0]


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
    colour phases of a pass form one task graph: each phase's proposals are validated serially by a task that
    hands the centres and labels to the next phase; with phase 0's first epoch and its validation in the same
    graph, a pass costs one round trip (one more per extra phase-0 epoch; ``max_proposals`` bounds phase 0's
    epochs only). The result equals serial RDP-means on the order ``serial_order_``, a function of
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
        "random_state": [SEED],
        "prefix_size": [Interval("int", 0, None)],
        "max_proposals": [Interval("int", 1, None)],
        "persist": [Options(("auto", True, False))],
        "split_every": [Interval("int", 2, None), Options((None,))],
        "checkpoint": [CHECKPOINT],
    }
    _transient_attributes = ("serial_order_",)

    def __init__(
        self, *, lam=None, n_clusters=None, xi0=0.001, xi_rate=2.0, max_xi=None, divergence="euclidean",
        smoothing=0.3, mode="serial", max_iter=20, random_state=None, prefix_size=1000, max_proposals=4096,
        persist="auto", split_every=None, checkpoint=None,
    ):
        self.lam = lam
        self.n_clusters = n_clusters
        self.xi0 = xi0
        self.xi_rate = xi_rate
        self.max_xi = max_xi
        self.divergence = divergence
        self.smoothing = smoothing
        self.mode = mode
        self.max_iter = max_iter
        self.random_state = random_state
        self.prefix_size = prefix_size
        self.max_proposals = max_proposals
        self.persist = persist
        self.split_every = split_every
        self.checkpoint = checkpoint

    # ------------------------------------------------------------------------------------------------------

    def _check_setup(self, n: int) -> None:
        check_lam_or_n_clusters("RDPMeans", self.lam, self.n_clusters, n)
        if self.n_clusters is not None and self.divergence != "euclidean":
            raise InvalidParameterError(
                message("RDPMeans(n_clusters=..., divergence='kl')", "lam with the KL divergence",
                        "n_clusters", "The furthest-first heuristic is Euclidean; pass lam in KL units.")
            )

    @staticmethod
    def _graph(constraints, arr, kind: str):
        n = arr.shape[0]
        if constraints is None:
            return ConstraintGraph.from_pairs([], [], [], n_samples=n, chunks=arr.chunks[0])
        return check_constraints("RDPMeans", constraints, n, arr.chunks[0], kind)

    def fit(self, X, y=None, constraints=None) -> "RDPMeans":
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
        kind = self.divergence
        ck = self._checkpointer(arr, constraints=G)
        state = ck.resume()
        if state is not None and state.get("phase") == "done":
            return self._restore_done(ck, state, G, arr)
        if state is None:
            seed = int(as_generator(self.random_state).integers(2**62))
        else:
            with ck.reading():
                seed = int(state["seed"])
        if kind == "kl":
            arr = arr.map_blocks(smooth_rows, float(self.smoothing), dtype=np.float64)
        if info.kind != "numpy":
            arr = persist_if_fits(arr, self.persist, logger)
        watch = Stopwatch()
        layout = build_layout(G, tuple(arr.chunks[0]), self.mode)
        mix = seed_mix(seed)
        if state is None:
            stats0, H, p_end, p_index, p_rows = init_pass(arr, layout, mix=mix, prefix_size=self.prefix_size,
                                                          kind=kind, split_every=self.split_every)
            if stats0.bad_block >= 0 and kind == "kl":
                raise_if_bad_block(stats0, arr, name="X (counts for divergence='kl', which must be finite and >= 0)")
            raise_if_bad_block(stats0, arr)
            ck.check_content(*stats0.total())
            mean = stats0.mean[:1]
            lam = self._lam(arr, mean)
        lparts = extract_linked(arr, layout, mix=mix) if layout.n_nodes else None
        if state is None:
            emit(ProgressEvent("RDPMeans", "init", 0, float("nan"), 1, watch.lap(),
                               {"lam": lam, "colors": layout.n_colors, "linked_rows": layout.n_nodes}))

        def data_term(stats):
            if kind == "euclidean":
                return float(stats.scatter.sum())
            return float(H - (stats.weight * neg_entropy(stats.mean)).sum())

        def links(z):
            return link_term(z[layout.pair_a], z[layout.pair_b], layout.pair_v) if layout.pair_v.size else 0.0

        max_xi = self.xi0 * self.xi_rate ** (self.max_iter - 1) if self.max_xi is None else float(self.max_xi)
        if state is None:
            first = 0
            C, z = mean.copy(), np.zeros(layout.n_nodes, dtype=np.int64)
            prev_fp, data_prev = stats0.fingerprint[:1].copy(), data_term(stats0)
            hist, assign_hist, start_hist, xi_hist, records = [], [], [], [], []
            xi = float(self.xi0)
        else:
            (first, lam, H, xi, C, z, prev_fp, data_prev, hist, assign_hist, start_hist, xi_hist,
             records) = self._unpack(ck, state, d, layout.n_nodes)
            p_end = p_index = p_rows = None
        converged = False
        for it in range(first, self.max_iter):
            xi_hist.append(xi)
            start_hist.append(data_prev + xi * links(z) + lam * C.shape[0])
            res = rdp_pass(arr, lparts, layout, C, z, lam=lam, xi=xi, kind=kind, mix=mix,
                           max_proposals=self.max_proposals, split_every=self.split_every,
                           prefix=(p_end, p_index, p_rows) if it == 0 else None)
            if it == first and it > 0:
                ck.check_content(*res.stats.total())  # every row is in a pass: the resumed data
            assign_hist.append(res.stats.cost + xi * links(z) + lam * res.centers.shape[0])
            keep = np.flatnonzero(res.stats.weight > 0)
            remap = np.full(res.centers.shape[0], -1, dtype=np.int64)
            remap[keep] = np.arange(keep.size)
            z_pass = z.copy()
            stats = res.stats.select(keep)
            C, z = stats.mean, remap[z]
            data_prev = data_term(stats)
            hist.append(data_prev + xi * links(z) + lam * keep.size)
            records.append(res.record)
            changed = not np.array_equal(stats.fingerprint, prev_fp)
            prev_fp = stats.fingerprint
            converged = not changed and xi >= max_xi
            if ck.active and not converged and it + 1 < self.max_iter:
                ck.save({"phase": "iter", "iteration": it + 1, "seed": seed, "lam": lam, "H": H,
                         "xi": xi * self.xi_rate, "centres": C, "z": z, "prev_fp": prev_fp, "data_prev": data_prev,
                         "history": hist, "assign_history": assign_hist, "start_history": start_hist,
                         "xi_history": xi_hist, "records": records_state(records)})
            emit(ProgressEvent("RDPMeans", "iter", it + 1, hist[-1], keep.size, watch.lap(),
                               {"xi": xi, "changed": changed, "phase0_epochs": len(res.record.phase0.epochs)}))
            if converged:
                break
            if it + 1 < self.max_iter:
                xi *= self.xi_rate
        if not converged:
            why = "the labels still changed in the last pass" if xi >= max_xi else f"xi={xi:g} < max_xi={max_xi:g}"
            warnings.warn(f"RDPMeans stopped at max_iter={self.max_iter}: {why}; increase max_iter.",
                          ConvergenceWarning, stacklevel=2)
        layout.phase_parts = None  # release the persisted phase lists (the layout is kept for serial_order_)
        labels = final_labels(arr, layout, res, z_pass, remap, mix=mix, kind=kind)
        self.cluster_centers_ = C
        self.n_clusters_ = int(C.shape[0])
        self.labels_ = labels.compute() if info.kind == "numpy" else labels
        self.lam_ = lam
        self.xi_ = xi
        self.objective_ = hist[-1]
        self.objective_paper_ = hist[-1] + xi * links(z)
        self.objective_history_ = hist
        self.assignment_objective_history_ = assign_hist
        self.start_objective_history_ = start_hist
        self.xi_history_ = xi_hist
        self.n_iter_ = it + 1
        self.converged_ = converged
        self.n_colors_ = int(layout.n_colors)
        same = z[layout.pair_a] == z[layout.pair_b]
        self.n_violated_ = (int((~same & (layout.pair_v > 0)).sum()), int((same & (layout.pair_v < 0)).sum()))
        self.n_features_in_ = d
        self._order_records = (mix, n, layout, records)
        if ck.active:
            ck.save_done(self, seed=seed, records=records_state(records))
        emit(ProgressEvent("RDPMeans", "done", it + 1, hist[-1], self.n_clusters_, 0.0))
        return self

    def _restore_done(self, ck, state, G, arr) -> "RDPMeans":
        """A finished fit's checkpoint: its model (and what ``serial_order_`` needs), without a pass."""
        extra = ck.restore_attributes(self, state)
        layout = build_layout(G, tuple(arr.chunks[0]), self.mode)
        with ck.reading():
            self._order_records = (seed_mix(int(extra["seed"])), arr.shape[0], layout,
                                   records_from(extra["records"]))
        if not self.converged_:
            warnings.warn(f"RDPMeans stopped at max_iter={self.max_iter}; increase max_iter.", ConvergenceWarning,
                          stacklevel=3)
        emit(ProgressEvent("RDPMeans", "done", self.n_iter_, self.objective_, self.n_clusters_, 0.0))
        return self

    def _unpack(self, ck, state, d, n_nodes):
        """The loop state of a checkpoint after an iteration, shapes checked."""
        with ck.reading():
            first, lam, H, xi = int(state["iteration"]), float(state["lam"]), float(state["H"]), float(state["xi"])
            if state["phase"] != "iter" or not 0 < first < self.max_iter or not (lam > 0 and np.isfinite(lam)):
                raise ValueError(f"phase {state['phase']!r}, iteration {first} (max_iter={self.max_iter}), lam={lam}")
            C = ck.require_shape("centres", state["centres"], (None, d)).astype(np.float64)
            z = ck.require_shape("labels of the linked rows", state["z"], (n_nodes,)).astype(np.int64)
            if z.size and not (0 <= z.min() and z.max() < C.shape[0]):
                raise ValueError(f"labels of the linked rows outside 0..{C.shape[0] - 1}")
            prev_fp = ck.require_shape("partition fingerprint", state["prev_fp"], (C.shape[0],)).astype(np.uint64)
            hists = [[float(v) for v in state[k]] for k in ("history", "assign_history", "start_history",
                                                            "xi_history")]
            records = records_from(state["records"])
            if any(len(h) != first for h in hists) or len(records) != first:
                raise ValueError(f"histories of {[len(h) for h in hists]} and {len(records)} pass records; "
                                 f"expected {first}")
        return (first, lam, H, xi, C, z, prev_fp, float(state["data_prev"]), *hists, records)

    def _lam(self, arr, mean) -> float:
        if self.n_clusters is None:
            return float(self.lam)
        lams, _ = furthest_first(arr, self.n_clusters, mean, self.split_every)
        lam = float(lams[-1])
        if lam <= 0:
            raise InvalidDataError(
                message("RDPMeans(n_clusters=...)", f"at least {self.n_clusters} distinct points",
                        "fewer distinct points", "Lower n_clusters or pass lam directly.")
            )
        return lam

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

    def predict(self, X):
        """Nearest centre (by the model's divergence) of every row; new rows carry no links."""
        if self.divergence == "euclidean":
            return super().predict(X)
        arr, info = self._input(X)
        labels = map_labels(_kl_labels, arr, centers=np.asarray(self.cluster_centers_, dtype=np.float64),
                            smoothing=float(self.smoothing))
        return wrap_output(labels, info, "labels")

    def fit_predict(self, X, y=None, constraints=None):
        """``fit(X, constraints=...)`` then ``labels_`` (which account for the links)."""
        return self.fit(X, constraints=constraints).labels_
