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

__all__ = ["tree_reduce", "merge_tree", "merge_subtrees", "merge_nodes", "boxed", "fan_in", "DEFAULT_SPLIT_EVERY"]

DEFAULT_SPLIT_EVERY = 8


def boxed(value: Any, ndim: int) -> np.ndarray:
    """``value`` alone in an object array of ``ndim`` dimensions of length 1 (0: a 0-d array)."""
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
        return boxed(self.merge(list(np.ravel(blocks))), self.ndim)

    def __dask_tokenize__(self):
        from dask.tokenize import tokenize

        return "dclust-merged", self.ndim, tokenize(self.merge)


def fan_in(split_every: int | None) -> int:
    """The fan-in of the tree for ``split_every`` (None: :data:`DEFAULT_SPLIT_EVERY`); at least 2."""
    s = DEFAULT_SPLIT_EVERY if split_every is None else int(split_every)
    if s < 2:
        raise ValueError(f"split_every must be >= 2, got {s}")
    return s


def _depth(n: int, s: int) -> int:
    """Levels of Dask's reduction tree over ``n`` partials with fan-in ``s`` (as ``dask.array.reduction``)."""
    return max(1, math.ceil(math.log(n, s)))


def merge_subtrees(partials: Sequence[Any], merge: Callable[[Sequence[Any]], Any], *, first: int, n: int,
                   split_every: int | None = None) -> dict[tuple[int, int], Any]:
    """The nodes of :func:`merge_tree`'s tree over ``n`` partials that lie wholly within ``partials``, which are
    partials ``first .. first + len(partials) - 1``: a dict ``{(level, index): node}`` of the largest such nodes
    (level 0: a partial itself), to finish with :func:`merge_nodes` together with the nodes of the other ranges.

    A task that holds a run of consecutive partials merges what it can where they are, and sends on at most
    ``2 (split_every - 1)`` nodes per level instead of every partial.
    """
    s = fan_in(split_every)
    nodes = {(0, first + i): p for i, p in enumerate(partials)}
    end = first + len(partials)
    for level in range(1, _depth(n, s)):
        size = s ** level
        for j in range(-(-first // size), end // size + (end == n)):
            lo, hi = j * size, min((j + 1) * size, n)
            if first <= lo and hi <= end and lo < n:
                below = s ** (level - 1)
                kids = [(level - 1, c) for c in range(j * s, j * s + s) if c * below < n]
                nodes[(level, j)] = merge([nodes.pop(k) for k in kids])
    return nodes


def merge_nodes(nodes: dict[tuple[int, int], Any], merge: Callable[[Sequence[Any]], Any], *, n: int,
                split_every: int | None = None) -> Any:
    """The root of :func:`merge_tree`'s tree over ``n`` partials from the nodes :func:`merge_subtrees` made of
    ranges that cover every partial once: the result of :func:`merge_tree`, bit for bit."""
    s = fan_in(split_every)
    depth = _depth(n, s)

    def node(level: int, j: int) -> Any:
        if (level, j) in nodes:
            return nodes[(level, j)]
        below = s ** (level - 1)
        return merge([node(level - 1, c) for c in range(j * s, j * s + s) if c * below < n])

    return merge([node(depth - 1, j) for j in range(-(-n // s ** (depth - 1)))])


def merge_tree(partials: Sequence[Any], merge: Callable[[Sequence[Any]], Any], *,
               split_every: int | None = None) -> Any:
    """The merge of :func:`tree_reduce`, in one process, over a list of partials: the same tree (levels of
    ``split_every`` consecutive partials, then one merge of the rest), so the same result bit for bit.

    For partials that come back to one task together (:func:`merge_subtrees` and :func:`merge_nodes` split it
    between the tasks that hold runs of them and the one that finishes): the tree depends only on the number of
    partials, never on where they were made.

    >>> from dclust._dask.reduce import merge_tree
    >>> merge_tree([[1], [2], [3], [4], [5]], lambda parts: [sum(p[0] for p in parts)], split_every=2)
    [15]
    """
    parts = list(partials)
    if not parts:
        raise ValueError("merge_tree: no partials")
    n = len(parts)
    return merge_nodes(merge_subtrees(parts, merge, first=0, n=n, split_every=split_every), merge, n=n,
                       split_every=split_every)


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
    s = fan_in(split_every)
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
