"""How well a labeling respects must-links and cannot-links (constrained fits: RDP-means, GM-PR, COP-k-means)."""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np

from ..constraints import ConstraintGraph
from ..errors import InvalidDataError, InvalidParameterError, message
from ._contingency import _check_labels

__all__ = ["link_satisfaction"]


def link_satisfaction(labels: Any, constraints: ConstraintGraph) -> dict[str, Any]:
    """Counts and fractions of satisfied must-links (same label) and cannot-links (different labels).

    Only the labels of linked rows are read (``constraints.nodes()``; for dask labels, just those entries), so the
    cost is O(#links), never O(N) on the driver.

    Parameters
    ----------
    labels : array-like or dask.array.Array, shape (n_samples,)
        Integer labels of the rows the graph refers to.
    constraints : dclust.ConstraintGraph

    Returns
    -------
    dict
        ``must_satisfied``, ``must_total``, ``cannot_satisfied``, ``cannot_total`` (ints) and
        ``must_fraction``, ``cannot_fraction``, ``fraction`` (floats; None where there are no such links).

    Raises
    ------
    InvalidParameterError
        ``constraints`` is not a ConstraintGraph.
    InvalidDataError
        Labels that are not 1-D integers, or of another length than the graph's ``n_samples``.

    Examples
    --------
    >>> import dclust
    >>> from dclust.metrics import link_satisfaction
    >>> G = dclust.ConstraintGraph.from_pairs([0, 1], [1, 2], [True, False], n_samples=4)
    >>> link_satisfaction([0, 0, 0, 1], G)["cannot_fraction"]
    0.0
    """
    if not isinstance(constraints, ConstraintGraph):
        raise InvalidParameterError(
            message("constraints", "a dclust.ConstraintGraph", type(constraints).__name__,
                    "Build one with dclust.ConstraintGraph.from_pairs(i, j, must_link, n_samples=N).")
        )
    y = _check_labels(labels, "labels")
    if y.shape[0] != constraints.n_samples:
        raise InvalidDataError(
            message("labels", f"one label per row of the graph ({constraints.n_samples})", f"{y.shape[0]} labels",
                    "Pass the labels of the rows the links refer to.")
        )
    i, j, sign = constraints.pairs()
    nodes = constraints.nodes()
    at = np.asarray(y[nodes].compute() if isinstance(y, da.Array) else np.asarray(y)[nodes])
    same = at[np.searchsorted(nodes, i)] == at[np.searchsorted(nodes, j)]
    must, cannot = sign > 0, sign < 0
    out: dict[str, Any] = {
        "must_satisfied": int((same & must).sum()), "must_total": int(must.sum()),
        "cannot_satisfied": int((~same & cannot).sum()), "cannot_total": int(cannot.sum()),
    }
    for kind in ("must", "cannot"):
        total = out[f"{kind}_total"]
        out[f"{kind}_fraction"] = out[f"{kind}_satisfied"] / total if total else None
    n = out["must_total"] + out["cannot_total"]
    out["fraction"] = (out["must_satisfied"] + out["cannot_satisfied"]) / n if n else None
    return out
