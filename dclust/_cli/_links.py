"""``dclust constraints import`` and ``dclust fit gmpr``; ``--constraints`` (a Zarr graph or a links CSV, read by
:func:`dclust.io.read_links`) shared with ``fit rdpmeans``.

Commands::

    dclust constraints import PAIRS.csv --chunks-like IN.zarr OUT.zarr [--n-samples N] [--no-check-feasible]
    dclust fit gmpr IN.zarr --classes C [--clusters-per-class M] [--constraints LINKS.zarr|LINKS.csv]
                    [--covariance full|diag] --labels OUT.zarr --model MODEL.zarr [--seed S] [--max-iter M]
                    [--checkpoint CK]

A links CSV has a header row with the columns ``i``, ``j`` (row indices of IN, 0-based) and ``type`` (``must`` /
``cannot``, ``ml`` / ``cl`` or ``1`` / ``-1``, case-insensitive), and optionally ``weight`` (a positive confidence
per link). ``constraints import`` turns it into a :class:`dclust.ConstraintGraph` aligned to the row chunks of IN and
writes it with ``ConstraintGraph.to_zarr``; ``fit rdpmeans`` and ``fit gmpr`` read such a Zarr graph or the CSV
itself (the same reader and checks, with the default feasibility check). ``fit gmpr`` writes the labels of the
fitted mixture for the rows of IN, using the links (linked rows get their pair posterior, see ``GMPR.predict_proba``).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Annotated, Any, Optional

import numpy as np
import typer

import dclust
from dclust.errors import InvalidDataError, message
from dclust.io import read_links

from ._display import learned_attributes
from ._options import (
    _location,
    ConstraintsOpt,
    FitCheckpointOpt,
    InputArg,
    LabelsOpt,
    MaxIterOpt,
    ModelOpt,
    SeedOpt,
    _checkpoint_row,
    _estimator_params,
    shared_options,
)
from ._session import _Session
from .main import app, fit_app

__all__ = ["constraints_app", "constraints_import", "fit_gmpr", "load_constraints"]

constraints_app = typer.Typer(
    help="Must-link / cannot-link constraint graphs over the rows of a data set.", no_args_is_help=True
)
app.add_typer(constraints_app, name="constraints")


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


@constraints_app.command("import")
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


# ---------------------------------------------------------------------------------------------------------------
# fit gmpr
# ---------------------------------------------------------------------------------------------------------------


class Covariance(str, Enum):
    full = "full"
    diag = "diag"


@fit_app.command("gmpr")
@shared_options()
def fit_gmpr(
    s: _Session,
    input_path: InputArg,
    classes: Annotated[int, typer.Option("--classes", min=1, help="Number of classes (the output labels).")],
    labels: LabelsOpt,
    model: ModelOpt,
    clusters_per_class: Annotated[
        int, typer.Option("--clusters-per-class", min=1, help="Gaussian sub-clusters per class.")
    ] = 1,
    constraints: ConstraintsOpt = None,
    covariance: Annotated[Covariance, typer.Option("--covariance", help="Covariance of every Gaussian.")] = (
        Covariance.full
    ),
    seed: SeedOpt = None,
    max_iter: MaxIterOpt = None,
    checkpoint: FitCheckpointOpt = None,
) -> None:
    """GM-PR: EM for a Gaussian mixture per class, with must-links and cannot-links between classes."""
    params = _estimator_params({"n_classes": classes, "clusters_per_class": clusters_per_class,
                                "covariance_type": covariance.value, "random_state": seed, "checkpoint": checkpoint},
                               max_iter=max_iter)
    estimator = dclust.GMPR(**params)
    resume = s.check_outputs({"--labels": labels, "--model": model},
                             (input_path, constraints) if constraints else (input_path,), checkpoint=checkpoint)
    X, n, d = s.open_input(input_path)
    G = load_constraints(constraints, X) if constraints else None
    links = f" with {G.n_must:,} must- and {G.n_cannot:,} cannot-links" if G is not None else ""
    fit_seconds, labels_seconds = s.fit_and_write(
        estimator, X, f"GMPR on {n:,} x {d}{links}", labels, model, resumed_from=checkpoint if resume else None,
        labels_of=lambda: estimator.predict(X, constraints=G), constraints=G,
    )
    scalars, _ = learned_attributes(estimator)
    n_must, n_cannot = (G.n_must, G.n_cannot) if G is not None else (0, 0)
    result = {
        "command": "fit gmpr", "estimator": "GMPR", "input": _location(input_path),
        "component": s.component, "n_samples": n, "n_features": d,
        "constraints": _location(constraints), "n_must": n_must,
        "n_cannot": n_cannot, "labels": _location(labels), "model": _location(model),
        "params": estimator.get_params(), "n_classes": classes, "clusters_per_class": clusters_per_class,
        "checkpoint": _location(checkpoint), "resumed": resume,
        "class_weights": np.asarray(estimator.weights_).tolist(), "learned": scalars,
        "objective_history": list(estimator.objective_history_),
        "seconds": {"fit": round(fit_seconds, 3), "labels": round(labels_seconds, 3)},
    }
    iters = max(1, int(estimator.n_iter_))
    rows: dict[str, Any] = {
        "estimator": "GMPR", "data": f"{n:,} x {d}", "links": f"{n_must:,} must, {n_cannot:,} cannot",
        "classes": classes, "clusters per class": clusters_per_class, "covariance": covariance.value,
        "log-likelihood": estimator.log_likelihood_, "iterations": estimator.n_iter_,
        "converged": estimator.converged_, "fit seconds": round(fit_seconds, 2),
        "seconds / iteration": round(s.display.seconds_per_iteration() or fit_seconds / iters, 3),
        "labels": labels, "model": model,
        **_checkpoint_row(checkpoint, resume),
    }
    s.report(result, "fit GMPR", rows)
