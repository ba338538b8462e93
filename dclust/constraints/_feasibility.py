"""Feasibility of must/cannot links: direct conflicts and contradictions through the must-link closure.

Everything here is O(number of links): rows that carry no link never appear.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order, connected_components

from ..errors import InfeasibleConstraintsError, message

__all__ = ["must_link_components", "check_closure", "conflict_error", "self_link_error", "MAX_CHAIN_SHOWN"]

#: Longest must-link chain spelled out in an error message (longer chains are elided in the middle).
MAX_CHAIN_SHOWN = 12


def must_link_components(i: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray, sp.csr_matrix]:
    """Connected components of the must-link graph (the union-find closure), on its own nodes only.

    Parameters
    ----------
    i, j : ndarray of int64, shape (n_must,)
        Endpoints of the must-links (global row indices).

    Returns
    -------
    nodes : ndarray of int64, shape (n_nodes,)
        Sorted distinct rows touched by a must-link.
    component : ndarray of int32, shape (n_nodes,)
        Component id of every node.
    adjacency : scipy.sparse.csr_matrix, shape (n_nodes, n_nodes)
        The symmetric must-link graph on ``nodes`` (used to spell out chains).
    """
    nodes = np.unique(np.concatenate([i, j]))
    a = np.searchsorted(nodes, i)
    b = np.searchsorted(nodes, j)
    m = nodes.size
    adj = sp.coo_matrix((np.ones(a.size, dtype=np.int8), (a, b)), shape=(m, m)).tocsr()
    adj = (adj + adj.T).tocsr()
    if m == 0:
        return nodes, np.zeros(0, dtype=np.int32), adj
    _, comp = connected_components(adj, directed=False)
    return nodes, comp.astype(np.int32), adj


def _chain(nodes: np.ndarray, adj: sp.csr_matrix, a: int, b: int) -> list[int]:
    """Shortest must-link path from row ``a`` to row ``b`` (both in one component)."""
    ia, ib = int(np.searchsorted(nodes, a)), int(np.searchsorted(nodes, b))
    _, pred = breadth_first_order(adj, ia, directed=False, return_predecessors=True)
    path = [ib]
    while path[-1] != ia:
        path.append(int(pred[path[-1]]))
    return [int(nodes[p]) for p in reversed(path)]


def _show_chain(chain: list[int]) -> str:
    if len(chain) > MAX_CHAIN_SHOWN:
        head, tail = chain[: MAX_CHAIN_SHOWN // 2], chain[-MAX_CHAIN_SHOWN // 2 :]
        return " -> ".join(map(str, head)) + f" -> ... ({len(chain) - MAX_CHAIN_SHOWN} more) -> " + " -> ".join(
            map(str, tail)
        )
    return " -> ".join(map(str, chain))


def check_closure(must_i: np.ndarray, must_j: np.ndarray, cannot_i: np.ndarray, cannot_j: np.ndarray) -> None:
    """Raise :class:`InfeasibleConstraintsError` if a cannot-link joins two rows of one must-link component.

    The message names the first such cannot-link (lowest ``(i, j)``), the must-link chain that connects its
    endpoints and how many cannot-links are contradicted in all.
    """
    if len(must_i) == 0 or len(cannot_i) == 0:
        return
    nodes, comp, adj = must_link_components(np.asarray(must_i), np.asarray(must_j))
    ci, cj = np.asarray(cannot_i), np.asarray(cannot_j)
    pi, pj = np.searchsorted(nodes, ci), np.searchsorted(nodes, cj)
    pi_c, pj_c = np.minimum(pi, nodes.size - 1), np.minimum(pj, nodes.size - 1)
    in_i = nodes[pi_c] == ci
    in_j = nodes[pj_c] == cj
    bad = np.flatnonzero(in_i & in_j & (comp[pi_c] == comp[pj_c]))
    if bad.size == 0:
        return
    first = bad[np.lexsort((cj[bad], ci[bad]))[0]]
    a, b = int(ci[first]), int(cj[first])
    chain = _chain(nodes, adj, a, b)
    raise InfeasibleConstraintsError(
        message(
            "ConstraintGraph",
            "constraints that some clustering satisfies (no cannot-link inside a must-link component)",
            f"the cannot-link ({a}, {b}) while the must-links chain {_show_chain(chain)} puts rows {a} and {b} "
            f"in one cluster ({bad.size} cannot-link(s) contradicted in all)",
            "Remove one link of the chain or the cannot-link; for noisy side information pass "
            "check_feasible=False (RDP-means treats links softly).",
        )
    )


def conflict_error(i: np.ndarray, j: np.ndarray) -> InfeasibleConstraintsError:
    """The error for pairs given as both must-link and cannot-link (``i``, ``j``: those pairs, canonical)."""
    a, b = int(i[0]), int(j[0])
    return InfeasibleConstraintsError(
        message(
            "ConstraintGraph",
            "every pair to be either a must-link or a cannot-link",
            f"the pair ({a}, {b}) as both ({i.size} such pair(s) in all)",
            "Drop one of the two links for each such pair (decide which observation to trust).",
        )
    )


def self_link_error(rows: np.ndarray) -> InfeasibleConstraintsError:
    """The error for cannot-links from a row to itself (``rows``: those rows, sorted): no clustering satisfies one."""
    shown = ", ".join(f"({r}, {r})" for r in rows[:5].tolist()) + (", ..." if rows.size > 5 else "")
    return InfeasibleConstraintsError(
        message(
            "ConstraintGraph",
            "cannot-links between two different rows (a row is always in its own cluster)",
            f"the cannot-link(s) {shown} from a row to itself ({rows.size} in all)",
            "Drop those links, or fix the row indices they were built from (an off-by-one or a bad join).",
        )
    )
