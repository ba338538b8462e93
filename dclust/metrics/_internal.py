"""Internal validity indices (no ground truth): Calinski-Harabasz, Davies-Bouldin and the silhouette.

Calinski-Harabasz and Davies-Bouldin are tree reductions over the row blocks of ``X`` and its labels: every block
yields per-label statistics (weight, mean, scatter about the mean, merged by Chan's rule; for Davies-Bouldin a
second pass sums the distances to the cluster means), keyed by the label values that occur in it, so the driver
only ever holds O(K x D) numbers. The silhouette is O(n^2) by definition; it is computed exactly on a uniform
sample of rows gathered in one pass (Rousseeuw 1987; the sampled estimate as in scikit-learn's
``silhouette_score(sample_size=...)``).
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple, Sequence, TypeVar

import dask.array as da
import numpy as np
from scipy.spatial.distance import cdist

from .._dask.passes import compute, from_array, map_reduce, rechunk
from .._validation import as_generator, check_array
from ..errors import InvalidDataError, InvalidParameterError, message
from ..kernels.stats import ClusterStats
from ._contingency import _check_labels, check_split_every

__all__ = ["calinski_harabasz_score", "davies_bouldin_score", "silhouette_score", "silhouette_from_distances"]


class _LabelStats(NamedTuple):
    """Per-label statistics: sorted distinct ``labels`` and the :class:`ClusterStats` of each (same order)."""

    labels: np.ndarray
    stats: ClusterStats
    dist_sum: np.ndarray  # sum of ||x - center_k|| per label (second Davies-Bouldin pass), else zeros


def _finite_or_raise(Xb: np.ndarray, offset: int, block_index: int) -> None:
    if not np.isfinite(Xb).all():
        raise InvalidDataError(
            message("X", "finite values",
                    f"NaN or infinity in chunk {block_index} (rows {offset}..{offset + Xb.shape[0] - 1})",
                    "Drop or impute those rows (e.g. X[da.isfinite(X).all(axis=1)]) and score again.")
        )


def _block_label_stats(Xb: np.ndarray, yb: np.ndarray, *, offset: int, block_index: int,
                       centers: np.ndarray | None = None, center_labels: np.ndarray | None = None) -> _LabelStats:
    """Partial of one row block: statistics per label value (and, given ``centers``, summed distances to them)."""
    Xb = np.asarray(Xb, dtype=np.float64)
    _finite_or_raise(Xb, offset, block_index)
    labels, inverse = np.unique(np.asarray(yb), return_inverse=True)
    stats = ClusterStats.from_labels(Xb, inverse, labels.size, offset=offset)
    dist_sum: np.ndarray = np.zeros(labels.size)
    if centers is not None:
        assert center_labels is not None  # given together (the second Davies-Bouldin pass)
        rows = np.searchsorted(center_labels, labels)
        d = np.sqrt(((Xb - centers[rows][inverse]) ** 2).sum(axis=1))
        dist_sum = np.bincount(inverse, weights=d, minlength=labels.size)
    return _LabelStats(labels.astype(np.int64), stats, dist_sum)


def _merge_label_stats(parts: Sequence[_LabelStats]) -> _LabelStats:
    """Associative merge: union of the labels; each part's statistics placed at its labels, then Chan's rule."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    labels = np.unique(np.concatenate([p.labels for p in parts]))
    k, d = labels.size, parts[0].stats.n_features
    placed, dist_sum = [], np.zeros(k)
    for p in parts:
        rows = np.searchsorted(labels, p.labels)
        s = ClusterStats.identity(k, d)
        s.weight[rows], s.mean[rows], s.scatter[rows] = p.stats.weight, p.stats.mean, p.stats.scatter
        s.n_rows = p.stats.n_rows
        placed.append(s)
        dist_sum[rows] += p.dist_sum
    return _LabelStats(labels, ClusterStats.merge_all(placed), dist_sum)


def _checked(X: Any, labels: Any) -> tuple[da.Array | np.ndarray, np.ndarray | da.Array, bool]:
    """``X`` (validated from metadata) and 1-D integer labels of the same length, row-aligned."""
    arr, info = check_array(X)
    y = _check_labels(labels, "labels")
    if y.shape[0] != arr.shape[0]:
        raise InvalidDataError(
            message("labels", f"one label per row of X ({arr.shape[0]})", f"{y.shape[0]} labels",
                    "Pass the labels of exactly the rows of X, in the same order.")
        )
    lazy = info.kind != "numpy" or isinstance(y, da.Array)
    if lazy and isinstance(y, da.Array) and y.chunks[0] != arr.chunks[0]:
        y = rechunk(y, (arr.chunks[0],))
    elif lazy and not isinstance(y, da.Array):
        y = from_array(np.asarray(y), (arr.chunks[0],))
    return arr, y, lazy


def reduce_blocks(fn: Callable[..., Any], merge: Callable[[Sequence[Any]], Any], X: da.Array,
                  *aligned: da.Array | None, split_every: int | None = None, **kwargs: Any) -> Any:
    """One pass: ``fn`` on every row block of ``X`` (with the aligned arrays), partials merged by ``merge`` in a
    tree (fan-in ``split_every``); the merged partial (internal helper shared with the lam sweep)."""
    return compute(map_reduce(fn, merge, X, *aligned, split_every=split_every, **kwargs))[0][()]


def _reduce(arr: Any, y: Any, lazy: bool, split_every: int | None, **kwargs: Any) -> _LabelStats:
    if not lazy:
        return _block_label_stats(np.asarray(arr), np.asarray(y), offset=0, block_index=0, **kwargs)
    red: _LabelStats = reduce_blocks(_block_label_stats, _merge_label_stats, arr, y, split_every=split_every,
                                     **kwargs)
    return red


def _first_pass(X: Any, labels: Any, split_every: Any) -> tuple[Any, _LabelStats]:
    """Validate, then the per-label statistics of one pass (at least 2 and fewer than N labels); also returns
    ``again(**kwargs)``, another pass over the same validated inputs."""
    split_every = check_split_every(split_every)
    arr, y, lazy = _checked(X, labels)

    def again(**kwargs: Any) -> _LabelStats:
        return _reduce(arr, y, lazy, split_every, **kwargs)

    red = again()
    _check_n_labels(int(red.labels.size), int(red.stats.n_rows))
    return again, red


def _check_n_labels(n_labels: int, n_samples: int) -> None:
    if not 1 < n_labels < n_samples:
        raise InvalidDataError(
            message("labels", f"between 2 and n_samples - 1 = {n_samples - 1} distinct labels",
                    f"{n_labels} distinct label{'s' if n_labels != 1 else ''}",
                    "These indices compare clusters with each other: pass a clustering with at least two "
                    "clusters and fewer clusters than points.")
        )


#: The parameters, return value and errors of the tree-reduced indices, put in place of ``{index_parameters}``.
_INDEX_DOC = """Parameters
    ----------
    X : array-like, dask or zarr array, shape (n_samples, n_features)
    labels : array-like or dask.array.Array, shape (n_samples,)
        Integer cluster labels; every value (``-1`` included) is an ordinary label.
    split_every : int, optional
        Fan-in of the tree reduction for dask inputs (default 8).

    Returns
    -------
    float

    Raises
    ------
    InvalidDataError
        Labels of the wrong shape or type; fewer than 2 or as many labels as points; NaN or inf in ``X``."""


_Score = TypeVar("_Score", bound=Callable[..., float])


def _index_doc(score: _Score) -> _Score:
    if score.__doc__:  # None under python -OO
        score.__doc__ = score.__doc__.replace("{index_parameters}", _INDEX_DOC)
    return score


@_index_doc
def calinski_harabasz_score(X: Any, labels: Any, *, split_every: int | None = None) -> float:
    """Calinski-Harabasz index (variance ratio criterion), tree-reduced over row blocks.

    ``[B / (K - 1)] / [W / (N - K)]`` with ``B = sum_k n_k ||mean_k - mean||^2`` (between-cluster dispersion) and
    ``W = sum_k sum_{z_n = k} ||x_n - mean_k||^2`` (within); 1.0 when ``W = 0``. Higher is better. One pass over
    ``X``: per-label counts, means and scatters merged by Chan's rule, so it equals scikit-learn's
    ``calinski_harabasz_score`` to rounding.

    {index_parameters}

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.metrics import calinski_harabasz_score
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> calinski_harabasz_score(X, [0, 0, 1, 1])
    200.0
    """
    _, red = _first_pass(X, labels, split_every)
    score = calinski_harabasz_from_stats(red.stats)
    assert score is not None  # _first_pass checked 2 <= K < N (every label has weight)
    return score


def calinski_harabasz_from_stats(stats: ClusterStats) -> float | None:
    """Calinski-Harabasz index of the clusters summarised by ``stats`` (unit weights; empty clusters ignored), or
    None unless 2 <= K < N (internal helper shared with the lam sweep)."""
    used = stats.weight > 0
    k, n = int(used.sum()), float(stats.weight.sum())
    if not 1 < k < n:
        return None
    _, mean, _ = stats.total()
    within = float(stats.scatter[used].sum())
    between = float((stats.weight[used] * ((stats.mean[used] - mean) ** 2).sum(axis=1)).sum())
    return 1.0 if within == 0.0 else between * (n - k) / (within * (k - 1.0))


@_index_doc
def davies_bouldin_score(X: Any, labels: Any, *, split_every: int | None = None) -> float:
    """Davies-Bouldin index, in two tree-reduced passes over row blocks. Lower is better (0 is the minimum).

    ``mean_k max_{j != k} (s_k + s_j) / ||c_k - c_j||`` where ``c_k`` is the mean of cluster k and ``s_k`` the
    mean Euclidean distance of its points to ``c_k``. The first pass gives the means (as in
    :func:`calinski_harabasz_score`), the second the summed distances to them; equal to scikit-learn's
    ``davies_bouldin_score`` to rounding (including its conventions: 0 when every ``s_k`` or every centre
    distance is 0; coinciding centres are ignored).

    {index_parameters}

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.metrics import davies_bouldin_score
    >>> X = np.array([[0.0], [2.0], [10.0], [11.0]])  # s = (1, 0.5), centres 9.5 apart
    >>> davies_bouldin_score(X, [0, 0, 1, 1])  # (1 + 0.5) / 9.5
    0.15789473684210525
    """
    again, first = _first_pass(X, labels, split_every)
    centers = first.stats.mean
    second = again(centers=centers, center_labels=first.labels)
    intra = second.dist_sum / first.stats.weight
    gaps = cdist(centers, centers)
    if np.allclose(intra, 0) or np.allclose(gaps, 0):
        return 0.0
    gaps[gaps == 0] = np.inf
    combined = intra[:, None] + intra[None, :]
    return float(np.mean(np.max(combined / gaps, axis=1)))


# --------------------------------------------------------------------------------------------------------------
# silhouette on a sample
# --------------------------------------------------------------------------------------------------------------

_ROWS_PER_TILE = 512


def silhouette_from_distances(distances_of: Any, labels: np.ndarray, n: int) -> float:
    """Mean silhouette of ``n`` points from row tiles of their distance matrix (in-memory helper).

    ``distances_of(start, stop)`` returns rows ``start:stop`` of the (n, n) Euclidean distance matrix; ``labels``
    are integer labels of the n points. Singletons score 0 (as in scikit-learn). Peak memory O(tile x n).

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.spatial.distance import cdist
    >>> from dclust.metrics import silhouette_from_distances
    >>> P = np.array([[0.0], [1.0], [10.0], [11.0]])
    >>> round(silhouette_from_distances(lambda a, b: cdist(P[a:b], P), np.array([0, 0, 1, 1]), 4), 6)
    0.899749
    """
    uniq, inv = np.unique(np.asarray(labels), return_inverse=True)
    k = uniq.size
    if not 1 < k < n:
        _check_n_labels(k, n)
    sizes = np.bincount(inv, minlength=k).astype(np.float64)
    scores = np.empty(n)
    for start in range(0, n, _ROWS_PER_TILE):
        stop = min(n, start + _ROWS_PER_TILE)
        D = distances_of(start, stop)
        sums = np.zeros((stop - start, k))
        for c in range(k):  # K column sums per tile; no (tile x n x K) temporary
            sums[:, c] = D[:, inv == c].sum(axis=1)
        own = inv[start:stop]
        r = np.arange(stop - start)
        own_size = sizes[own]
        a = np.divide(sums[r, own], own_size - 1, out=np.zeros(stop - start), where=own_size > 1)
        means = sums / sizes[None, :]
        means[r, own] = np.inf
        b = means.min(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            s = (b - a) / np.maximum(a, b)
        scores[start:stop] = np.where(own_size > 1, np.nan_to_num(s), 0.0)
    return float(scores.mean())


def _check_sample_size(sample_size: Any) -> int | None:
    if sample_size is None:
        return None
    if isinstance(sample_size, bool) or not isinstance(sample_size, numbers.Integral) or sample_size < 3:
        raise InvalidParameterError(
            message("sample_size", "None or an integer >= 3", repr(sample_size),
                    "Pass e.g. sample_size=10_000 (the silhouette is O(sample_size^2)).")
        )
    return int(sample_size)


def silhouette_score(X: Any, labels: Any, *, sample_size: int | None = 10_000, random_state: Any = None) -> float:
    """Mean silhouette coefficient, computed exactly on a uniform sample of rows gathered in one pass.

    For each sampled point, ``a`` is its mean distance to the other sampled points of its cluster, ``b`` the
    smallest mean distance to the sampled points of another cluster, and ``s = (b - a) / max(a, b)`` (0 for a
    cluster with one sampled point). The result equals scikit-learn's ``silhouette_score`` on the sampled rows.
    It costs O(sample_size^2 x D) time and O(512 x sample_size) memory; the data is read once, only the chunks
    holding sampled rows.

    Parameters
    ----------
    X : array-like, dask or zarr array, shape (n_samples, n_features)
    labels : array-like or dask.array.Array, shape (n_samples,)
        Integer cluster labels.
    sample_size : int or None, default 10000
        Rows drawn uniformly without replacement (all rows when None or >= n_samples).
    random_state : int, Generator or None
        The draw of the sample.

    Returns
    -------
    float
        In [-1, 1]; higher is better.

    Raises
    ------
    InvalidParameterError
        ``sample_size`` not None or an integer >= 3.
    InvalidDataError
        Labels of the wrong shape or type; fewer than 2 or as many labels as sampled points; NaN or inf.

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.metrics import silhouette_score
    >>> X = np.array([[0.0], [1.0], [10.0], [11.0]])
    >>> round(silhouette_score(X, [0, 0, 1, 1], sample_size=None), 6)
    0.899749
    """
    sample_size = _check_sample_size(sample_size)
    rng = as_generator(random_state)
    arr, y, lazy = _checked(X, labels)
    n = int(arr.shape[0])
    if sample_size is None or sample_size >= n:
        index = np.arange(n)
    else:
        index = np.sort(rng.choice(n, size=sample_size, replace=False))
    if lazy:
        P, ly = compute(arr[index], y[index])
    else:
        P, ly = np.asarray(arr)[index], np.asarray(y)[index]
    P = np.asarray(P, dtype=np.float64)
    if not np.isfinite(P).all():
        raise InvalidDataError(message("X", "finite values", "NaN or infinity in the sampled rows",
                                       "Drop or impute those rows and score again."))
    return silhouette_from_distances(lambda a, b: cdist(P[a:b], P), np.asarray(ly), P.shape[0])
