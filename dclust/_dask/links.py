"""Driver-side layout of the linked rows for RDP-means (docs/algorithms.md 8.4), and per-block maps with arguments.

Everything here is O(number of links): the linked rows (their block, local row and colour), the signed adjacency
between them, and per colour class one tile: its rows in processing order with the CSR rows of their links.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import dask.array as da
import numpy as np

from ..kernels.coloring import greedy_coloring, link_adjacency
from ..kernels.distances import order_keys
from .passes import block_offsets, map_partials

__all__ = [
    "LinkLayout", "ColorTile", "build_layout", "object_array", "fresh_name", "map_with_args",
]


def fresh_name(fn) -> str:
    """A unique task-key prefix: these graphs are built once per phase, so hashing their arguments (centres,
    per-block link lists) to derive a name would only cost time."""
    return f"{getattr(fn, '__name__', 'task').strip('_')}-{uuid.uuid4().hex}"


def object_array(items) -> np.ndarray:
    """A 1-D numpy object array holding ``items`` as they are (tuples and arrays are not broadcast)."""
    out = np.empty(len(items), dtype=object)
    for k, v in enumerate(items):
        out[k] = v
    return out


def map_with_args(fn: Callable[..., Any], X: da.Array, args, *, blocks=None, **kwargs) -> da.Array:
    """``fn(X_block, args[b], offset=, block_index=, **kwargs)`` for every row block ``b`` (or those in ``blocks``).

    ``args`` is a sequence with one (small) object per block of X, shipped only to that block's task. Returns a
    1-D object array of partials, one per block and one chunk per block (the pass engine's
    :func:`dclust._dask.passes.map_partials` with ``grouped=False``).
    """
    return map_partials(fn, X, blocks=blocks, block_args=list(args), grouped=False, **kwargs)


@dataclass
class ColorTile:
    """The linked rows of one colour class, all blocks together, in processing order (by order key), with their
    links. Built once per fit; the pass tasks reuse it."""

    ids: np.ndarray  # node ids (into LinkLayout.nodes)
    rows: np.ndarray  # their global rows
    indptr: np.ndarray  # CSR of their links: one row per node of ``ids``
    cols: np.ndarray  # node ids of the neighbours
    vals: np.ndarray  # signed link values


@dataclass
class LinkLayout:
    """The linked rows of a fit, sorted by global row (so each block's rows are contiguous, ``ptr[b]:ptr[b+1]``)."""

    chunks: tuple[int, ...]
    nodes: np.ndarray  # global rows
    block: np.ndarray
    local: np.ndarray  # row within its block (int32)
    color: np.ndarray
    n_colors: int
    adj: Any  # scipy CSR (n_nodes, n_nodes), signed values
    ptr: np.ndarray  # (n_blocks + 1,)
    pair_a: np.ndarray  # links as node ids (each pair once) and signed values
    pair_b: np.ndarray
    pair_v: np.ndarray
    tiles: list = field(default_factory=list)  # one ColorTile per colour (set_order)

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.size)

    def linked_local(self, b: int) -> np.ndarray:
        """Local rows of block ``b`` that carry a link (sorted)."""
        return self.local[self.ptr[b] : self.ptr[b + 1]]

    def set_order(self, mix: int) -> None:
        """Build the colour tiles: the nodes of each colour in the order of their order keys
        (:func:`dclust.kernels.distances.order_keys` with ``mix``), with the CSR rows of their links."""
        self.tiles = []
        for c in range(self.n_colors):
            ids = np.flatnonzero(self.color == c)
            ids = ids[np.argsort(order_keys(mix, self.nodes[ids]))]  # distinct rows have distinct keys
            sub = self.adj[ids]
            self.tiles.append(ColorTile(ids.astype(np.int64), self.nodes[ids].astype(np.int64),
                                        sub.indptr.astype(np.int64), sub.indices.astype(np.int64),
                                        sub.data.astype(np.float64)))


def build_layout(graph, chunks: tuple[int, ...], mode: str) -> LinkLayout:
    """Colour the link graph (greedy, largest degree first; ``mode="jacobi"``: one class) and lay it out by block."""
    nodes, adj = link_adjacency(graph)
    if mode == "jacobi" or nodes.size == 0:
        color = np.zeros(nodes.size, dtype=np.int32)
    else:
        color = greedy_coloring(graph)[1]
    offsets = block_offsets(chunks)
    block = np.searchsorted(offsets, nodes, side="right") - 1
    ptr = np.searchsorted(block, np.arange(len(chunks) + 1), side="left")
    a, b, s = graph.pairs()
    v = s * graph.weights()
    n_colors = int(color.max()) + 1 if color.size else 0
    local = (nodes - offsets[block]).astype(np.int32)  # (int32: half the bytes in every pass's tasks)
    return LinkLayout(tuple(chunks), nodes, block, local, color, n_colors, adj, ptr,
                      np.searchsorted(nodes, a), np.searchsorted(nodes, b), v.astype(np.float64))
