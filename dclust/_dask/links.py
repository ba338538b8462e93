"""Driver-side layout of the linked rows for RDP-means (docs/algorithms.md 8.4), and per-block maps with arguments.

Everything here is O(number of links): the linked rows (their block, local row, colour and processing rank),
the signed adjacency between them, and per colour phase and block the CSR rows of that phase's points with the
list of neighbours whose labels the block needs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import dask.array as da
import numpy as np

from ..kernels.coloring import greedy_coloring, link_adjacency
from .passes import block_offsets, map_partials

__all__ = [
    "LinkLayout", "PhaseBlock", "build_layout", "object_array", "fresh_name", "map_with_args", "map_parts",
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


def _call_parts(fn, kwargs, p, a):
    out = np.empty(1, dtype=object)
    out[0] = fn(p[0], a[0], **kwargs)
    return out


def map_parts(fn: Callable[..., Any], parts: da.Array, args, blocks, **kwargs) -> da.Array:
    """``fn(parts[b], args[k], **kwargs)`` for the k-th block ``b`` of ``blocks``: a map over persisted per-block
    objects (the linked rows), returning a 1-D object array with one result per listed block."""
    blocks = [int(b) for b in blocks]
    A = da.from_array(object_array(args), chunks=1, name=False)
    return da.blockwise(
        _call_parts, "i", fn, None, kwargs, None, parts.blocks[blocks], "i", A, "i", dtype=object,
        concatenate=True, align_arrays=False, meta=np.empty(0, dtype=object), name=fresh_name(fn),
    )


@dataclass
class PhaseBlock:
    """The rows of one colour in one block, in processing order, with their links."""

    ids: np.ndarray  # node ids (into LinkLayout.nodes)
    sel: np.ndarray  # slots into the block's linked rows
    indptr: np.ndarray
    cols: np.ndarray  # into nb
    vals: np.ndarray  # signed link values
    nb: np.ndarray  # node ids of the neighbours


@dataclass
class LinkLayout:
    """The linked rows of a fit, sorted by global row (so each block's rows are contiguous, ``ptr[b]:ptr[b+1]``)."""

    chunks: tuple[int, ...]
    nodes: np.ndarray  # global rows
    block: np.ndarray
    local: np.ndarray  # row within its block
    color: np.ndarray
    n_colors: int
    adj: Any  # scipy CSR (n_nodes, n_nodes), signed values
    ptr: np.ndarray  # (n_blocks + 1,)
    pair_a: np.ndarray  # links as node ids (each pair once) and signed values
    pair_b: np.ndarray
    pair_v: np.ndarray
    rank: np.ndarray | None = None  # position of each node in its block's permutation
    phases: list = field(default_factory=list)  # phases[c][b] -> PhaseBlock or None
    phase_parts: Any = None  # all linked rows and the phases, gathered and persisted (a Delayed) on first use

    @property
    def n_nodes(self) -> int:
        return int(self.nodes.size)

    def linked_local(self, b: int) -> np.ndarray:
        """Local rows of block ``b`` that carry a link (sorted)."""
        return self.local[self.ptr[b] : self.ptr[b + 1]]

    def set_ranks(self, ranks_by_block) -> None:
        """Record the processing ranks (from the blocks) and build the colour phases."""
        self.rank = np.concatenate([np.asarray(r, dtype=np.int64) for r in ranks_by_block]) if len(ranks_by_block) \
            else np.zeros(0, np.int64)
        nb_blocks = len(self.chunks)
        self.phases = []
        for c in range(self.n_colors):
            per_block = []
            for b in range(nb_blocks):
                lo, hi = int(self.ptr[b]), int(self.ptr[b + 1])
                slots = np.flatnonzero(self.color[lo:hi] == c)
                if slots.size == 0:
                    per_block.append(None)
                    continue
                slots = slots[np.argsort(self.rank[lo:hi][slots], kind="stable")]
                ids = slots + lo
                sub = self.adj[ids]
                nb = np.unique(sub.indices)
                per_block.append(PhaseBlock(ids.astype(np.int64), slots.astype(np.int64), sub.indptr.astype(np.int64),
                                            np.searchsorted(nb, sub.indices).astype(np.int64),
                                            sub.data.astype(np.float64), nb.astype(np.int64)))
            self.phases.append(per_block)


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
    return LinkLayout(tuple(chunks), nodes, block, nodes - offsets[block], color, n_colors, adj, ptr,
                      np.searchsorted(nodes, a), np.searchsorted(nodes, b), v.astype(np.float64))
