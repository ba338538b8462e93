"""``dclust``: the command line. It turns arguments into public-API calls and has no logic of its own.

The one typer app: every command family lives in its own module, which builds its sub-app (or its command
function) without importing this module; this module imports them all and registers each explicitly, so
``dclust``, ``python -m dclust`` and ``python -m dclust._cli.main`` know the same commands. Every command's
``--help`` ends with an example.

Commands::

    dclust generate blobs OUT.zarr --n N [--d D] [--k K] [--chunk-rows R] [--seed S] [--truth TRUTH.zarr]   (here)
    dclust fit kmeans / dpmeans / bpmeans / rdpmeans / gmpr IN ... --labels OUT.zarr [--model MODEL.zarr]
                                                                              (dclust._cli._fit)
    dclust predict MODEL.zarr IN --labels OUT.zarr;  dclust info MODEL.zarr  (here)
    dclust constraints import PAIRS.csv --chunks-like IN OUT.zarr              (dclust._cli._links)
    dclust stream dmeans / anytime-dpmeans ...                                 (dclust._cli._stream)
    dclust video quantize IN OUT ...                                           (dclust._cli._video)
    dclust pointcloud track IN OUT.zarr ...                                    (dclust._cli._pointcloud)
    dclust sweep dpmeans IN [--plot PNG]                                       (dclust._cli._sweep)
    dclust plot clusters / history / sweep / palette / tracks / links ...      (dclust._cli._plot)
    dclust clean PATH                                                          (dclust._cli._clean)

IN (the input points of fit, predict, stream, sweep, plot clusters, constraints import) is anything
:func:`dclust.open_array` opens: a Zarr store, a Parquet file or directory, a CSV/TSV file or glob, a NetCDF/HDF5 file,
as a local path or an fsspec URL (``s3://bucket/points.parquet``). ``--component`` names the array of a Zarr group
or the variable of a NetCDF/HDF5 file, ``--columns a,b,c`` the columns of a table, ``--sample-dim`` the sample
dimension of a NetCDF variable; ``--storage-option KEY=VALUE`` (repeatable) passes arguments to the input URL's
filesystem (for S3 the ``AWS_*`` environment works too). Reports (``--json``) show URLs as given.

Every command that computes runs on a Dask cluster: a ``distributed.LocalCluster`` (one single-threaded worker
per core, ``--memory-limit`` each) unless ``--scheduler ADDRESS`` or ``$DCLUST_SCHEDULER`` names a running one
(see :mod:`dclust._cli._cluster`). Progress and the dashboard link go to stderr; results go to stdout (a table, or
one JSON object with ``--json``).

``--checkpoint CK`` (fit kmeans, dpmeans, bpmeans, rdpmeans, gmpr) saves the fit's state in the directory CK after
every iteration (atomically); rerunning the same command after a crash resumes from it and ends with the identical
model. The labels and (with ``--model``) the model are written after the fit, each under a temporary name renamed into
place when complete.

Exit codes: 0 success; 2 usage error (bad or conflicting options, including dclust's InvalidParameterError);
1 data or runtime error (missing input, existing output without ``--overwrite``, invalid data, a lost scheduler,
...). Every failure is reported as one line on stderr (``--debug`` adds the traceback); the Dask libraries' own
log goes to a file (``$DCLUST_LOG_FILE``, default ``dclust-PID.log`` in the temporary directory) unless
``--verbose``. Option values and outputs are checked before any work starts.
"""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

import dclust

from ._clean import clean
from ._display import key_value_table, learned_attributes
from ._fit import fit_app
from ._links import constraints_app
from ._options import (
    DebugOpt,
    InputArg,
    JsonOpt,
    LabelsOpt,
    StorageOptionOpt,
    _location,
    _storage_options,
    choices,
    example,
    shared_options,
    sub_app,
)
from ._plot import plot_app
from ._pointcloud import pointcloud_app
from ._quiet import OneLineErrorsGroup
from ._session import _command, _Session
from ._stream import stream_app
from ._sweep import sweep_app
from ._video import video_app

__all__ = ["app"]

app = typer.Typer(
    name="dclust",
    help="Distributed, out-of-core clustering on Dask: generate data, fit models, stream, predict, inspect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrorsGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
)
generate_app = sub_app("Generate synthetic data sets into Zarr stores.")


Codec = choices("Codec", "auto", "none", "lz4", "zstd")


Dtype = choices("Dtype", "float32", "float64")


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"dclust {dclust.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Distributed, out-of-core clustering on Dask."""


# ---------------------------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------------------------


@generate_app.command(
    "blobs", epilog=example("dclust generate blobs points.zarr --n 100000 --d 8 --k 16 --truth truth.zarr"))
@shared_options(component=False)
def generate_blobs(
    s: _Session,
    out: Annotated[str, typer.Argument(metavar="OUT.zarr", help="New Zarr store for the points (N x D).")],
    n: Annotated[int, typer.Option("--n", min=1, help="Number of points N.")],
    d: Annotated[int, typer.Option("--d", min=1, help="Number of features D.")] = 8,
    k: Annotated[int, typer.Option("--k", min=1, help="Number of Gaussian blobs.")] = 16,
    chunk_rows: Annotated[int, typer.Option("--chunk-rows", min=1, help="Rows per Zarr chunk.")] = 500_000,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed (same seed, same data).")] = 0,
    std: Annotated[float, typer.Option("--std", min=0.0, help="Standard deviation of every blob.")] = 1.0,
    dtype: Annotated[Dtype, typer.Option("--dtype", help="dtype of the points.")] = Dtype.float32,
    truth: Annotated[
        Optional[str],
        typer.Option("--truth", metavar="TRUTH.zarr", help="Also write the ground-truth blob index of every point."),
    ] = None,
    codec: Annotated[Codec, typer.Option("--codec", help="Compression of the points store.")] = Codec.auto,
) -> None:
    """Write N points drawn from K isotropic Gaussian blobs (dclust.make_blobs) to a Zarr store."""
    s.check_outputs({"OUT.zarr": out, **({"--truth": truth} if truth else {})})
    blobs = dclust.make_blobs(
        n, d, k, cluster_std=std, chunk_rows=chunk_rows, dtype=dtype.value, random_state=seed
    )
    with s.live() as display:
        with display.step(f"writing {n:,} x {d} {dtype.value} points to {out}"):
            dclust.write_array(blobs.X, out, overwrite=s.overwrite, codec=codec.value)
        if truth:
            with display.step(f"writing ground-truth labels to {truth}"):
                dclust.write_labels(blobs.labels, truth, overwrite=s.overwrite)
    result = {
        "command": "generate blobs", "output": _location(out), "truth": _location(truth),
        "n_samples": n, "n_features": d, "n_centers": k, "chunk_rows": chunk_rows, "seed": seed,
        "cluster_std": std, "dtype": dtype.value, "codec": codec.value,
    }
    rows = {"points": out, "shape": f"{n:,} x {d} ({dtype.value})", "blobs": k, "chunk rows": chunk_rows,
            "seed": seed}
    if truth:
        rows["ground truth"] = truth
    s.report(result, "generated blobs", rows)


# ---------------------------------------------------------------------------------------------------------------
# predict, info
# ---------------------------------------------------------------------------------------------------------------

ModelArg = Annotated[str, typer.Argument(metavar="MODEL.zarr", help="A model saved by 'dclust fit'.")]


@app.command(
    "predict", epilog=example("dclust predict km.zarr points.zarr --labels labels.zarr"))
@shared_options()
def predict(s: _Session, model: ModelArg, input_path: InputArg, labels: LabelsOpt) -> None:
    """Label every point of IN with its nearest cluster of a saved model."""
    s.check_outputs({"--labels": labels}, (input_path, model))
    estimator = dclust.load(model)
    X, n, _ = s.open_input(input_path)
    lazy = estimator.predict(X)  # lazy: checks the feature count from metadata only
    with s.live() as display:
        t = time.perf_counter()
        with display.step(f"writing labels of {n:,} points to {labels}"):
            dclust.write_labels(lazy, labels, overwrite=s.overwrite)
        seconds = time.perf_counter() - t
    name = type(estimator).__name__
    n_clusters = int(estimator.cluster_centers_.shape[0])
    result = {
        "command": "predict", "estimator": name, "model": _location(model),
        "input": _location(input_path), "component": s.component, "n_samples": n,
        "n_clusters": n_clusters, "labels": _location(labels), "seconds": {"predict": round(seconds, 3)},
    }
    rows = {"model": f"{model} ({name}, K={n_clusters})", "points": n, "labels": labels,
            "seconds": round(seconds, 2)}
    s.report(result, "predict", rows)


@app.command("info", epilog=example("dclust info km.zarr", "dclust info km.zarr --json"))
def info(model: ModelArg, json_out: JsonOpt = False, debug: DebugOpt = False,
         storage_option: StorageOptionOpt = None) -> None:
    """Show a saved model: estimator, parameters, learned scalars and array shapes."""
    with _command(json_out, True, debug) as s:
        options = _storage_options(storage_option)
        estimator = dclust.load(model, **({"storage_options": options} if options else {}))
        name = type(estimator).__name__
        params = estimator.get_params()
        scalars, shapes = learned_attributes(estimator)
        result = {"command": "info", "model": _location(model), "estimator": name, "params": params,
                  "learned": scalars, "arrays": shapes}
        if s.json:
            s.report(result, name, {})
            return
        shown_params = {
            k: (f"array {tuple(v.shape)}" if hasattr(v, "shape") else v) for k, v in params.items()
        }
        s.out.print(f"[bold]{name}[/]  ({model})")
        s.out.print(key_value_table("parameters", shown_params))
        s.out.print(key_value_table("learned", scalars))
        s.out.print(key_value_table(
            "arrays",
            {k: (f"{tuple(v['shape'])} {v['dtype']}" if "shape" in v else f"{v['length']} values")
             for k, v in shapes.items()},
        ))


# ---------------------------------------------------------------------------------------------------------------
# the command families of the other modules, registered here and only here
# ---------------------------------------------------------------------------------------------------------------

app.add_typer(generate_app, name="generate")
app.add_typer(fit_app, name="fit")
app.add_typer(constraints_app, name="constraints")
app.add_typer(stream_app, name="stream")
app.add_typer(video_app, name="video")
app.add_typer(pointcloud_app, name="pointcloud")
app.add_typer(sweep_app, name="sweep")
app.add_typer(plot_app, name="plot")
app.command("clean", epilog=example("dclust clean /data/outputs", "dclust clean /data/outputs/labels.zarr"))(clean)

if __name__ == "__main__":  # pragma: no cover - python -m dclust._cli.main
    app(prog_name="dclust")
