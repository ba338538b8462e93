"""COP-style constrained k-means (Wagstaff et al. 2001), in memory: the hard-constraint reference of the UCI
protocol (docs/algorithms.md 10.3).

Internal (not exported, not registered): a cheap baseline beside RDP-means, GM-PR and TVClust, for data that fits
in memory. Must-links are made transitive first (union-find), so every must-link component moves as one weighted
point; cannot-links then join components. Each Lloyd sweep visits the components in a random order and puts each in
the nearest cluster that holds no component it cannot-links to (among those already placed in the sweep). When no
cluster is feasible, COP-KMeans proper gives up; here ``on_infeasible="nearest"`` places the component in its
nearest cluster and counts the violation (noisy links, p < 1, make that common), ``"raise"`` raises
``InfeasibleConstraintsError``. Of ``n_init`` seeded runs the one with the fewest violated cannot-links, then the
lowest inertia, is kept. With ``checkpoint=PATH`` the state (run, sweep, centres, labels, best run so far and the
generator's state) is saved atomically after every sweep, and a refit resumes from it with the identical result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._dask.passes import from_array
from .._fit import LoopResult, Step, best_of, finish, restore_finished
from .._validation import Interval, Options, as_generator
from ..constraints._check import check_constraints
from ..errors import InfeasibleConstraintsError, InvalidDataError, message
from ..kernels.constrained import cop_sweep
from ..kernels.kmeans import kmeans_plusplus
from .._registry import register
from ._base import MEMORY_PARAMETERS, CentroidMixin
from ._inmemory import _InMemory
from typing import Literal
from ..typing import ArrayLike, CheckpointLike, ConstraintsLike, Ignored, SeedLike

__all__ = ["COPKMeans"]


@register
class COPKMeans(CentroidMixin, _InMemory):
    """Constrained k-means with hard must-links (merged) and cannot-links (avoided while feasible).

    Parameters
    ----------
    n_clusters : int, default 8
    n_init : int, default 10
        Seeded runs (k-means++ on the must-link components, weighted by size); the best is kept.
    max_iter : int, default 100
        Lloyd sweeps per run; a run stops earlier when the labels repeat.
    on_infeasible : {"nearest", "raise"}, default "nearest"
        What to do with a component every cluster of which holds a cannot-linked component.
    max_samples : int, default 100_000
        Largest number of rows accepted (in-memory reference).
    random_state : int, Generator or None
    checkpoint : str or os.PathLike, optional
        As in :class:`KMeans`: saved after every sweep; a refit with the same parameters, data and links resumes.

    Attributes
    ----------
    labels_ : ndarray (n_samples,)
    cluster_centers_ : ndarray (n_clusters, n_features)
    inertia_ : float
        Sum of squared distances of the rows to their centres.
    n_violated_ : tuple of int
        ``(must-links split, cannot-links joined)`` by ``labels_`` (the first is always 0).
    n_components_ : int
        Must-link components (single rows included).
    n_iter_ : int
        Sweeps of the kept run.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.constraints import ConstraintGraph
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> G = ConstraintGraph.from_pairs([0, 2], [1, 3], [False, False], n_samples=4)
    >>> COPKMeans(n_clusters=2, random_state=0).fit(X, constraints=G).n_violated_
    (0, 0)
    """

    _cost_note = "an in-memory reference: constrained Lloyd sweeps over the must-link components"
    labels_: npt.NDArray[np.int64]
    cluster_centers_: npt.NDArray[np.float64]
    inertia_: float
    n_violated_: tuple[int, int]
    n_components_: int
    n_iter_: int

    _parameter_constraints = {
        "n_clusters": [Interval("int", 1, None)],
        "n_init": [Interval("int", 1, None)],
        "max_iter": [Interval("int", 1, None)],
        "on_infeasible": [Options(("nearest", "raise"))],
        **MEMORY_PARAMETERS,
    }

    def __init__(
        self, *, n_clusters: int = 8, n_init: int = 10, max_iter: int = 100,
        on_infeasible: Literal["nearest", "raise"] = "nearest", max_samples: int = 100_000,
        random_state: SeedLike = None, checkpoint: CheckpointLike = None,
    ) -> None:
        self.n_clusters, self.n_init, self.max_iter = n_clusters, n_init, max_iter
        self.on_infeasible, self.max_samples, self.random_state = on_infeasible, max_samples, random_state
        self.checkpoint = checkpoint

    def _links(self, constraints: ConstraintsLike, n: int) -> tuple[npt.NDArray[Any], ...]:
        if constraints is None:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0, np.int8)
        check_constraints("COPKMeans", constraints, n)
        pairs: tuple[npt.NDArray[Any], ...] = constraints.pairs()
        return pairs

    def fit(self, X: ArrayLike, y: Ignored = None, constraints: ConstraintsLike = None) -> "COPKMeans":
        """Cluster ``X`` (read into memory) under optional must/cannot links (a ``ConstraintGraph``)."""
        self._validate_params()
        Xn, _ = self._load(X)
        n, d = Xn.shape
        arr = from_array(Xn, chunks=Xn.shape)
        i, j, s = self._links(constraints, n)
        ck = self._checkpointer(arr, constraints=constraints)
        state = ck.resume()
        if restore_finished(self, ck, state) is not None:
            finish(self, ck, n_iter=self.n_iter_, objective=self.inertia_, n_clusters=self.n_clusters, save=False)
            return self
        diff = Xn - Xn.mean(axis=0)
        ck.check_content(float(n), Xn.mean(axis=0), float((diff * diff).sum()))
        must = s > 0
        M = sp.coo_matrix((np.ones(int(must.sum())), (i[must], j[must])), shape=(n, n))
        n_comp, comp = connected_components(M, directed=False)
        if n_comp < self.n_clusters:
            raise InvalidDataError(
                message("COPKMeans(n_clusters=...)", f"at most {n_comp} (the must-link components)",
                        f"n_clusters={self.n_clusters}", "Lower n_clusters or pass fewer must-links.")
            )
        w = np.bincount(comp, minlength=n_comp).astype(np.float64)
        P = np.zeros((n_comp, d))
        np.add.at(P, comp, Xn)
        P /= w[:, None]
        ca, cb = comp[i[~must]], comp[j[~must]]
        inside = ca == cb  # cannot-links inside a must-link component: violated whatever the labels
        ca, cb = ca[~inside], cb[~inside]
        A = sp.csr_matrix((np.ones(2 * ca.size), (np.concatenate([ca, cb]), np.concatenate([cb, ca]))),
                          shape=(n_comp, n_comp))
        problem = _Problem(Xn, P, w, comp, A.indptr.astype(np.int64), A.indices.astype(np.int64),
                           (i[~must], j[~must]))
        best = best_of(lambda r, rng: _Sweeps(self, problem, r, rng), n_init=self.n_init, max_iter=self.max_iter,
                       rng=as_generator(self.random_state), key=lambda b: (b["violated"], b["inertia"]), ck=ck,
                       resume=state)
        self.labels_ = best["labels"]
        self.cluster_centers_ = best["centres"]
        self.inertia_ = best["inertia"]
        self.n_violated_ = (0, best["violated"])
        self.n_components_ = int(n_comp)
        self.n_iter_ = best["n_iter"]
        self.n_features_in_ = d
        if ck.active:  # the fitted attributes go in the finished state, so a rerun restores them without a pass
            ck.save({"phase": "done", "attributes": {k: v for k, v in vars(self).items()
                                                     if k.endswith("_") and not k.startswith("_")}})
        finish(self, ck, n_iter=self.n_iter_, objective=self.inertia_, n_clusters=self.n_clusters, save=False)
        return self

    def fit_predict(self, X: ArrayLike, y: Ignored = None,
                    constraints: ConstraintsLike = None) -> npt.NDArray[np.int64]:
        """``fit(X, constraints=constraints).labels_``; ``predict`` labels new rows by the nearest center (links
        are not used)."""
        return self.fit(X, constraints=constraints).labels_



@dataclass(frozen=True)
class _Problem:
    """The data of a COP-KMeans fit: rows ``X``, must-link components ``P`` (means) of sizes ``w`` with the
    component of every row ``comp``, the cannot-link graph between components (CSR) and the cannot-links."""

    X: npt.NDArray[np.float64]
    P: npt.NDArray[np.float64]
    w: npt.NDArray[np.float64]
    comp: npt.NDArray[np.int64]
    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int64]
    cannot: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


class _Sweeps(Step):
    """One seeded COP-KMeans run for the fit loop: k-means++ on the components, then constrained Lloyd sweeps
    (each in a fresh random order) until the labels repeat. The state: ``centres``, ``labels`` of the components
    (None before the first sweep), ``infeasible`` (components placed in their nearest cluster) and ``cost``."""

    name = "COPKMeans"
    unit = "sweeps"

    def __init__(self, est: COPKMeans, problem: _Problem, restart: int, rng: np.random.Generator) -> None:
        self.est, self.pb, self.restart, self.rng = est, problem, restart, rng
        self.k: int = est.n_clusters

    def start(self) -> dict[str, Any]:
        return {"centres": kmeans_plusplus(self.pb.P, self.pb.w, self.k, self.rng), "labels": None}

    def step(self, s: dict[str, Any]) -> dict[str, Any]:
        pb, k = self.pb, self.k
        m = pb.P.shape[0]
        lab = np.empty(m, dtype=np.int64)
        n_bad = cop_sweep(pb.P, pb.w, s["centres"], self.rng.permutation(m).astype(np.int64), pb.indptr, pb.indices,
                       lab)
        if n_bad and self.est.on_infeasible == "raise":
            raise InfeasibleConstraintsError(
                message("COPKMeans.fit(constraints=...)", f"cannot-links that {k} clusters can satisfy",
                        f"{n_bad} must-link components with every cluster forbidden",
                        "Use on_infeasible='nearest', more clusters, or RDPMeans (soft links).")
            )
        sums = np.zeros((k, pb.P.shape[1]))
        np.add.at(sums, lab, pb.P * pb.w[:, None])
        cnt = np.bincount(lab, weights=pb.w, minlength=k)
        full = cnt > 0
        C = s["centres"].copy()
        C[full] = sums[full] / cnt[full, None]
        cost = float((pb.w * ((pb.P - C[lab]) ** 2).sum(axis=1)).sum())
        return {"centres": C, "labels": lab, "infeasible": int(n_bad), "cost": cost}

    def converged(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return old["labels"] is not None and bool(np.array_equal(new["labels"], old["labels"]))

    def objective(self, s: dict[str, Any]) -> float:
        return float(s.get("cost", float("nan")))

    def n_clusters(self, s: dict[str, Any]) -> int:
        return self.k

    def extra(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"init": self.restart, "infeasible": s["infeasible"]}

    def to_checkpoint(self, s: dict[str, Any]) -> dict[str, Any]:
        return {"centres": s["centres"], "labels": s["labels"]}

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> dict[str, Any]:
        m, d, k = self.pb.P.shape[0], self.pb.P.shape[1], self.k
        lab = ck.require_shape("labels", saved["labels"], (m,)).astype(np.int64)
        if lab.size and not (0 <= lab.min() and lab.max() < k):
            raise ValueError(f"labels outside 0..{k - 1}")
        return {"centres": ck.require_shape("centres", saved["centres"], (k, d)).astype(np.float64), "labels": lab}

    def result(self, s: dict[str, Any], run: LoopResult) -> dict[str, Any]:
        pb = self.pb
        z = s["labels"][pb.comp]
        return {"violated": int((z[pb.cannot[0]] == z[pb.cannot[1]]).sum()),
                "inertia": float(((pb.X - s["centres"][z]) ** 2).sum()), "labels": z, "centres": s["centres"],
                "n_iter": run.n_iter}

    def result_from_checkpoint(self, ck: Any, saved: dict[str, Any]) -> dict[str, Any]:
        n, d = self.pb.X.shape
        return {"violated": int(saved["violated"]), "inertia": float(saved["inertia"]),
                "labels": ck.require_shape("best labels", saved["labels"], (n,)).astype(np.int64),
                "centres": ck.require_shape("best centres", saved["centres"], (self.k, d)).astype(np.float64),
                "n_iter": int(saved["n_iter"])}
