"""``dclust fit bpmeans`` and ``dclust fit rdpmeans``.

Commands::

    dclust fit bpmeans  IN.zarr --lam L --features OUT.zarr [--model MODEL.zarr] [--allocation Z.zarr] [--seed S]
                                [--checkpoint CK]
    dclust fit rdpmeans IN.zarr (--lam L | --k K) --constraints LINKS.zarr|LINKS.csv --labels OUT.zarr --model MODEL.zarr
                                [--checkpoint CK]

``fit bpmeans`` writes the learned features (the K x D matrix ``features_``) and, with ``--allocation``, the
binary allocation Z of the training rows (``allocation_``, N x K uint8, streamed chunk by chunk); with
``--checkpoint CK`` it saves the fit's state in CK after every pass and, when CK exists, resumes from it (as
``fit kmeans``). ``fit rdpmeans``
reads a :class:`dclust.ConstraintGraph` written by ``ConstraintGraph.to_zarr``, or a links CSV (columns i, j, type
and optionally weight; see :mod:`dclust._cli._links`), and writes the labels of the fit
(``labels_``, which account for the links).
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Annotated, Any, Optional

import typer

import dclust

from . import _links  # the links CSV reader (a module import: _links imports main, which imports this module)
from ._display import learned_attributes
from ._options import (
    _location,
    ClusterLamOpt,
    ConstraintsOpt,
    FitCheckpointOpt,
    InputArg,
    LabelsOpt,
    MaxIterOpt,
    ModelOpt,
    SeedOpt,
    TargetKOpt,
    _checkpoint_row,
    _estimator_params,
    _exactly_one_of_k_and_lam,
    _positive,
    shared_options,
)
from ._session import _Session
from .main import fit_app

__all__ = ["fit_bpmeans", "fit_rdpmeans"]


class BPInit(str, Enum):
    sample = "sample"
    greedy = "greedy"
    empty = "empty"


@fit_app.command("bpmeans")
@shared_options()
def fit_bpmeans(
    s: _Session,
    input_path: InputArg,
    lam: Annotated[float, typer.Option("--lam", callback=_positive, help="Penalty per latent feature (> 0).")],
    features: Annotated[
        str, typer.Option("--features", metavar="OUT.zarr", help="Where to write the K x D feature matrix (Zarr).")
    ],
    model: Annotated[
        Optional[str], typer.Option("--model", metavar="MODEL.zarr", help="Also save the fitted model here.")
    ] = None,
    allocation: Annotated[
        Optional[str],
        typer.Option("--allocation", metavar="Z.zarr", help="Also write the N x K binary allocation Z (uint8)."),
    ] = None,
    init: Annotated[
        BPInit, typer.Option("--init", help="Initial features: restarts on a sample (default), greedy draws, or none.")
    ] = BPInit.sample,
    max_features: Annotated[
        Optional[int], typer.Option("--max-features", min=1, help="Bound on K (default: the estimator's, 100).")
    ] = None,
    seed: SeedOpt = None,
    max_iter: MaxIterOpt = None,
    checkpoint: FitCheckpointOpt = None,
) -> None:
    """BP-means: latent binary features, the number of features following from the penalty --lam."""
    params = _estimator_params({"lam": lam, "init": init.value, "random_state": seed, "checkpoint": checkpoint},
                               max_iter=max_iter, max_features=max_features)
    estimator = dclust.BPMeans(**params)
    outputs = {"--features": features, **({"--model": model} if model else {}),
               **({"--allocation": allocation} if allocation else {})}
    resume = s.check_outputs(outputs, (input_path,), checkpoint=checkpoint)
    X, n, d = s.open_input(input_path)
    seconds: dict[str, float] = {}
    with s.live() as display:
        seconds["fit"] = s.fit(display, estimator, X, f"BPMeans on {n:,} x {d}",
                               resumed_from=checkpoint if resume else None, chunk_progress=False)
        with display.step(f"writing the {estimator.n_latent_features_} x {d} features to {features}"):
            dclust.write_array(estimator.features_, features, overwrite=s.overwrite)
        if allocation:
            t = time.perf_counter()
            with display.step(f"writing the allocation Z to {allocation}"):
                dclust.write_array(estimator.allocation_, allocation, overwrite=s.overwrite)
            seconds["allocation"] = time.perf_counter() - t
        if model:
            s.save_model(display, estimator, model)
    scalars, _ = learned_attributes(estimator)
    k = int(estimator.n_latent_features_)
    result = {
        "command": "fit bpmeans", "estimator": "BPMeans", "input": _location(input_path),
        "component": s.component, "n_samples": n, "n_features": d, "features": _location(features),
        "allocation": _location(allocation),
        "model": _location(model), "params": estimator.get_params(),
        "checkpoint": _location(checkpoint), "resumed": resume,
        "n_latent_features": k, "learned": scalars, "objective_history": list(estimator.objective_history_),
        "seconds": {key: round(v, 3) for key, v in seconds.items()},
    }
    rows: dict[str, Any] = {"estimator": "BPMeans", "data": f"{n:,} x {d}", "latent features (K)": k,
                            "objective": estimator.objective_, "iterations": estimator.n_iter_,
                            "converged": estimator.converged_, "fit seconds": round(seconds["fit"], 2),
                            "features": features}
    if allocation:
        rows["allocation"] = allocation
    if model:
        rows["model"] = model
    s.report(result, "fit BPMeans", {**rows, **_checkpoint_row(checkpoint, resume)})


@fit_app.command("rdpmeans")
@shared_options()
def fit_rdpmeans(
    s: _Session,
    input_path: InputArg,
    k: TargetKOpt = None,
    lam: ClusterLamOpt = None,
    constraints: ConstraintsOpt = ...,
    labels: LabelsOpt = ...,
    model: ModelOpt = ...,
    xi0: Annotated[
        Optional[float], typer.Option("--xi0", callback=_positive, help="Link weight of the first iteration (> 0).")
    ] = None,
    xi_rate: Annotated[
        Optional[float], typer.Option("--xi-rate", min=1.0, help="Factor on the link weight per iteration (>= 1).")
    ] = None,
    seed: SeedOpt = None,
    max_iter: MaxIterOpt = None,
    checkpoint: FitCheckpointOpt = None,
) -> None:
    """RDP-means: DP-means rewarding must-links and penalising cannot-links inside clusters (soft side information)."""
    _exactly_one_of_k_and_lam(k, lam)
    params = _estimator_params({"lam": lam, "n_clusters": k, "random_state": seed, "checkpoint": checkpoint},
                               max_iter=max_iter, xi0=xi0, xi_rate=xi_rate)
    estimator = dclust.RDPMeans(**params)
    resume = s.check_outputs({"--labels": labels, "--model": model}, (input_path, constraints), checkpoint=checkpoint)
    X, n, d = s.open_input(input_path)
    G = _links.load_constraints(constraints, X)  # a Zarr graph realigned to X's row blocks, or a links CSV
    fit_seconds, labels_seconds = s.fit_and_write(
        estimator, X, f"RDPMeans on {n:,} x {d} with {G.n_must:,} must- and {G.n_cannot:,} cannot-links", labels,
        model, resumed_from=checkpoint if resume else None, chunk_progress=False,
        labels_of=lambda: estimator.labels_, constraints=G,
    )
    scalars, _ = learned_attributes(estimator)
    must_split, cannot_joined = estimator.n_violated_
    result = {
        "command": "fit rdpmeans", "estimator": "RDPMeans", "input": _location(input_path),
        "component": s.component, "n_samples": n, "n_features": d, "constraints": _location(constraints),
        "n_must": G.n_must, "n_cannot": G.n_cannot, "labels": _location(labels),
        "model": _location(model), "params": estimator.get_params(), "n_clusters": estimator.n_clusters_,
        "checkpoint": _location(checkpoint), "resumed": resume,
        "learned": scalars, "violated": {"must_links_split": must_split, "cannot_links_joined": cannot_joined},
        "objective_history": list(estimator.objective_history_), "xi_history": list(estimator.xi_history_),
        "seconds": {"fit": round(fit_seconds, 3), "labels": round(labels_seconds, 3)},
    }
    rows = {"estimator": "RDPMeans", "data": f"{n:,} x {d}", "links": f"{G.n_must:,} must, {G.n_cannot:,} cannot",
            "clusters (K)": estimator.n_clusters_, "lam": estimator.lam_, "objective": estimator.objective_,
            "must-links split": must_split, "cannot-links joined": cannot_joined,
            "fit seconds": round(fit_seconds, 2), "labels": labels, "model": model,
            **_checkpoint_row(checkpoint, resume)}
    s.report(result, "fit RDPMeans", rows)
