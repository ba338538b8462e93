"""``dclust constraints import``; the links reader of ``--constraints`` (``fit rdpmeans``, ``fit gmpr``, ``plot
links``).

Commands::

    dclust constraints import PAIRS.csv --chunks-like IN.zarr OUT.zarr [--n-samples N] [--no-check-feasible]

A links CSV has a header row with the columns ``i``, ``j`` (row indices of IN, 0-based) and ``type`` (``must`` /
``cannot``, ``ml`` / ``cl`` or ``1`` / ``-1``, case-insensitive), and optionally ``weight`` (a positive confidence
per link). ``constraints import`` turns it into a :class:`dclust.ConstraintGraph` aligned to the row chunks of IN and
writes it with ``ConstraintGraph.to_zarr``; ``fit rdpmeans`` and ``fit gmpr`` read such a Zarr graph or the CSV
itself (the same reader, :func:`dclust.io.read_links`, and checks, with the default feasibility check).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Optional

import typer

import dclust
from dclust.errors import InvalidDataError, message
from dclust.io import read_links

from ._options import _location, example, shared_options, sub_app
from ._session import _Session

__all__ = ["constraints_app", "constraints_import", "load_constraints"]

constraints_app = sub_app("Must-link / cannot-link constraint graphs over the rows of a data set.")

def is_csv(path: str) -> bool:
    return str(path).lower().endswith(".csv")


def graph_from_csv(path: str, n_samples: int, chunks: Any, *, check_feasible: bool = True) -> Any:
    """A ConstraintGraph over ``n_samples`` rows in the row blocks ``chunks``, from a links CSV."""
    pairs = read_links(path)  # the links CSV reader of dclust.io (its checks name the bad line)
    return dclust.ConstraintGraph.from_pairs(
        pairs.i, pairs.j, pairs.must_link, n_samples=n_samples, chunks=chunks, weight=pairs.weight,
        check_feasible=check_feasible,
    )


def load_constraints(path: str, X: Any) -> Any:
    """The links of ``--constraints``: a links CSV, or a Zarr graph (``to_zarr``), aligned to the row chunks of X."""
    if is_csv(path):
        return graph_from_csv(path, X.shape[0], X.chunks[0])
    G = dclust.ConstraintGraph.from_zarr(path)
    if G.n_samples == X.shape[0]:  # the same rows in other blocks: align them (another row count is fit's error)
        G = G.rechunk(X.chunks[0])
    return G


# ---------------------------------------------------------------------------------------------------------------
# constraints import
# ---------------------------------------------------------------------------------------------------------------


@constraints_app.command(
    "import", epilog=example("dclust constraints import links.csv --chunks-like points.zarr links.zarr"))
@shared_options(cluster=False)
def constraints_import(
    s: _Session,
    pairs_csv: Annotated[
        str, typer.Argument(metavar="PAIRS.csv", help="Links CSV with the columns i, j, type (and optionally weight).")
    ],
    out: Annotated[str, typer.Argument(metavar="OUT.zarr", help="New Zarr store for the constraint graph.")],
    chunks_like: Annotated[
        str,
        typer.Option("--chunks-like", metavar="IN", help="Data whose row count and row chunks to align to (any input "
                                                         "format)."),
    ],
    n_samples: Annotated[
        Optional[int],
        typer.Option("--n-samples", min=1, help="Number of rows the links refer to (checked against IN)."),
    ] = None,
    check_feasible: Annotated[
        bool,
        typer.Option("--check-feasible/--no-check-feasible",
                     help="Reject cannot-links inside a must-link component (off: noisy links, for RDP-means)."),
    ] = True,
) -> None:
    """Turn a CSV of must-/cannot-links into a ConstraintGraph aligned to the row chunks of IN."""
    s.check_outputs({"OUT.zarr": out}, (pairs_csv, chunks_like))
    X, n, _ = s.open_input(chunks_like)  # metadata only
    if n_samples is not None and n_samples != n:
        raise InvalidDataError(message(
            "--n-samples", f"the row count of --chunks-like {chunks_like!r} ({n})", str(n_samples),
            "Drop --n-samples or give the data the links refer to."))
    with s.live(cluster=False) as display:
        t = time.perf_counter()
        with display.step(f"reading links from {pairs_csv}"):
            pairs = read_links(pairs_csv)
            G = dclust.ConstraintGraph.from_pairs(
                pairs.i, pairs.j, pairs.must_link, n_samples=n, chunks=X.chunks[0], weight=pairs.weight,
                check_feasible=check_feasible,
            )
        with display.step(f"writing {G.n_links:,} links to {out}"):
            G.to_zarr(out, overwrite=s.overwrite)
        seconds = time.perf_counter() - t
    result = {
        "command": "constraints import", "input": _location(pairs_csv),
        "chunks_like": _location(chunks_like), "component": s.component, "output": _location(out),
        "n_samples": n, "n_row_blocks": len(X.chunks[0]), "n_pairs_read": int(pairs.i.size),
        "n_must": G.n_must, "n_cannot": G.n_cannot, "n_links": G.n_links, "n_blocks": G.n_blocks,
        "weighted": pairs.weight is not None, "check_feasible": check_feasible, "nbytes": G.nbytes,
        "seconds": round(seconds, 3),
    }
    rows = {"links": f"{G.n_must:,} must, {G.n_cannot:,} cannot ({int(pairs.i.size):,} rows read)",
            "rows (N)": n, "row blocks": len(X.chunks[0]), "weighted": pairs.weight is not None,
            "graph": out}
    s.report(result, "constraints import", rows)
