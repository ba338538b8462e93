"""The one tree reduction of dclust: per-block partial objects merged with ``dask.array.reduction``.

Every statistic that crosses blocks (cluster statistics, proposals' costs, contingency tables, maxima) is a
monoid: a per-block partial plus an associative merge. :func:`tree_reduce` merges them in a tree whose fan-in is
``split_every``, so neither the driver nor any worker ever receives more than ``split_every`` partials at once.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import dask.array as da
import numpy as np

__all__ = ["tree_reduce", "DEFAULT_SPLIT_EVERY"]

DEFAULT_SPLIT_EVERY = 8


def _boxed(value: Any, ndim: int) -> np.ndarray:
    out = np.empty((1,) * ndim, dtype=object)
    out[(0,) * ndim] = value
    return out


def _chunk(block: np.ndarray, axis=None, keepdims=None) -> np.ndarray:
    return block


class _Merged:
    """The combine (``ndim=1``: a boxed 1-element array) or aggregate (``ndim=0``) step of :func:`tree_reduce`.

    A class rather than a closure: dask tokenizes the step on every pass, and a closure is tokenized by
    cloudpickling it (~7 ms each, a quarter of a small GM-PR fit); this tokenizes as ``merge`` does (~30 us).
    """

    def __init__(self, merge: Callable[[Sequence[Any]], Any], ndim: int) -> None:
        self.merge, self.ndim = merge, ndim

    def __call__(self, blocks: np.ndarray, axis=None, keepdims=None) -> np.ndarray:
        return _boxed(self.merge(list(np.ravel(blocks))), self.ndim)

    def __dask_tokenize__(self):
        from dask.tokenize import tokenize

        return "dclust-merged", self.ndim, tokenize(self.merge)


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
    s = DEFAULT_SPLIT_EVERY if split_every is None else int(split_every)
    if s < 2:
        raise ValueError(f"split_every must be >= 2, got {s}")
    return da.reduction(
        partials,
        chunk=_chunk,
        combine=_Merged(merge, 1),
        aggregate=_Merged(merge, 0),
        axis=0,
        keepdims=False,
        dtype=object,
        split_every={0: s},
        concatenate=True,
        meta=np.empty((), dtype=object),
        name="dclust-tree-reduce",
    )
