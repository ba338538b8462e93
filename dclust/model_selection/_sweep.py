"""A lam sweep for DP-means in two passes over the data: a uniform sample, then one scoring pass for every lam.

1. **Sample pass.** ``sample_size`` rows drawn uniformly without replacement are gathered (only the chunks that
   hold them are read).
2. **Candidates, in memory.** Without ``lams``, the k-th furthest-first heuristic (docs/algorithms.md 1.3) on the
   sample gives ``lambda_1 >= ... >= lambda_kmax``; the candidates are ``n_lams`` values spaced geometrically from
   ``lambda_kmax`` to ``lambda_1`` (at and above ``lambda_1`` DP-means keeps one cluster, DP3). DP-means
   (:class:`dclust.DPMeans`, the one implementation) is fitted on the sample for every candidate.
3. **Scoring pass.** One map over the row blocks assigns every row to its nearest centre under every candidate's
   centres and tree-reduces per-cluster statistics for all of them at once: K (the clusters that receive points),
   ``SSE + lam K`` and the Calinski-Harabasz index of every candidate, on the full data. The silhouette is
   computed on a sub-sample of the sample (its distance matrix is computed once and shared by all candidates).

So the whole sweep reads the data twice, whatever the number of candidates; a refit at the chosen lam
(``DPMeans(lam=...)``) is then a normal fit.

**Suggestion rule** ("widest K plateau"): K is a non-increasing step function of lam in practice; a clustering
that is really there stays put over a wide range of lam. The suggested lam is the candidate nearest (in log lam)
to the middle of the widest range of lam, measured on a log scale, over which K stays constant, among K >= 2.
Ranges extend half-way (geometrically) to the neighbouring candidates.
"""

from __future__ import annotations

import numbers
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import dask
import numpy as np
from scipy.spatial.distance import cdist

from .._dask.init import take_rows
from .._validation import as_generator, check_array
from ..cluster import DPMeans
from ..cluster._base import raise_if_bad_block
from ..errors import InvalidDataError, InvalidParameterError, message
from ..kernels.distances import assign_stats, nearest
from ..kernels.stats import ClusterStats
from ..metrics._internal import calinski_harabasz_from_stats, reduce_blocks, silhouette_from_distances

__all__ = ["LamSweep", "sweep_dpmeans", "suggest_lam", "SUGGESTION_RULE"]

#: How :func:`suggest_lam` chooses (also reported as ``LamSweep.rule``).
SUGGESTION_RULE = ("widest K plateau: the candidate nearest (in log lam) to the middle of the widest range of lam, "
                   "on a log scale, over which K stays constant, among K >= 2")


@dataclass
class LamSweep:
    """The result of :func:`sweep_dpmeans`: one entry per candidate ``lam``, in increasing order of ``lam``.

    Attributes
    ----------
    lam : list of float
        Candidate penalties, increasing.
    n_clusters : list of int
        Clusters that receive points when every row goes to its nearest centre (full data).
    n_clusters_sample : list of int
        Clusters of the DP-means fit on the sample.
    objective : list of float
        ``SSE + lam * K`` on the full data with the sample fit's centres.
    sse : list of float
        The sum of squared distances to the nearest centre (full data).
    calinski_harabasz : list of float or None
        Calinski-Harabasz index of the nearest-centre labeling on the full data (None where K < 2).
    silhouette : list of float or None
        Mean silhouette on ``silhouette_sample_size`` sampled rows (None where K < 2 on them).
    suggested_lam : float or None
        The choice of :func:`suggest_lam` (None when every candidate gives K = 1).
    suggested_n_clusters : int or None
    rule : str
        How the suggestion was made.
    n_samples, n_features, sample_size, silhouette_sample_size : int
    n_passes : int
        Passes over the data: 2 (the sample, then the scoring pass).
    seconds : dict
        ``sample``, ``fits`` (in memory), ``score`` (the scoring pass), ``total``.

    Examples
    --------
    >>> import numpy as np, dclust
    >>> from dclust.model_selection import sweep_dpmeans
    >>> X = np.concatenate([np.random.default_rng(0).normal(c, 0.5, (100, 2)) for c in (0, 20, 40)])
    >>> sw = sweep_dpmeans(X, n_lams=12, random_state=0)
    >>> sw.suggested_n_clusters
    3
    >>> sorted(sw.to_dict())[:3]
    ['calinski_harabasz', 'lam', 'n_clusters']
    """

    lam: list[float]
    n_clusters: list[int]
    n_clusters_sample: list[int]
    objective: list[float]
    sse: list[float | None]
    calinski_harabasz: list[float | None]
    silhouette: list[float | None]
    suggested_lam: float | None
    suggested_n_clusters: int | None
    rule: str
    n_samples: int
    n_features: int
    sample_size: int
    silhouette_sample_size: int
    n_passes: int = 2
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every field.

        Examples
        --------
        >>> import numpy as np
        >>> from dclust.model_selection import sweep_dpmeans
        >>> sweep_dpmeans(np.arange(40.0).reshape(20, 2), lams=[1.0, 1e4]).to_dict()["n_clusters"]
        [20, 1]
        """
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LamSweep":
        """The inverse of :meth:`to_dict` (e.g. from the JSON of ``dclust sweep dpmeans --json``).

        Examples
        --------
        >>> import numpy as np
        >>> from dclust.model_selection import LamSweep, sweep_dpmeans
        >>> sw = sweep_dpmeans(np.arange(40.0).reshape(20, 2), lams=[1.0, 1e4])
        >>> LamSweep.from_dict(sw.to_dict()) == sw
        True
        """
        names = cls.__dataclass_fields__
        missing = [k for k in ("lam", "n_clusters", "objective") if k not in d]
        if missing:
            raise InvalidDataError(message("sweep", "the fields of LamSweep.to_dict()", f"no {', '.join(missing)}",
                                           "Pass the output of 'dclust sweep dpmeans --json'."))
        n = len(d["lam"])
        defaults = {"n_clusters_sample": d["n_clusters"], "sse": [None] * n, "calinski_harabasz": [None] * n,
                    "silhouette": [None] * n, "suggested_lam": None, "suggested_n_clusters": None, "rule": "",
                    "n_samples": 0, "n_features": 0, "sample_size": 0, "silhouette_sample_size": 0}
        fields: dict[str, Any] = {k: d.get(k, defaults.get(k)) for k in names if k in d or k in defaults}
        return cls(**fields)


# --------------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------------


def _int_param(name: str, value: Any, low: int, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise InvalidParameterError(message(name, f"an integer >= {low}", repr(value), fix))
    return int(value)


def _check_lams(lams: Any) -> np.ndarray | None:
    if lams is None:
        return None
    try:
        arr = np.asarray(lams, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        arr = np.array([np.nan])
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise InvalidParameterError(
            message("lams", "a non-empty list of finite penalties > 0", repr(lams),
                    "Pass e.g. lams=[1, 10, 100], or None for candidates from the furthest-first heuristic.")
        )
    return np.unique(arr)


# --------------------------------------------------------------------------------------------------------------
# candidates and the scoring pass
# --------------------------------------------------------------------------------------------------------------


def furthest_first_lams(P: np.ndarray, k: int) -> np.ndarray:
    """``lambda_1 >= ... >= lambda_k`` of the k-th furthest-first heuristic on in-memory rows ``P`` (docs/algorithms.md
    1.3: from the mean, repeatedly add the row farthest from the chosen set; lowest index on ties)."""
    delta = ((P - P.mean(axis=0)) ** 2).sum(axis=1)
    out = []
    for _ in range(min(k, P.shape[0])):
        i = int(np.argmax(delta))
        out.append(float(delta[i]))
        delta = np.minimum(delta, ((P - P[i]) ** 2).sum(axis=1))
    return np.array(out)


def _score_partial(Xb: np.ndarray, *, offset: int, block_index: int, centers: list[np.ndarray]
                   ) -> list[ClusterStats]:
    return [assign_stats(Xb, C, offset=offset, block_index=block_index)[0] for C in centers]


def _merge_scores(parts: Sequence[list[ClusterStats]]) -> list[ClusterStats]:
    return [ClusterStats.merge_all(group) for group in zip(*parts)]


def suggest_lam(lams: Any, n_clusters: Any) -> tuple[float | None, int | None]:
    """The "widest K plateau" choice of lam (see :data:`SUGGESTION_RULE`) and its K.

    Parameters
    ----------
    lams : sequence of float
        Candidate penalties (any order, > 0).
    n_clusters : sequence of int
        K at each candidate.

    Returns
    -------
    (lam, K), or (None, None) when no candidate has K >= 2.

    Examples
    --------
    >>> from dclust.model_selection import suggest_lam
    >>> suggest_lam([1, 2, 4, 8, 16, 32, 64], [9, 5, 3, 3, 3, 2, 1])
    (8.0, 3)
    """
    lam = np.asarray(lams, dtype=np.float64)
    k = np.asarray(n_clusters, dtype=np.int64)
    order = np.argsort(lam, kind="stable")
    raw, k = lam[order], k[order]
    lam = np.log(raw)
    if lam.size == 0:
        return None, None
    mids = (lam[1:] + lam[:-1]) / 2
    left_edges = np.concatenate([[lam[0]], mids])
    right_edges = np.concatenate([mids, [lam[-1]]])
    best, best_width = None, -1.0
    start = 0
    for i in range(1, lam.size + 1):
        if i == lam.size or k[i] != k[start]:
            width = right_edges[i - 1] - left_edges[start]
            if k[start] >= 2 and width > best_width:  # ties: the first, i.e. the smaller lam range
                best, best_width = (start, i), width
            start = i
    if best is None:
        return None, None
    a, b = best
    center = (left_edges[a] + right_edges[b - 1]) / 2
    j = a + int(np.argmin(np.abs(lam[a:b] - center)))
    return float(raw[j]), int(k[j])


# --------------------------------------------------------------------------------------------------------------
# the sweep
# --------------------------------------------------------------------------------------------------------------


def sweep_dpmeans(
    X: Any,
    lams: Any = None,
    *,
    n_lams: int = 24,
    max_clusters: int = 20,
    sample_size: int = 5_000,
    silhouette_sample_size: int = 1_000,
    max_iter: int = 30,
    random_state: Any = None,
    split_every: int | None = None,
) -> LamSweep:
    """K, ``SSE + lam K``, Calinski-Harabasz and the silhouette of DP-means for many ``lam``, in two passes.

    DP-means is fitted on a uniform sample for every candidate; one scoring pass over the full data then
    evaluates every candidate's centres together (module docstring). Use the result to choose ``lam`` for
    ``DPMeans(lam=...)``: ``suggested_lam`` follows :data:`SUGGESTION_RULE`.

    Parameters
    ----------
    X : array-like, dask, zarr or xarray array, shape (n_samples, n_features)
    lams : sequence of float, optional
        Candidate penalties (squared-distance units). Default: ``n_lams`` values spaced geometrically between the
        ``max_clusters``-th and the first furthest-first distance of the sample.
    n_lams : int, default 24
        Number of candidates when ``lams`` is not given.
    max_clusters : int, default 20
        The smallest default candidate is the ``max_clusters``-th furthest-first distance (about that many
        clusters; DP-means may open a few more).
    sample_size : int, default 5000
        Rows the candidates are fitted on (all rows when larger than n_samples).
    silhouette_sample_size : int, default 1000
        Rows of the sample the silhouette is computed on (O(size^2) memory for the shared distance matrix).
    max_iter : int, default 30
        Passes of every fit on the sample (a sweep needs K, not the last digit; refit at the chosen lam).
    random_state : int, Generator or None
        The sample and the fits' processing orders.
    split_every : int, optional
        Fan-in of the scoring pass's tree reduction (default 8).

    Returns
    -------
    LamSweep

    Raises
    ------
    InvalidParameterError
        Invalid ``lams`` or integer parameters (before any pass).
    InvalidDataError
        NaN or inf in the data (naming the chunk), or invalid ``X``.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.model_selection import sweep_dpmeans
    >>> X = np.concatenate([np.random.default_rng(0).normal(c, 0.5, (100, 2)) for c in (0, 20, 40)])
    >>> sw = sweep_dpmeans(X, lams=[1.0, 50.0, 5000.0], random_state=0)
    >>> sw.n_clusters[1:], sw.suggested_lam
    ([3, 1], 50.0)
    """
    t0 = time.perf_counter()
    lam_grid = _check_lams(lams)
    n_lams = _int_param("n_lams", n_lams, 2, "Pass e.g. n_lams=24.")
    max_clusters = _int_param("max_clusters", max_clusters, 2, "Pass e.g. max_clusters=20.")
    sample_size = _int_param("sample_size", sample_size, 3, "Pass e.g. sample_size=5000.")
    silhouette_sample_size = _int_param("silhouette_sample_size", silhouette_sample_size, 3,
                                        "Pass e.g. silhouette_sample_size=1000.")
    max_iter = _int_param("max_iter", max_iter, 1, "Pass e.g. max_iter=30.")
    if split_every is not None:
        split_every = _int_param("split_every", split_every, 2, "Pass e.g. split_every=8.")
    arr, _ = check_array(X)
    n, d = (int(s) for s in arr.shape)
    rng = as_generator(random_state)

    # pass 1: the sample
    m = min(n, sample_size)
    index = np.arange(n) if m == n else np.sort(rng.choice(n, size=m, replace=False))
    P = take_rows(arr, index)
    if not np.isfinite(P).all():
        raise InvalidDataError(message("X", "finite values", "NaN or infinity in the sampled rows",
                                       "Drop or impute those rows (e.g. X[da.isfinite(X).all(axis=1)]) first."))
    t_sample = time.perf_counter()

    # candidates and the fits on the sample, in memory on the driver
    if lam_grid is None:
        ff = furthest_first_lams(P, max_clusters)
        positive = ff[ff > 0]
        if positive.size == 0:
            raise InvalidDataError(message("X", "at least two distinct points", "identical sampled rows",
                                           "Pass data with more than one distinct point, or pass lams."))
        lam_grid = np.unique(np.geomspace(positive[-1], positive[0], n_lams))
    seed = int(rng.integers(2**62))
    centers = []
    k_sample = []
    with dask.config.set(scheduler="synchronous"):
        for lam in lam_grid:
            dp = DPMeans(lam=float(lam), max_iter=max_iter, random_state=seed, persist=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an unconverged sample fit still gives its K
                dp.fit(P)
            centers.append(dp.cluster_centers_)
            k_sample.append(int(dp.n_clusters_))
    t_fits = time.perf_counter()

    # pass 2: every candidate scored on the full data at once
    stats = reduce_blocks(_score_partial, _merge_scores, arr, split_every=split_every, centers=centers)
    for s in stats:
        raise_if_bad_block(s, arr)
    t_score = time.perf_counter()

    # silhouette on a sub-sample of the sample: one distance matrix for every candidate
    ms = min(m, silhouette_sample_size)
    sub = np.sort(rng.choice(m, size=ms, replace=False)) if ms < m else np.arange(m)
    Q = P[sub]
    D = cdist(Q, Q)
    silhouettes: list[float | None] = []
    for C in centers:
        labels, _ = nearest(Q, C)
        ok = 1 < np.unique(labels).size < ms
        silhouettes.append(silhouette_from_distances(lambda a, b: D[a:b], labels, ms) if ok else None)

    ks = [int((s.weight > 0).sum()) for s in stats]
    sse = [float(s.cost) for s in stats]
    suggested, suggested_k = suggest_lam(lam_grid, ks)
    t_end = time.perf_counter()
    return LamSweep(
        lam=[float(v) for v in lam_grid], n_clusters=ks, n_clusters_sample=k_sample,
        objective=[c + float(lam) * k for c, lam, k in zip(sse, lam_grid, ks)], sse=list(sse),
        calinski_harabasz=[calinski_harabasz_from_stats(s) for s in stats], silhouette=silhouettes,
        suggested_lam=suggested, suggested_n_clusters=suggested_k, rule=SUGGESTION_RULE,
        n_samples=n, n_features=d, sample_size=m, silhouette_sample_size=ms, n_passes=2,
        seconds={"sample": round(t_sample - t0, 4), "fits": round(t_fits - t_sample, 4),
                 "score": round(t_score - t_fits, 4), "total": round(t_end - t0, 4)},
    )
