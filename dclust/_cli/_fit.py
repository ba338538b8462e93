"""``dclust fit``: one command per batch estimator. Each fits, writes the labels (``--labels``) and, with
``--model``, saves the model; without ``--model`` only the labels are written.

Commands::

    dclust fit kmeans   IN --k K                    --labels OUT.zarr [--model MODEL.zarr] [--seed S] [--max-iter M]
                                                    [--checkpoint CK]
    dclust fit dpmeans  IN (--k K | --lam L)        --labels OUT.zarr [--model MODEL.zarr] [--seed S] [--max-iter M]
                                                    [--checkpoint CK]
    dclust fit bpmeans  IN --lam L --features OUT.zarr [--model MODEL.zarr] [--allocation Z.zarr] [--seed S]
                                                    [--checkpoint CK]
    dclust fit rdpmeans IN (--lam L | --k K) --constraints LINKS.zarr|LINKS.csv --labels OUT.zarr
                                                    [--model MODEL.zarr] [--checkpoint CK]
    dclust fit gmpr     IN --classes C [--clusters-per-class M] [--constraints LINKS.zarr|LINKS.csv]
                        [--covariance full|diag] --labels OUT.zarr [--model MODEL.zarr] [--seed S] [--max-iter M]
                        [--checkpoint CK]

``fit bpmeans`` writes the learned features (the K x D matrix ``features_``) and, with ``--allocation``, the
binary allocation Z of the training rows (``allocation_``, N x K uint8, streamed chunk by chunk). ``fit rdpmeans``
and ``fit gmpr`` read a :class:`dclust.ConstraintGraph` written by ``ConstraintGraph.to_zarr``, or a links CSV
(columns i, j, type and optionally weight; see :mod:`dclust._cli._links`); ``fit rdpmeans`` writes the labels of
the fit (``labels_``, which account for the links), ``fit gmpr`` the labels of the fitted mixture for the rows of
IN, using the links (linked rows get their pair posterior, see ``GMPR.predict_proba``). With ``--checkpoint CK``
a fit saves its state in CK after every iteration and, when CK exists, resumes from it.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Optional

import numpy as np
import typer

import dclust

from ._display import learned_attributes
from ._links import load_constraints
from ._options import (
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
    _location,
    _positive,
    choices,
    example,
    shared_options,
    sub_app,
)
from ._session import _Session, _usage

__all__ = ["fit_app"]

fit_app = sub_app("Fit a clustering model; write its labels and (with --model) the model.")


def _outputs(labels: str, model: str | None) -> dict[str, str]:
    """The outputs of a fit to check before any work: the labels, and the model when ``--model`` is given."""
    return {"--labels": labels, **({"--model": model} if model else {})}


def _model_row(model: str | None) -> dict[str, str]:
    """The table row of ``--model`` (none without it: only the labels were written)."""
    return {"model": model} if model else {}


def _fit(s: _Session, estimator: Any, input_path: str, labels: str, model: str | None, checkpoint: str | None) -> None:
    name = type(estimator).__name__
    resume = s.check_outputs(_outputs(labels, model), (input_path,), checkpoint=checkpoint)
    X, n, d = s.open_input(input_path)
    fit_seconds, labels_seconds = s.fit_and_write(estimator, X, f"{name} on {n:,} x {d}", labels, model,
                                                  resumed_from=checkpoint if resume else None)
    scalars, _ = learned_attributes(estimator)
    n_clusters = int(estimator.cluster_centers_.shape[0])
    history = list(getattr(estimator, "objective_history_", []))
    result = {
        "command": f"fit {name.lower()}", "estimator": name, "input": _location(input_path),
        "component": s.component, "n_samples": n, "n_features": d, "labels": _location(labels),
        "model": _location(model), "params": estimator.get_params(), "n_clusters": n_clusters,
        "checkpoint": _location(checkpoint), "resumed": resume,
        "learned": scalars, "objective_history": history,
        "seconds": {"fit": round(fit_seconds, 3), "labels": round(labels_seconds, 3)},
    }
    rows: dict[str, Any] = {"estimator": name, "data": f"{n:,} x {d}", "clusters (K)": n_clusters}
    rows.update({k: v for k, v in scalars.items() if k not in ("n_clusters_", "n_features_in_")})
    iters = max(1, int(scalars.get("n_iter_", 1)))
    per_iteration = s.display.seconds_per_iteration() or fit_seconds / iters  # the live line's figure
    result["seconds"]["per_iteration"] = round(per_iteration, 3)
    rows.update({"fit seconds": round(fit_seconds, 2), "seconds / iteration": round(per_iteration, 3),
                 "labels": labels, **_model_row(model), **_checkpoint_row(checkpoint, resume)})
    s.report(result, f"fit {name}", rows)


@fit_app.command(
    "kmeans", epilog=example("dclust fit kmeans points.zarr --k 16 --labels labels.zarr --model km.zarr"))
@shared_options()
def fit_kmeans(
    s: _Session, input_path: InputArg, k: Annotated[int, typer.Option("--k", min=1, help="Number of clusters.")],
    labels: LabelsOpt, model: ModelOpt = None,
    seed: SeedOpt = None, max_iter: MaxIterOpt = None, checkpoint: FitCheckpointOpt = None,
) -> None:
    """k-means (k-means|| seeding, Lloyd iterations) with K clusters."""
    params = _estimator_params({"n_clusters": k, "random_state": seed, "checkpoint": checkpoint}, max_iter=max_iter)
    _fit(s, dclust.KMeans(**params), input_path, labels, model, checkpoint)


@fit_app.command(
    "dpmeans", epilog=example("dclust fit dpmeans points.zarr --lam 4.0 --labels labels.zarr --model dp.zarr"))
@shared_options()
def fit_dpmeans(
    s: _Session, input_path: InputArg, k: TargetKOpt = None, lam: ClusterLamOpt = None,
    labels: LabelsOpt = ..., model: ModelOpt = None,
    seed: SeedOpt = None, max_iter: MaxIterOpt = None, checkpoint: FitCheckpointOpt = None,
) -> None:
    """DP-means: the number of clusters follows from the penalty --lam (or is targeted with --k)."""
    if k is None and lam is None:
        raise _usage(f"give exactly one of --k (target number of clusters) and --lam (penalty per cluster); to "
                     f"choose lam, run 'dclust sweep dpmeans {input_path}' (K for many lam, and a suggested lam).")
    _exactly_one_of_k_and_lam(k, lam)
    params = _estimator_params({"lam": lam, "n_clusters": k, "random_state": seed, "checkpoint": checkpoint},
                               max_iter=max_iter)
    _fit(s, dclust.DPMeans(**params), input_path, labels, model, checkpoint)


BPInit = choices("BPInit", "sample", "greedy", "empty")


@fit_app.command(
    "bpmeans", epilog=example("dclust fit bpmeans points.zarr --lam 2.0 --features features.zarr --model bp.zarr"))
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
    seed: SeedOpt = None, max_iter: MaxIterOpt = None, checkpoint: FitCheckpointOpt = None,
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


@fit_app.command(
    "rdpmeans", epilog=example("dclust fit rdpmeans points.zarr --lam 4.0 --constraints links.csv "
                               "--labels labels.zarr --model rdp.zarr"))
@shared_options()
def fit_rdpmeans(
    s: _Session, input_path: InputArg, k: TargetKOpt = None, lam: ClusterLamOpt = None,
    constraints: ConstraintsOpt = ...,
    labels: LabelsOpt = ..., model: ModelOpt = None,
    xi0: Annotated[
        Optional[float], typer.Option("--xi0", callback=_positive, help="Link weight of the first iteration (> 0).")
    ] = None,
    xi_rate: Annotated[
        Optional[float], typer.Option("--xi-rate", min=1.0, help="Factor on the link weight per iteration (>= 1).")
    ] = None,
    seed: SeedOpt = None, max_iter: MaxIterOpt = None, checkpoint: FitCheckpointOpt = None,
) -> None:
    """RDP-means: DP-means rewarding must-links and penalising cannot-links inside clusters (soft side information)."""
    _exactly_one_of_k_and_lam(k, lam)
    params = _estimator_params({"lam": lam, "n_clusters": k, "random_state": seed, "checkpoint": checkpoint},
                               max_iter=max_iter, xi0=xi0, xi_rate=xi_rate)
    estimator = dclust.RDPMeans(**params)
    resume = s.check_outputs(_outputs(labels, model), (input_path, constraints), checkpoint=checkpoint)
    X, n, d = s.open_input(input_path)
    G = load_constraints(constraints, X)  # a Zarr graph realigned to X's row blocks, or a links CSV
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
            "fit seconds": round(fit_seconds, 2), "labels": labels, **_model_row(model),
            **_checkpoint_row(checkpoint, resume)}
    s.report(result, "fit RDPMeans", rows)


Covariance = choices("Covariance", "full", "diag")


@fit_app.command(
    "gmpr", epilog=example("dclust fit gmpr points.zarr --classes 3 --constraints links.csv --labels labels.zarr "
                           "--model gmpr.zarr"))
@shared_options()
def fit_gmpr(
    s: _Session,
    input_path: InputArg,
    classes: Annotated[int, typer.Option("--classes", min=1, help="Number of classes (the output labels).")],
    labels: LabelsOpt,
    model: ModelOpt = None,
    clusters_per_class: Annotated[
        int, typer.Option("--clusters-per-class", min=1, help="Gaussian sub-clusters per class.")
    ] = 1,
    constraints: ConstraintsOpt = None,
    covariance: Annotated[Covariance, typer.Option("--covariance", help="Covariance of every Gaussian.")] = (
        Covariance.full
    ),
    seed: SeedOpt = None, max_iter: MaxIterOpt = None, checkpoint: FitCheckpointOpt = None,
) -> None:
    """GM-PR: EM for a Gaussian mixture per class, with must-links and cannot-links between classes."""
    params = _estimator_params({"n_classes": classes, "clusters_per_class": clusters_per_class,
                                "covariance_type": covariance.value, "random_state": seed, "checkpoint": checkpoint},
                               max_iter=max_iter)
    estimator = dclust.GMPR(**params)
    resume = s.check_outputs(_outputs(labels, model),
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
        "labels": labels, **_model_row(model),
        **_checkpoint_row(checkpoint, resume),
    }
    s.report(result, "fit GMPR", rows)
