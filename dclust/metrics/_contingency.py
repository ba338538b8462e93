"""The contingency table of two labelings, as a tree-reduced monoid of sparse (true, pred) -> count cells.

Each row block contributes the cells that occur in it (unique label pairs and their counts, or summed weights);
partials are merged with :func:`dclust._dask.reduce.tree_reduce`. Only the table — O(#cells), never O(N) — reaches
the driver. Every score in :mod:`dclust.metrics` is computed from this table.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, NamedTuple, Sequence

import dask.array as da
import numpy as np

from .._dask.passes import compute, from_array, map_reduce, rechunk
from ..errors import InvalidDataError, InvalidParameterError, message

__all__ = ["contingency_table"]

_ENCODE_SLACK = 1 << 16  # a dense code space this small is always fine for bincount


class _Cells(NamedTuple):
    """Sparse contingency: unique ``(true[k], pred[k])`` pairs in lexicographic order, with their ``values[k]``.

    ``values`` is int64 (counts) or float64 (summed weights). This is the partial of the tree reduction.
    """

    true: np.ndarray
    pred: np.ndarray
    values: np.ndarray


# --------------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------------


def check_split_every(split_every: Any) -> int | None:
    """``None`` or an integer >= 2 (the fan-in of the tree reduction)."""
    if split_every is None:
        return None
    if isinstance(split_every, bool) or not isinstance(split_every, numbers.Integral) or split_every < 2:
        raise InvalidParameterError(
            message("split_every", "None or an integer >= 2", repr(split_every), "Pass e.g. split_every=8.")
        )
    return int(split_every)


def _check_labels(y: Any, name: str) -> np.ndarray | da.Array:
    arr = y if isinstance(y, da.Array) else np.asarray(y)
    if arr.ndim != 1:
        fix = "Pass a 1-D array; for a column vector use y.ravel()." if arr.ndim == 2 else "Pass a 1-D array."
        raise InvalidDataError(message(name, "a 1-D array of labels, shape (n_samples,)", f"shape {arr.shape}", fix))
    n = arr.shape[0]
    if isinstance(n, float) and np.isnan(n):
        raise InvalidDataError(
            message(name, "a dask array with known chunk sizes", "unknown chunk sizes (nan)",
                    f"Call {name} = {name}.compute_chunk_sizes() first.")
        )
    if n == 0:
        raise InvalidDataError(message(name, "at least one label", "an empty array", "Pass non-empty labels."))
    if arr.dtype.kind not in "iub":
        raise InvalidDataError(
            message(name, "integer labels", f"dtype {arr.dtype}",
                    "Encode the labels as integers, e.g. np.unique(y, return_inverse=True)[1], or "
                    "y.astype(np.int64) if they are whole numbers.")
        )
    return arr


def _aligned(ys: Sequence[tuple[Any, str]]) -> list[np.ndarray | da.Array]:
    """Validate 1-D arrays of one length (the first two are labels, the rest already-checked weights).

    If any is a dask array, all become dask arrays with the row chunks of the first dask one.
    """
    arrs = [_check_labels(y, name) if i < 2 else y for i, (y, name) in enumerate(ys)]
    lengths = {name: a.shape[0] for a, (_, name) in zip(arrs, ys)}
    if len(set(lengths.values())) > 1:
        got = ", ".join(f"{k} has {v}" for k, v in lengths.items())
        raise InvalidDataError(
            message("labels", "arrays of the same length (one entry per sample)", got,
                    "Pass labels (and weights) for the same samples, in the same order.")
        )
    dask_arrs = [a for a in arrs if isinstance(a, da.Array)]
    if not dask_arrs:
        return arrs
    chunks = dask_arrs[0].chunks[0]
    out: list[np.ndarray | da.Array] = []
    for a in arrs:
        if not isinstance(a, da.Array):
            a = from_array(a, (chunks,))
        elif a.chunks[0] != chunks:
            a = rechunk(a, (chunks,))
        out.append(a)
    return out


def _check_weights(w: Any, name: str) -> np.ndarray | da.Array:
    arr = w if isinstance(w, da.Array) else np.asarray(w)
    if arr.ndim != 1:
        raise InvalidDataError(
            message(name, "a 1-D array, shape (n_samples,)", f"shape {arr.shape}", "Pass one weight per sample.")
        )
    if arr.dtype.kind not in "iuf":
        raise InvalidDataError(message(name, "real numbers", f"dtype {arr.dtype}", f"Pass {name} as floats."))
    return arr


def _check_weight_values(w: np.ndarray, name: str, upper: float | None, where: str) -> None:
    """Raise unless every weight is finite and in [0, upper] (checked inside the pass, per block)."""
    ok = np.isfinite(w) & (w >= 0)
    if upper is not None:
        ok &= w <= upper
    if not ok.all():
        rng = "[0, inf)" if upper is None else f"[0, {upper:g}]"
        raise InvalidDataError(
            message(f"{name}{where}", f"finite values in {rng}", f"e.g. {w[~ok][:3].tolist()}",
                    f"Clip or fix {name} (use 0 for samples that must not count).")
        )


# --------------------------------------------------------------------------------------------------------------
# kernels: one block (or a list of partials) in, sparse cells out
# --------------------------------------------------------------------------------------------------------------


def _encode(t: np.ndarray, p: np.ndarray
            ) -> tuple[np.ndarray, int, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]]:
    """Integer codes increasing with (t, p) lexicographically, their range, and a decoder back to label pairs."""
    n = t.size
    tmin, tmax, pmin, pmax = int(t.min()), int(t.max()), int(p.min()), int(p.max())
    nt, npr = tmax - tmin + 1, pmax - pmin + 1
    if nt * npr <= max(4 * n, _ENCODE_SLACK):  # small label ranges: offsets, no sort
        codes = (t - tmin) * npr + (p - pmin)
        return codes, nt * npr, lambda c: (c // npr + tmin, c % npr + pmin)
    ut, it = np.unique(t, return_inverse=True)
    up, ip = np.unique(p, return_inverse=True)
    m = up.size
    codes = it.astype(np.int64) * m + ip
    return codes, ut.size * m, lambda c: (ut[c // m], up[c % m])


def _sum_by_pair(t: np.ndarray, p: np.ndarray, values: np.ndarray | None, weighted: bool) -> _Cells:
    """Sum ``values`` (1 per sample when None) over equal (t, p) pairs."""
    vdtype = np.float64 if weighted else np.int64
    if t.size == 0:
        return _Cells(t.astype(np.int64), p.astype(np.int64), np.zeros(0, vdtype))
    t = t.astype(np.int64, copy=False)
    p = p.astype(np.int64, copy=False)
    codes, size, decode = _encode(t, p)
    if values is None and size <= max(4 * t.size, _ENCODE_SLACK):
        cnt = np.bincount(codes, minlength=size)
        keys = np.flatnonzero(cnt)
        sums = cnt[keys].astype(np.int64)
    else:
        order = np.argsort(codes, kind="stable")
        sc = codes[order]
        starts = np.flatnonzero(np.concatenate([[True], sc[1:] != sc[:-1]]))
        keys = sc[starts]
        v = np.ones(t.size, np.int64) if values is None else np.asarray(values, vdtype)[order]
        sums = np.add.reduceat(v, starts)
    kt, kp = decode(keys)
    return _Cells(np.asarray(kt, np.int64), np.asarray(kp, np.int64), np.asarray(sums, vdtype))


def _block_cells(tb: np.ndarray, pb: np.ndarray, wb: np.ndarray | None = None, *, offset: int, block_index: int,
                 weight_name: str = "sample_weight", weight_upper: float | None = None, lazy: bool = True) -> _Cells:
    """Partial of one row block (``tb`` is (n_b, 1) under :func:`map_reduce`, else (n_b,))."""
    tb = np.ravel(tb)
    if wb is not None:
        wb = np.asarray(wb, np.float64)
        where = f" (row block {block_index}, rows {offset}..{offset + tb.size - 1})" if lazy else ""
        _check_weight_values(wb, weight_name, weight_upper, where)
    return _sum_by_pair(tb, np.asarray(pb), wb, weighted=wb is not None)


def _merge_cells(parts: Sequence[_Cells]) -> _Cells:
    """Associative, commutative merge: the result is canonical (unique pairs, sorted)."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    weighted = any(c.values.dtype.kind == "f" for c in parts)
    return _sum_by_pair(
        np.concatenate([c.true for c in parts]),
        np.concatenate([c.pred for c in parts]),
        np.concatenate([c.values for c in parts]),
        weighted=weighted,
    )


# --------------------------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------------------------


class Table:
    """Sparse contingency table with the margins the scores need (internal; O(#cells) memory)."""

    def __init__(self, cells: _Cells) -> None:
        self.cells = cells
        t, p, v = cells
        flag = np.concatenate([[True], t[1:] != t[:-1]])
        starts = np.flatnonzero(flag)
        self.true_labels = t[starts]
        self.row = np.cumsum(flag) - 1  # row index of every cell
        self.a = np.add.reduceat(v, starts)  # a_i, row sums
        self.pred_labels, self.col = np.unique(p, return_inverse=True)
        order = np.argsort(self.col, kind="stable")
        sc = self.col[order]
        cstarts = np.flatnonzero(np.concatenate([[True], sc[1:] != sc[:-1]]))
        self.b = np.add.reduceat(v[order], cstarts)  # b_j, column sums
        self.order_by_col, self.col_starts = order, cstarts

    @property
    def values(self) -> np.ndarray:
        return self.cells.values

    @property
    def total(self) -> int | float:
        """N (a Python int for counts) or the total weight (a float)."""
        s = self.values.sum()
        return int(s) if self.values.dtype.kind == "i" else float(s)

    def dense(self) -> np.ndarray:
        out = np.zeros((self.true_labels.size, self.pred_labels.size), dtype=self.values.dtype)
        out[self.row, self.col] = self.values
        return out


def compute_table(y_true: Any, y_pred: Any, *, weights: Any = None, weight_name: str = "sample_weight",
                  weight_upper: float | None = None, split_every: int | None = None) -> Table:
    """Validate, then build the (tree-reduced, for dask input) sparse contingency table."""
    split_every = check_split_every(split_every)
    ys: list[tuple[Any, str]] = [(y_true, "y_true"), (y_pred, "y_pred")]
    if weights is not None:
        ys.append((_check_weights(weights, weight_name), weight_name))
    arrs = _aligned(ys)
    t, p = arrs[0], arrs[1]
    w = arrs[2] if weights is not None else None
    if not isinstance(t, da.Array):
        assert not isinstance(p, da.Array) and not isinstance(w, da.Array)  # _aligned: all numpy or all dask
        cells = _block_cells(t, p, w, offset=0, block_index=0, lazy=False, weight_name=weight_name,
                             weight_upper=weight_upper)
    else:
        assert isinstance(p, da.Array) and not isinstance(w, np.ndarray)
        cells = compute(map_reduce(_block_cells, _merge_cells, t[:, None], p, w, split_every=split_every,
                                   weight_name=weight_name, weight_upper=weight_upper))[0][()]
    return Table(cells)


def contingency_table(
    y_true: Any,
    y_pred: Any,
    *,
    sample_weight: Any = None,
    split_every: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contingency table ``n_ij`` of two labelings, dense over the labels that occur.

    For dask inputs every row block yields the sparse cells it contains (unique ``(true, pred)`` pairs and their
    counts); the partials are merged with a tree reduction, so neither the driver nor a worker ever holds N labels.

    Parameters
    ----------
    y_true : array-like or dask.array.Array, shape (n_samples,)
        True classes, integers. Every value is an ordinary label, including negative ones such as ``-1``
        (there is no "ignore" value: drop or mask such samples before calling, or give them weight 0).
    y_pred : array-like or dask.array.Array, shape (n_samples,)
        Predicted clusters, integers. If its chunks differ from ``y_true``'s it is rechunked to them.
    sample_weight : array-like or dask.array.Array, shape (n_samples,), optional
        Finite non-negative weights; the cells then hold summed weights (float64) instead of counts.
    split_every : int, optional
        Fan-in of the tree reduction for dask inputs (default 8).

    Returns
    -------
    true_labels : ndarray, shape (n_classes,)
        Sorted distinct values of ``y_true`` (int64).
    pred_labels : ndarray, shape (n_clusters,)
        Sorted distinct values of ``y_pred`` (int64).
    counts : ndarray, shape (n_classes, n_clusters)
        ``counts[i, j]`` = number of samples with ``y_true == true_labels[i]`` and ``y_pred == pred_labels[j]``
        (int64), or their summed weight (float64) when ``sample_weight`` is given.

    Raises
    ------
    InvalidDataError
        Labels that are not 1-D, not integers, empty or of different lengths; invalid weights.

    Examples
    --------
    >>> from dclust.metrics import contingency_table
    >>> t, p, n = contingency_table([0, 0, 1, 1, 2, 2], [1, 0, 2, 1, 0, 2])
    >>> n
    array([[1, 1, 0],
           [0, 1, 1],
           [1, 0, 1]])
    """
    table = compute_table(y_true, y_pred, weights=sample_weight, split_every=split_every)
    return table.true_labels.copy(), table.pred_labels.copy(), table.dense()
