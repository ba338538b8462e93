"""``dclust stream``: online estimators over the row batches of one store.

Commands::

    dclust stream dmeans IN.zarr --batch-rows N --lam L (--T-Q X --k-tau Y | --Q Q --tau T) --labels OUT.zarr
                                 [--checkpoint PATH] [--model MODEL.zarr] [--seed S]
    dclust stream anytime-dpmeans IN.zarr --lam L --batch-rows N --labels OUT.zarr --model MODEL.zarr
                                 [--max-batches M] [--target-objective J] [--checkpoint PATH] [--seed S]

``stream dmeans``: the consecutive row ranges of ``batch_rows`` rows are D-Means time steps
(``DynamicMeans.partial_fit``, one batch in memory at a time). The persistent ids of every batch are written
as soon as the batch is done, into a hidden ``.{OUT}.partial`` store next to ``OUT.zarr`` that is renamed to
``OUT.zarr`` once the last batch is written. ``--checkpoint PATH`` saves the model (atomically) after every
batch, once its labels are written (the format of ``DynamicMeans(checkpoint=...)``, also a model ``dclust.load``
reads); when ``PATH`` exists at start the run resumes after the batches it holds (the partial label store of the
interrupted run is kept for that), and the result equals an uninterrupted run.

``stream anytime-dpmeans``: ``AnytimeDPMeans.iter_fit`` (random disjoint batches, a usable model after each),
stopped early by ``--max-batches`` or ``--target-objective``; then the labels of every point under the final
model are written (``predict``, streamed) and the model is saved. ``--checkpoint`` resumes as above
(``iter_fit(resume=True)``).
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any, Optional

import numpy as np
import typer

import dclust
from dclust.errors import StorageError
from dclust.io import BatchLabelsWriter
from dclust.stream import fingerprint_of, resume_state, save_state

from ._display import learned_attributes
from ._options import (
    InputArg,
    LabelsOpt,
    SeedOpt,
    _bounded,
    _estimator_params,
    _location,
    _positive,
    checkpoint_option,
    example,
    max_iter_option,
    shared_options,
    sub_app,
)
from ._session import _Session, _usage

__all__ = ["stream_app"]

stream_app = sub_app(
    "Online clustering over the row batches of a store: labels streamed out batch by batch, resumable."
)


BatchRowsOpt = Annotated[int, typer.Option("--batch-rows", min=1, help="Rows per batch (time step).")]
LamOpt = Annotated[float, typer.Option("--lam", callback=_positive, help="Penalty per new cluster (> 0).")]
CheckpointOpt = checkpoint_option("the model", "batch", "after its batches")
MaxIterOpt = max_iter_option("label passes per batch")


# ---------------------------------------------------------------------------------------------------------------
# helpers: checkpoint, partial label store
# ---------------------------------------------------------------------------------------------------------------


def _load_checkpoint(path: str, model: Any, fingerprint: dict | None = None) -> Any:
    """``model`` with the state of the checkpoint at ``path`` (validated by the estimator's checkpoint code: same
    estimator, parameters and data), the error naming the option."""
    try:
        resume_state(model, fingerprint, path=path)
    except StorageError as exc:
        raise type(exc)(f"--checkpoint {path!r}: {exc}") from None
    return model


def _labels_writer(labels: str, n: int, batch_rows: int, checkpoint: str | None, done: int) -> BatchLabelsWriter:
    """The writer of the labels, batch by batch: a new partial store, or (``done`` batches resumed) the one of the
    interrupted run."""
    try:
        return BatchLabelsWriter(labels, n, batch_rows, resume=bool(done), name="--labels")
    except dclust.errors.InvalidParameterError as exc:
        raise _usage(str(exc)) from None
    except StorageError:
        partial = BatchLabelsWriter.partial_path(labels)
        raise StorageError(
            f"--checkpoint {checkpoint!r} holds an interrupted run, but the labels it wrote so far ({partial!r}) are "
            f"missing or do not match {n} rows in batches of {batch_rows}; resume with the same input, --batch-rows "
            f"and --labels {labels!r}, or remove the checkpoint to start afresh."
        ) from None


def _totals(history: dict[str, list]) -> dict[str, int]:
    return {k: int(sum(history[k])) for k in ("births", "deaths", "revivals")}


# ---------------------------------------------------------------------------------------------------------------
# stream dmeans
# ---------------------------------------------------------------------------------------------------------------


@stream_app.command(
    "dmeans", epilog=example("dclust stream dmeans points.zarr --batch-rows 10000 --lam 4.0 --T-Q 10 --k-tau 1.1 "
                             "--labels ids.zarr"))
@shared_options()
def stream_dmeans(
    s: _Session,
    input_path: InputArg,
    batch_rows: BatchRowsOpt,
    lam: LamOpt,
    labels: LabelsOpt,
    T_Q: Annotated[
        Optional[float],
        typer.Option("--T-Q", callback=_bounded(1.0, False),
                     help="Steps a cluster may go unseen and be revived (> 1)."),
    ] = None,
    k_tau: Annotated[
        Optional[float],
        typer.Option("--k-tau", callback=_bounded(1.0, True), help="Largest revival radius, in units of lam (>= 1)."),
    ] = None,
    Q: Annotated[
        Optional[float], typer.Option("--Q", callback=_bounded(0.0, True), help="Raw death rate Q (>= 0), with --tau.")
    ] = None,
    tau: Annotated[
        Optional[float], typer.Option("--tau", callback=_bounded(0.0, True), help="Raw transition rate tau (>= 0).")
    ] = None,
    checkpoint: CheckpointOpt = None,
    model_path: Annotated[
        Optional[str], typer.Option("--model", metavar="MODEL.zarr", help="Also save the final model here.")
    ] = None,
    seed: SeedOpt = None,
    max_iter: MaxIterOpt = None,
    n_restarts: Annotated[
        Optional[int], typer.Option("--n-restarts", min=1, help="Random orders tried per batch (default 1).")
    ] = None,
) -> None:
    """D-Means over consecutive row batches (time steps): persistent cluster ids with birth, death and revival."""
    pair_a, pair_b = (T_Q is not None, k_tau is not None), (Q is not None, tau is not None)
    if not ((all(pair_a) and not any(pair_b)) or (all(pair_b) and not any(pair_a))):
        raise _usage("give exactly one complete pair: --T-Q and --k-tau, or --Q and --tau.")
    params = _estimator_params({"lam": lam, "T_Q": T_Q, "k_tau": k_tau, "Q": Q, "tau": tau, "random_state": seed},
                               max_iter=max_iter, n_restarts=n_restarts)
    fresh = dclust.DynamicMeans(**params)
    resume = s.check_outputs({"--labels": labels, **({"--model": model_path} if model_path else {})}, (input_path,),
                             checkpoint=checkpoint)
    X, n, d = s.open_input(input_path, chunks=batch_rows)  # one row block per batch
    n_batches = X.numblocks[0]
    model = _load_checkpoint(checkpoint, fresh) if resume else fresh
    done = int(getattr(model, "n_batches_", 0))
    if done > n_batches:
        raise StorageError(f"--checkpoint {checkpoint!r} holds {done} batches, more than the {n_batches} of "
                           f"{input_path!r} in batches of {batch_rows} rows; pass the same input and --batch-rows.")
    writer = _labels_writer(labels, n, batch_rows, checkpoint, done)
    seconds = _stream_dmeans(s, model, X, done, writer, checkpoint, model_path)
    history = model.history_
    totals = _totals(history)
    scalars, _ = learned_attributes(model)
    result = {
        "command": "stream dmeans", "estimator": "DynamicMeans", "input": _location(input_path),
        "component": s.component, "n_samples": n, "n_features": d, "batch_rows": batch_rows,
        "n_batches": n_batches, "resumed_batches": done, "labels": writer.path,
        "checkpoint": _location(checkpoint),
        "model": _location(model_path), "params": model.get_params(),
        "n_clusters": int(model.n_clusters_), "n_tracked": int(model.cluster_ids_.shape[0]),
        "cluster_ids": model.cluster_ids_, "learned": scalars, "history": history, **totals,
        "points_per_second": round((n - sum(history["n_samples"][:done])) / max(seconds, 1e-9), 1),
    }
    rows = {"estimator": "DynamicMeans", "data": f"{n:,} x {d}", "batches": f"{n_batches} x {batch_rows} rows",
            "resumed after": done, "clusters (K, last batch)": result["n_clusters"],
            "clusters tracked": result["n_tracked"], **totals, "Q": model.Q_, "tau": model.tau_,
            "points / s": result["points_per_second"], "labels": labels}
    if checkpoint:
        rows["checkpoint"] = checkpoint
    if model_path:
        rows["model"] = model_path
    s.report(result, "stream DynamicMeans", rows)


def _stream_dmeans(s: _Session, model: Any, X: Any, done: int, writer: BatchLabelsWriter, checkpoint: str | None,
                   model_path: str | None) -> float:
    """Fit the batches after ``done``, writing their labels as they come; returns the seconds of the batches."""
    n, n_batches = X.shape[0], X.numblocks[0]
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    try:
        with s.live() as display:
            if done:
                display.message(f"resuming from {checkpoint}: {done} of {n_batches} batches done")
            with display.stream(f"DynamicMeans on {n:,} x {X.shape[1]}", n_batches, done_batches=done,
                                done_points=int(offsets[done])):
                t = time.perf_counter()
                for b in range(done, n_batches):
                    model.partial_fit(X.blocks[b])
                    writer.write(int(offsets[b]), model.labels_)
                    if checkpoint is not None:  # after the batch's labels: a resume never skips unwritten ones
                        save_state(model, path=checkpoint)
                seconds = time.perf_counter() - t
            with display.step(f"renaming the labels into place at {writer.path}"):
                writer.commit(overwrite=s.overwrite)
            if model_path:
                s.save_model(display, model, model_path)
        return seconds
    except BaseException:
        if checkpoint is None:  # nothing can resume it
            writer.discard()
        raise


# ---------------------------------------------------------------------------------------------------------------
# stream anytime-dpmeans
# ---------------------------------------------------------------------------------------------------------------


@stream_app.command(
    "anytime-dpmeans", epilog=example("dclust stream anytime-dpmeans points.zarr --lam 4.0 --batch-rows 50000 "
                                      "--labels labels.zarr --model dp.zarr"))
@shared_options()
def stream_anytime_dpmeans(
    s: _Session,
    input_path: InputArg,
    lam: LamOpt,
    batch_rows: BatchRowsOpt,
    labels: LabelsOpt,
    model_path: Annotated[str, typer.Option("--model", metavar="MODEL.zarr", help="Where to save the model.")],
    max_batches: Annotated[
        Optional[int], typer.Option("--max-batches", min=1, help="Stop after this many batches (in all).")
    ] = None,
    target_objective: Annotated[
        Optional[float],
        typer.Option("--target-objective", metavar="J",
                     help="Stop once a batch's objective (eq. 18, that batch's points) is <= J."),
    ] = None,
    checkpoint: CheckpointOpt = None,
    seed: SeedOpt = None,
    max_iter: MaxIterOpt = None,
) -> None:
    """Any-time DP-means: one pass over random disjoint batches, a usable model after each, stop when good enough."""
    if target_objective is not None and math.isnan(target_objective):
        raise typer.BadParameter("nan is not a number.", param_hint="'--target-objective'")
    params = _estimator_params({"lam": lam, "batch_rows": batch_rows, "random_state": seed}, max_iter=max_iter)
    fresh = dclust.AnytimeDPMeans(**params, checkpoint=checkpoint)  # saved after every batch by iter_fit
    resume = s.check_outputs({"--labels": labels, "--model": model_path}, (input_path,), checkpoint=checkpoint)
    X, n, d = s.open_input(input_path)
    n_batches = -(-n // batch_rows)
    if resume:
        batches = X if X.chunks[0][0] == batch_rows else X.rechunk({0: batch_rows})  # as iter_fit reads X
        model = _load_checkpoint(checkpoint, fresh, fingerprint_of(fresh, batches))
    else:
        model = fresh
    done = int(getattr(model, "n_batches_", 0))
    stopped = "end of data" if max_batches is None or done < max_batches else "max_batches"
    with s.live() as display:
        if resume:
            display.message(f"resuming from {checkpoint}: {done} of {n_batches} batches done")
        t = time.perf_counter()
        with display.stream(f"AnytimeDPMeans on {n:,} x {d}", n_batches, done_batches=done,
                            done_points=int(getattr(model, "n_seen_", 0))):
            for m in (model.iter_fit(X, resume=resume) if max_batches is None or done < max_batches else ()):
                if max_batches is not None and m.n_batches_ >= max_batches:
                    stopped = "max_batches"
                    break
                if target_objective is not None and m.objective_ <= target_objective:
                    stopped = "target_objective"
                    break
        fit_seconds = time.perf_counter() - t
        t = time.perf_counter()
        with display.step(f"writing labels to {labels}"):
            dclust.write_labels(model.predict(X), labels, overwrite=s.overwrite)
        labels_seconds = time.perf_counter() - t
        s.save_model(display, model, model_path)
    history = model.history_
    scalars, _ = learned_attributes(model)
    new_points = int(model.n_seen_) - int(sum(history["n_samples"][:done]))
    result = {
        "command": "stream anytime-dpmeans", "estimator": "AnytimeDPMeans", "input": _location(input_path),
        "component": s.component, "n_samples": n, "n_features": d, "batch_rows": batch_rows,
        "n_batches": n_batches, "batches_done": int(model.n_batches_), "resumed_batches": done,
        "stopped": stopped, "n_seen": int(model.n_seen_), "labels": _location(labels),
        "model": _location(model_path), "checkpoint": _location(checkpoint),
        "params": model.get_params(), "n_clusters": int(model.n_clusters_), "objective": model.objective_,
        "learned": scalars, "history": history,
        "points_per_second": round(new_points / max(fit_seconds, 1e-9), 1),
        "seconds": {"fit": round(fit_seconds, 3), "labels": round(labels_seconds, 3)},
    }
    rows = {"estimator": "AnytimeDPMeans", "data": f"{n:,} x {d}",
            "batches": f"{model.n_batches_} of {n_batches} ({stopped})", "points seen": model.n_seen_,
            "clusters (K)": result["n_clusters"], "last batch objective": model.objective_,
            "points / s": result["points_per_second"], "labels": labels, "model": model_path}
    if checkpoint:
        rows["checkpoint"] = checkpoint
    s.report(result, "stream AnytimeDPMeans", rows)
