"""The ``constraints=`` argument of ``fit``, checked beside the class it must be (the estimators import it from
here)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidDataError, InvalidParameterError, message
from ._graph import ConstraintGraph

__all__ = ["check_constraints"]


def check_constraints(name: str, constraints: Any, n_samples: int, row_chunks: tuple[int, ...] | None = None,
                      kind: str = "dask") -> Any:
    """``constraints`` of ``fit``: None or a :class:`dclust.ConstraintGraph` over the ``n_samples`` rows.

    With ``row_chunks`` the graph must be aligned to them; for numpy input (``kind="numpy"``, whose blocks dclust
    chose) a graph over the right rows is re-aligned. Returns the (aligned) graph or None.
    """
    if constraints is None:
        return None
    if not isinstance(constraints, ConstraintGraph):
        raise InvalidParameterError(
            message(f"{name}.fit(constraints=...)", "None or a dclust.ConstraintGraph",
                    f"a {type(constraints).__name__}",
                    "Build one with dclust.ConstraintGraph.from_pairs(i, j, must_link, n_samples=X.shape[0], "
                    "chunks=X.chunks[0]).")
        )
    if constraints.n_samples != n_samples:
        raise InvalidDataError(
            message(f"{name}.fit(constraints=...)", f"a graph over the {n_samples} rows of X",
                    f"a graph over {constraints.n_samples} rows", "Build the constraints for this data.")
        )
    if row_chunks is None:
        return constraints
    if kind == "numpy":
        return constraints.rechunk(row_chunks)
    constraints.check_aligned(row_chunks, n_samples)
    return constraints
