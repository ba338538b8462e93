"""The one tree reduction of dclust: per-block partial objects merged with ``dask.array.reduction``.

Every statistic that crosses blocks (cluster statistics, proposals' costs, contingency tables, maxima) is a
monoid: a per-block partial plus an associative merge. :func:`tree_reduce` merges them in a tree whose fan-in is
``split_every``, so neither the driver nor any worker ever receives more than ``split_every`` partials at once.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import dask.array as da
import numpy as np

__all__ = ["tree_reduce", "merge_tree", "DEFAULT_SPLIT_EVERY"]

DEFAULT_SPLIT_EVERY = 8


def _boxed(value: Any, ndim: int) -> np.ndarray:
    out = np.empty((1,) * ndim, dtype=object)
    out[(0,) * ndim] = value
    return out


def _chunk(block: np.ndarray, axis=None, keepdims=None) -> np.ndarray:
    return block


def _combiner(merge: Callable[[Sequence[Any]], Any]):
    def combine(blocks: np.ndarray, axis=None, keepdims=True) -> np.ndarray:
        return _boxed(merge(list(np.ravel(blocks))), 1)

    return combine


def _aggregator(merge: Callable[[Sequence[Any]], Any]):
    def aggregate(blocks: np.ndarray, axis=None, keepdims=False) -> np.ndarray:
        out = np.empty((), dtype=object)
        out[()] = merge(list(np.ravel(blocks)))
        return out

    return aggregate


def _fan_in(split_every: int | None) -> int:
    s = DEFAULT_SPLIT_EVERY if split_every is None else int(split_every)
    if s < 2:
        raise ValueError(f"split_every must be >= 2, got {s}")
    return s


def merge_tree(partials: Sequence[Any], merge: Callable[[Sequence[Any]], Any], *, split_every: int | None = None) -> Any:
    """The merge of :func:`tree_reduce`, in one process, over a list of partials: the same tree (levels of
    ``split_every`` consecutive partials, then one merge of the rest), so the same result bit for bit.

    For a pass whose per-block partials come back to one task together (the blocks of persisted data, grouped by
    the worker that holds them): the tree depends only on the number of partials, never on where they were made.

    >>> from dclust._dask.reduce import merge_tree
    >>> merge_tree([[1], [2], [3], [4], [5]], lambda parts: [sum(p[0] for p in parts)], split_every=2)
    [15]
    """
    s = _fan_in(split_every)
    parts = list(partials)
    if not parts:
        raise ValueError("merge_tree: no partials")
    depth = max(1, math.ceil(math.log(len(parts), s)))  # as dask.array.reduction
    for _ in range(depth - 1):
        parts = [merge(parts[i:i + s]) for i in range(0, len(parts), s)]
    return merge(parts)


def tree_reduce(
    partials: da.Array,
    merge: Callable[[Sequence[Any]], Any],
    *,
    split_every: int | None = None,
) -> da.Array:
    """Tree-reduce a 1-D object array of per-block partials with an associative ``merge``.

    Parameters
    ----------
    partials : dask.array.Array, shape (n_blocks,), dtype object
        One partial per element, usually built by :func:`dclust._dask.passes.map_partials`.
    merge : callable
        ``merge(list_of_partials) -> partial``; must be associative (and commutative).
    split_every : int, optional
        Fan-in of the tree (default 8). Dask's reduction is given the dict ``{0: split_every}``.

    Returns
    -------
    dask.array.Array
        A 0-d object array; ``.compute()[()]`` is the merged partial.
    """
    s = _fan_in(split_every)
    return da.reduction(
        partials,
        chunk=_chunk,
        combine=_combiner(merge),
        aggregate=_aggregator(merge),
        axis=0,
        keepdims=False,
        dtype=object,
        split_every={0: s},
        concatenate=True,
        meta=np.empty((), dtype=object),
        name="dclust-tree-reduce",
    )
