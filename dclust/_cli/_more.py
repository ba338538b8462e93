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

import os
import time
from enum import Enum
from typing import Annotated, Any, Optional

import typer

import dclust

from . import _links  # the links CSV reader (a module import: _links imports main, which imports this module)
from ._display import learned_attributes
from ._cluster import TlsCaOpt, TlsCertOpt, TlsKeyOpt
from .main import (
    ComponentOpt,
    DebugOpt,
    FitCheckpointOpt,
    InputArg,
    JsonOpt,
    LabelsOpt,
    MaxIterOpt,
    MemoryLimitOpt,
    ModelOpt,
    OverwriteOpt,
    QuietOpt,
    SchedulerOpt,
    SeedOpt,
    _check_outputs,
    _command,
    _positive,
    _usage,
    fit_app,
)

__all__ = ["fit_bpmeans", "fit_rdpmeans"]


class BPInit(str, Enum):
    sample = "sample"
    greedy = "greedy"
    empty = "empty"


def _shape(X: Any) -> tuple[int, int]:
    return X.shape[0], (X.shape[1] if X.ndim > 1 else 1)


@fit_app.command("bpmeans")
def fit_bpmeans(
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
    init: Annotated[BPInit, typer.Option("--init", help="Initial features: restarts on a sample (default), greedy draws, or none.")] = BPInit.sample,
    max_features: Annotated[
        Optional[int], typer.Option("--max-features", min=1, help="Bound on K (default: the estimator's, 100).")
    ] = None,
    seed: SeedOpt = None,
    max_iter: MaxIterOpt = None,
    checkpoint: FitCheckpointOpt = None,
    component: ComponentOpt = None,
    overwrite: OverwriteOpt = False,
    scheduler: SchedulerOpt = None,
    tls_ca: TlsCaOpt = None, tls_cert: TlsCertOpt = None, tls_key: TlsKeyOpt = None,
    memory_limit: MemoryLimitOpt = "auto",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """BP-means: latent binary features, the number of features following from the penalty --lam."""
    with _command(json_out, quiet, debug) as s:
        params: dict[str, Any] = {"lam": lam, "init": init.value, "random_state": seed, "checkpoint": checkpoint}
        if max_iter is not None:
            params["max_iter"] = max_iter
        if max_features is not None:
            params["max_features"] = max_features
        estimator = dclust.BPMeans(**params)
        resume = checkpoint is not None and os.path.lexists(checkpoint)
        outputs = {"--features": features, **({"--model": model} if model else {}),
                   **({"--allocation": allocation} if allocation else {}),
                   **({"--checkpoint": checkpoint} if checkpoint is not None and not resume else {})}
        _check_outputs(outputs, overwrite, inputs=(input_path,) + ((checkpoint,) if resume else ()))
        X = dclust.open_array(input_path, component=component)
        n, d = _shape(X)
        seconds: dict[str, float] = {}
        with s.live(scheduler, memory_limit) as display:
            if resume:
                display.message(f"resuming from the checkpoint {checkpoint}")
            t = time.perf_counter()
            with display.fit(f"BPMeans on {n:,} x {d}"):
                estimator.fit(X)
            seconds["fit"] = time.perf_counter() - t
            with display.step(f"writing the {estimator.n_latent_features_} x {d} features to {features}"):
                dclust.write_array(estimator.features_, features, overwrite=overwrite)
            if allocation:
                t = time.perf_counter()
                with display.step(f"writing the allocation Z to {allocation}"):
                    dclust.write_array(estimator.allocation_, allocation, overwrite=overwrite)
                seconds["allocation"] = time.perf_counter() - t
            if model:
                with display.step(f"saving the model to {model}"):
                    dclust.save(estimator, model, overwrite=overwrite)
        scalars, _ = learned_attributes(estimator)
        k = int(estimator.n_latent_features_)
        result = {
            "command": "fit bpmeans", "estimator": "BPMeans", "input": os.path.abspath(input_path),
            "component": component, "n_samples": n, "n_features": d, "features": os.path.abspath(features),
            "allocation": os.path.abspath(allocation) if allocation else None,
            "model": os.path.abspath(model) if model else None, "params": estimator.get_params(),
            "checkpoint": os.path.abspath(checkpoint) if checkpoint else None, "resumed": resume,
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
        if checkpoint:
            rows["checkpoint"] = f"{checkpoint} ({'resumed' if resume else 'new'})"
        s.report(result, "fit BPMeans", rows)


@fit_app.command("rdpmeans")
def fit_rdpmeans(
    input_path: InputArg,
    k: Annotated[
        Optional[int], typer.Option("--k", min=1, help="Target number of clusters: lam from the furthest-first heuristic.")
    ] = None,
    lam: Annotated[
        Optional[float],
        typer.Option("--lam", callback=_positive, help="Penalty per cluster (a squared distance, > 0)."),
    ] = None,
    constraints: Annotated[
        str,
        typer.Option("--constraints", metavar="LINKS.zarr|LINKS.csv",
                     help="Must/cannot links over the rows of IN: a graph (ConstraintGraph.to_zarr) or a links CSV."),
    ] = ...,
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
    component: ComponentOpt = None,
    overwrite: OverwriteOpt = False,
    scheduler: SchedulerOpt = None,
    tls_ca: TlsCaOpt = None, tls_cert: TlsCertOpt = None, tls_key: TlsKeyOpt = None,
    memory_limit: MemoryLimitOpt = "auto",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """RDP-means: DP-means rewarding must-links and penalising cannot-links inside clusters (soft side information)."""
    if (k is None) == (lam is None):
        raise _usage("give exactly one of --k (target number of clusters) and --lam (penalty per cluster).")
    with _command(json_out, quiet, debug) as s:
        params: dict[str, Any] = {"lam": lam, "n_clusters": k, "random_state": seed, "checkpoint": checkpoint}
        for name, value in (("max_iter", max_iter), ("xi0", xi0), ("xi_rate", xi_rate)):
            if value is not None:
                params[name] = value
        estimator = dclust.RDPMeans(**params)
        resume = checkpoint is not None and os.path.lexists(checkpoint)
        outputs = {"--labels": labels, "--model": model,
                   **({"--checkpoint": checkpoint} if checkpoint is not None and not resume else {})}
        _check_outputs(outputs, overwrite, inputs=(input_path, constraints) + ((checkpoint,) if resume else ()))
        X = dclust.open_array(input_path, component=component)
        n, d = _shape(X)
        G = _links.load_constraints(constraints, X)  # a Zarr graph realigned to X's row blocks, or a links CSV
        with s.live(scheduler, memory_limit) as display:
            if resume:
                display.message(f"resuming from the checkpoint {checkpoint}")
            t = time.perf_counter()
            with display.fit(f"RDPMeans on {n:,} x {d} with {G.n_must:,} must- and {G.n_cannot:,} cannot-links"):
                estimator.fit(X, constraints=G)
            fit_seconds = time.perf_counter() - t
            t = time.perf_counter()
            with display.step(f"writing labels to {labels}"):
                dclust.write_labels(estimator.labels_, labels, overwrite=overwrite)
            labels_seconds = time.perf_counter() - t
            with display.step(f"saving the model to {model}"):
                dclust.save(estimator, model, overwrite=overwrite)
        scalars, _ = learned_attributes(estimator)
        must_split, cannot_joined = estimator.n_violated_
        result = {
            "command": "fit rdpmeans", "estimator": "RDPMeans", "input": os.path.abspath(input_path),
            "component": component, "n_samples": n, "n_features": d, "constraints": os.path.abspath(constraints),
            "n_must": G.n_must, "n_cannot": G.n_cannot, "labels": os.path.abspath(labels),
            "model": os.path.abspath(model), "params": estimator.get_params(), "n_clusters": estimator.n_clusters_,
            "checkpoint": os.path.abspath(checkpoint) if checkpoint else None, "resumed": resume,
            "learned": scalars, "violated": {"must_links_split": must_split, "cannot_links_joined": cannot_joined},
            "objective_history": list(estimator.objective_history_), "xi_history": list(estimator.xi_history_),
            "seconds": {"fit": round(fit_seconds, 3), "labels": round(labels_seconds, 3)},
        }
        rows = {"estimator": "RDPMeans", "data": f"{n:,} x {d}", "links": f"{G.n_must:,} must, {G.n_cannot:,} cannot",
                "clusters (K)": estimator.n_clusters_, "lam": estimator.lam_, "objective": estimator.objective_,
                "must-links split": must_split, "cannot-links joined": cannot_joined,
                "fit seconds": round(fit_seconds, 2), "labels": labels, "model": model}
        if checkpoint:
            rows["checkpoint"] = f"{checkpoint} ({'resumed' if resume else 'new'})"
        s.report(result, "fit RDPMeans", rows)
