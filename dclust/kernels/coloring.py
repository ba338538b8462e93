"""Greedy point-level colouring of the link graph (docs/algorithms.md 8.4): rows of one colour share no link."""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

__all__ = ["greedy_coloring", "link_adjacency"]


def link_adjacency(graph) -> tuple[np.ndarray, sp.csr_matrix]:
    """``(nodes, A)``: the sorted linked rows and the symmetric CSR adjacency between them (values = signed
    link weights), of shape ``(n_nodes, n_nodes)``. O(links) memory."""
    a, b, _ = graph.pairs()
    v = graph._coo()[2]
    nodes = np.unique(np.concatenate([a, b]))
    ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    m = nodes.size
    A = sp.csr_matrix((np.concatenate([v, v]), (np.concatenate([ia, ib]), np.concatenate([ib, ia]))), shape=(m, m))
    A.sort_indices()
    return nodes, A


@numba.njit(inline="always")
def mark_neighbor_labels(indptr, indices, labels, v, mark):
    """``mark[labels[u]] = v`` for every neighbour ``u`` of ``v`` in the CSR graph ``(indptr, indices)`` that has
    a label (>= 0): afterwards ``mark[c] == v`` says that label ``c`` is taken by a neighbour of ``v``."""
    for p in range(indptr[v], indptr[v + 1]):
        c = labels[indices[p]]
        if c >= 0:
            mark[c] = v


@numba.njit(cache=True, nogil=True)
def _greedy(indptr, indices, order):
    m = indptr.size - 1
    color = np.full(m, -1, dtype=np.int32)
    mark = np.full(m + 1, -1, dtype=np.int64)  # mark[c] == v: colour c is used by a neighbour of v
    for t in range(order.size):
        v = order[t]
        mark_neighbor_labels(indptr, indices, color, v, mark)
        c = 0
        while mark[c] == v:
            c += 1
        color[v] = c
    return color


def greedy_coloring(graph) -> tuple[np.ndarray, np.ndarray]:
    """Colour the linked rows so that no link joins two rows of one colour.

    Greedy, largest degree first (ties: lowest row), each row taking the smallest colour unused by its
    neighbours; at most ``max_degree + 1`` colours.

    Parameters
    ----------
    graph : ConstraintGraph

    Returns
    -------
    nodes : ndarray of int64, shape (n_nodes,)
        Sorted rows carrying at least one link.
    colour : ndarray of int32, shape (n_nodes,)
        Colour of each node, ``0 .. n_colours - 1``.

    Examples
    --------
    >>> from dclust.constraints import ConstraintGraph, greedy_coloring
    >>> G = ConstraintGraph.from_pairs([0, 1, 0], [1, 2, 2], [True, True, True], n_samples=4)
    >>> greedy_coloring(G)[1].tolist()
    [0, 1, 2]
    """
    nodes, A = link_adjacency(graph)
    degree = np.diff(A.indptr)
    order = np.lexsort((np.arange(nodes.size), -degree)).astype(np.int64)
    color = _greedy(A.indptr.astype(np.int64), A.indices.astype(np.int64), order)
    return nodes, color
