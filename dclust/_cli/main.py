"""``dclust``: the command line. It turns arguments into public-API calls and has no logic of its own.

Commands::

    dclust generate blobs OUT.zarr --n N [--d D] [--k K] [--chunk-rows R] [--seed S] [--truth TRUTH.zarr]
    dclust fit kmeans  IN.zarr --k K          --labels OUT.zarr --model MODEL.zarr [--seed S] [--max-iter M]
                                                 [--checkpoint CK]
    dclust fit dpmeans IN.zarr (--k K | --lam L) --labels OUT.zarr --model MODEL.zarr [--seed S] [--max-iter M]
                                                 [--checkpoint CK]
    dclust predict MODEL.zarr IN.zarr --labels OUT.zarr
    dclust info MODEL.zarr
    dclust fit bpmeans / rdpmeans ...         (dclust._cli._more)
    dclust fit gmpr ... / dclust constraints import ...  (dclust._cli._links)
    dclust stream dmeans / anytime-dpmeans ...  (dclust._cli._stream)

Every command that computes runs on a Dask cluster: a ``distributed.LocalCluster`` (one single-threaded worker
per core, ``--memory-limit`` each) unless ``--scheduler ADDRESS`` or ``$DCLUST_SCHEDULER`` names a running one
(see :mod:`dclust._cli._cluster`). Progress and the dashboard link go to stderr; results go to stdout (a table, or
one JSON object with ``--json``).

``--checkpoint CK`` (fit kmeans, dpmeans, bpmeans, rdpmeans, gmpr) saves the fit's state in the directory CK after
every iteration (atomically); rerunning the same command after a crash resumes from it and ends with the identical
model. The labels and the model are written after the fit, each under a temporary name renamed into place when
complete.

Exit codes: 0 success; 2 usage error (bad or conflicting options, including dclust's InvalidParameterError);
1 data or runtime error (missing input, existing output without ``--overwrite``, invalid data, ...), reported as
one line on stderr (``--debug`` adds the traceback). Outputs are checked before any work starts.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import sys
import time
import traceback
import warnings
from enum import Enum
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console

import dclust
from dclust.errors import InvalidParameterError, StorageError

from ._cluster import SCHEDULER_ENV, TlsCaOpt, TlsCertOpt, TlsKeyOpt, dask_client, tls_from_context
from ._display import Display, key_value_table, learned_attributes, to_jsonable

__all__ = ["app"]


# typer >= 0.2x vendors click (typer._click) and no longer depends on it; older typer re-exports click's classes.
# Exceptions must be typer's own, or typer does not recognise them (an uncaught traceback instead of exit code 2).
def _click_class(name: str) -> type:
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_UsageError = _click_class("UsageError")
_ClickException = _click_class("ClickException")


def _current_context() -> Any:
    """The running command's context (for the usage line of usage errors), or None."""
    for module in (typer.BadParameter.__module__.rsplit(".", 1)[0] + ".globals", "click.globals"):
        try:
            return importlib.import_module(module).get_current_context(silent=True)
        except (ImportError, AttributeError):
            continue
    return None

app = typer.Typer(
    name="dclust",
    help="Distributed, out-of-core clustering on Dask: generate data, fit models, stream, predict, inspect.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
generate_app = typer.Typer(help="Generate synthetic data sets into Zarr stores.", no_args_is_help=True)
fit_app = typer.Typer(help="Fit a clustering model; write its labels and the model.", no_args_is_help=True)
app.add_typer(generate_app, name="generate")
app.add_typer(fit_app, name="fit")


class Codec(str, Enum):
    auto = "auto"
    none = "none"
    lz4 = "lz4"
    zstd = "zstd"


class Dtype(str, Enum):
    float32 = "float32"
    float64 = "float64"


# ---------------------------------------------------------------------------------------------------------------
# options shared by several commands
# ---------------------------------------------------------------------------------------------------------------

SchedulerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--scheduler",
        envvar=SCHEDULER_ENV,
        metavar="ADDRESS",
        help="Address of a running Dask scheduler (tcp://host:8786). Default: start a local cluster.",
    ),
]
MemoryLimitOpt = Annotated[
    str,
    typer.Option("--memory-limit", help='Memory limit per worker of the local cluster ("4GB", or "auto").'),
]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace existing output stores.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object with the results on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display and no dashboard link.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show the full traceback of errors.")]
ComponentOpt = Annotated[
    Optional[str],
    typer.Option("--component", metavar="NAME", help="Array inside the input Zarr group (e.g. 'X')."),
]
LabelsOpt = Annotated[str, typer.Option("--labels", metavar="OUT.zarr", help="Where to write the labels (Zarr).")]
FitCheckpointOpt = Annotated[
    Optional[str],
    typer.Option("--checkpoint", metavar="PATH",
                 help="Save the fit's state here after every iteration; if PATH exists, resume from it."),
]


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
# session: errors, warnings, consoles, progress, cluster, report
# ---------------------------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class _Session:
    def __init__(self, json_out: bool, quiet: bool, debug: bool) -> None:
        self.json = json_out
        self.quiet = quiet
        self.debug = debug
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False)
        self.display = Display(self.err, enabled=not quiet)
        self.recorded: list[warnings.WarningMessage] = []
        self.t0 = time.perf_counter()
        self.scheduler_address: str | None = None
        self.client: Any = None

    @contextlib.contextmanager
    def live(self, scheduler: str | None = None, memory_limit: str = "auto", *, cluster: bool = True) -> Iterator[Display]:
        """The progress display, and (``cluster=True``) the Dask client, for the duration of the block."""
        with self.display:
            if not cluster:
                yield self.display
                return
            with dask_client(
                scheduler,
                memory_limit=_memory_limit(memory_limit),
                announce=None if self.quiet else self.display.message,
                **tls_from_context(),
            ) as client:
                self.scheduler_address = client.scheduler.address
                self.client = client
                try:
                    yield self.display
                finally:
                    self.client = None

    def warning_texts(self) -> list[str]:
        return [_one_line(f"{w.category.__name__}: {w.message}") for w in self.recorded]

    def report(self, result: dict[str, Any], title: str, rows: dict[str, Any]) -> None:
        result = dict(result)
        if self.scheduler_address is not None:
            result["scheduler"] = self.scheduler_address
        result["seconds_total"] = round(time.perf_counter() - self.t0, 3)
        result["warnings"] = self.warning_texts()
        if self.json:
            sys.stdout.write(json.dumps(to_jsonable(result)) + "\n")
            sys.stdout.flush()
        else:
            self.out.print(key_value_table(title, rows))


def _memory_limit(value: str) -> str | int:
    return int(value) if value.isdigit() else value


def _fail(exc: BaseException | str, code: int, debug: bool) -> None:
    if debug and isinstance(exc, BaseException):
        traceback.print_exception(exc, file=sys.stderr)
    if isinstance(exc, BaseException):
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, (dclust.errors.DclustError, OSError)):
            text = f"{type(exc).__name__}: {text}"
            if not debug:
                text += " (run with --debug for the traceback)"
    else:
        text = exc
    sys.stderr.write(f"dclust: error: {_one_line(text)}\n")
    sys.stderr.flush()
    raise typer.Exit(code)


@contextlib.contextmanager
def _command(json_out: bool, quiet: bool, debug: bool) -> Iterator[_Session]:
    """Run a command body: map exceptions to exit codes and one-line messages, show warnings as one-liners."""
    session = _Session(json_out, quiet, debug)
    try:
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("default")
            session.recorded = recorded
            try:
                yield session
            finally:
                for text in session.warning_texts():
                    sys.stderr.write(f"dclust: warning: {text}\n")
    except (typer.Exit, typer.Abort, _ClickException):
        raise
    except InvalidParameterError as exc:
        _fail(exc, 2, debug)
    except KeyboardInterrupt:
        _fail("interrupted", 130, debug)
    except Exception as exc:  # noqa: BLE001 - every other failure is a one-line runtime error (exit 1)
        _fail(exc, 1, debug)


def _usage(message: str) -> Exception:
    """A usage error (exit code 2, shown with the command's usage line)."""
    return _UsageError(message, ctx=_current_context())


def _check_outputs(outputs: dict[str, str], overwrite: bool, inputs: tuple[str, ...] = ()) -> None:
    """Before any work: outputs are distinct, are not inputs, and may be written (the io layer's own check)."""
    from dclust.io._write import _check_new_target, _resolve  # the check write_array/write_labels/save run

    seen: dict[str, str] = {}
    for name, path in [(f"input {p}", p) for p in inputs]:
        seen[_resolve(path, "input")[0]] = name
    for option, path in outputs.items():
        url, local = _resolve(path, option)
        if url in seen:
            raise _usage(f"{option} {path!r} is the same store as {seen[url]}; give every output its own path.")
        seen[url] = option
        if local is not None:  # remote URLs are checked by the writer itself, still before writing
            try:
                _check_new_target(local, overwrite, option)
            except StorageError as exc:
                raise StorageError(
                    _one_line(str(exc)).replace("overwrite=True", "--overwrite").replace(f"{option}(path=", f"{option} (")
                ) from None


# ---------------------------------------------------------------------------------------------------------------
# generate
# ---------------------------------------------------------------------------------------------------------------


@generate_app.command("blobs")
def generate_blobs(
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
    overwrite: OverwriteOpt = False,
    scheduler: SchedulerOpt = None,
    tls_ca: TlsCaOpt = None, tls_cert: TlsCertOpt = None, tls_key: TlsKeyOpt = None,
    memory_limit: MemoryLimitOpt = "auto",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Write N points drawn from K isotropic Gaussian blobs (dclust.make_blobs) to a Zarr store."""
    with _command(json_out, quiet, debug) as s:
        outputs = {"OUT.zarr": out, **({"--truth": truth} if truth else {})}
        _check_outputs(outputs, overwrite)
        blobs = dclust.make_blobs(
            n, d, k, cluster_std=std, chunk_rows=chunk_rows, dtype=dtype.value, random_state=seed
        )
        with s.live(scheduler, memory_limit) as display:
            with display.step(f"writing {n:,} x {d} {dtype.value} points to {out}"):
                dclust.write_array(blobs.X, out, overwrite=overwrite, codec=codec.value)
            if truth:
                with display.step(f"writing ground-truth labels to {truth}"):
                    dclust.write_labels(blobs.labels, truth, overwrite=overwrite)
        result = {
            "command": "generate blobs", "output": os.path.abspath(out), "truth": os.path.abspath(truth) if truth else None,
            "n_samples": n, "n_features": d, "n_centers": k, "chunk_rows": chunk_rows, "seed": seed,
            "cluster_std": std, "dtype": dtype.value, "codec": codec.value,
        }
        rows = {"points": out, "shape": f"{n:,} x {d} ({dtype.value})", "blobs": k, "chunk rows": chunk_rows,
                "seed": seed}
        if truth:
            rows["ground truth"] = truth
        s.report(result, "generated blobs", rows)


# ---------------------------------------------------------------------------------------------------------------
# fit
# ---------------------------------------------------------------------------------------------------------------

InputArg = Annotated[str, typer.Argument(metavar="IN.zarr", help="Input Zarr store (N x D points).")]
ModelOpt = Annotated[str, typer.Option("--model", metavar="MODEL.zarr", help="Where to save the fitted model.")]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", min=0, help="random_state (reproducible runs).")]
MaxIterOpt = Annotated[
    Optional[int], typer.Option("--max-iter", min=1, help="Maximum number of iterations (default: the estimator's).")
]


def _positive(value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value} is not a finite number > 0.")
    return value


def _fit(
    s: _Session, estimator: Any, input_path: str, component: str | None, labels: str, model: str,
    overwrite: bool, scheduler: str | None, memory_limit: str, checkpoint: str | None = None,
) -> None:
    name = type(estimator).__name__
    resume = checkpoint is not None and os.path.lexists(checkpoint)
    outputs = {"--labels": labels, "--model": model}
    if checkpoint is not None and not resume:
        outputs["--checkpoint"] = checkpoint
    _check_outputs(outputs, overwrite, inputs=(input_path,) + ((checkpoint,) if resume else ()))
    X = dclust.open_array(input_path, component=component)
    n, d = X.shape[0], (X.shape[1] if X.ndim > 1 else 1)
    with s.live(scheduler, memory_limit) as display:
        if resume:
            display.message(f"resuming from the checkpoint {checkpoint}")
        t = time.perf_counter()
        with display.fit(f"{name} on {n:,} x {d}", client=s.client, n_chunks=X.numblocks[0]):
            estimator.fit(X)
        fit_seconds = time.perf_counter() - t
        t = time.perf_counter()
        with display.step(f"writing labels to {labels}"):
            dclust.write_labels(estimator.predict(X), labels, overwrite=overwrite)
        labels_seconds = time.perf_counter() - t
        with display.step(f"saving the model to {model}"):
            dclust.save(estimator, model, overwrite=overwrite)
    scalars, _ = learned_attributes(estimator)
    n_clusters = int(estimator.cluster_centers_.shape[0])
    history = list(getattr(estimator, "objective_history_", []))
    result = {
        "command": f"fit {name.lower()}", "estimator": name, "input": os.path.abspath(input_path),
        "component": component, "n_samples": n, "n_features": d, "labels": os.path.abspath(labels),
        "model": os.path.abspath(model), "params": estimator.get_params(), "n_clusters": n_clusters,
        "checkpoint": os.path.abspath(checkpoint) if checkpoint else None, "resumed": resume,
        "learned": scalars, "objective_history": history,
        "seconds": {"fit": round(fit_seconds, 3), "labels": round(labels_seconds, 3)},
    }
    rows: dict[str, Any] = {"estimator": name, "data": f"{n:,} x {d}", "clusters (K)": n_clusters}
    rows.update({k: v for k, v in scalars.items() if k not in ("n_clusters_", "n_features_in_")})
    iters = max(1, int(scalars.get("n_iter_", 1)))
    rows.update({"fit seconds": round(fit_seconds, 2), "seconds / iteration": round(fit_seconds / iters, 3),
                 "labels": labels, "model": model})
    if checkpoint:
        rows["checkpoint"] = f"{checkpoint} ({'resumed' if resume else 'new'})"
    s.report(result, f"fit {name}", rows)


@fit_app.command("kmeans")
def fit_kmeans(
    input_path: InputArg,
    k: Annotated[int, typer.Option("--k", min=1, help="Number of clusters.")],
    labels: LabelsOpt,
    model: ModelOpt,
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
    """k-means (k-means|| seeding, Lloyd iterations) with K clusters."""
    with _command(json_out, quiet, debug) as s:
        params: dict[str, Any] = {"n_clusters": k, "random_state": seed, "checkpoint": checkpoint}
        if max_iter is not None:
            params["max_iter"] = max_iter
        _fit(s, dclust.KMeans(**params), input_path, component, labels, model, overwrite, scheduler, memory_limit,
             checkpoint)


@fit_app.command("dpmeans")
def fit_dpmeans(
    input_path: InputArg,
    k: Annotated[
        Optional[int], typer.Option("--k", min=1, help="Target number of clusters: lam from the furthest-first heuristic.")
    ] = None,
    lam: Annotated[
        Optional[float],
        typer.Option("--lam", callback=_positive, help="Penalty per cluster (a squared distance, > 0)."),
    ] = None,
    labels: LabelsOpt = ...,
    model: ModelOpt = ...,
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
    """DP-means: the number of clusters follows from the penalty --lam (or is targeted with --k)."""
    if (k is None) == (lam is None):
        raise _usage("give exactly one of --k (target number of clusters) and --lam (penalty per cluster).")
    with _command(json_out, quiet, debug) as s:
        params: dict[str, Any] = {"lam": lam, "n_clusters": k, "random_state": seed, "checkpoint": checkpoint}
        if max_iter is not None:
            params["max_iter"] = max_iter
        _fit(s, dclust.DPMeans(**params), input_path, component, labels, model, overwrite, scheduler, memory_limit,
             checkpoint)


# ---------------------------------------------------------------------------------------------------------------
# predict, info
# ---------------------------------------------------------------------------------------------------------------


@app.command("predict")
def predict(
    model: Annotated[str, typer.Argument(metavar="MODEL.zarr", help="A model saved by 'dclust fit'.")],
    input_path: InputArg,
    labels: LabelsOpt,
    component: ComponentOpt = None,
    overwrite: OverwriteOpt = False,
    scheduler: SchedulerOpt = None,
    tls_ca: TlsCaOpt = None, tls_cert: TlsCertOpt = None, tls_key: TlsKeyOpt = None,
    memory_limit: MemoryLimitOpt = "auto",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Label every point of IN.zarr with its nearest cluster of a saved model."""
    with _command(json_out, quiet, debug) as s:
        _check_outputs({"--labels": labels}, overwrite, inputs=(input_path, model))
        estimator = dclust.load(model)
        X = dclust.open_array(input_path, component=component)
        lazy = estimator.predict(X)  # lazy: checks the feature count from metadata only
        n = X.shape[0]
        with s.live(scheduler, memory_limit) as display:
            t = time.perf_counter()
            with display.step(f"writing labels of {n:,} points to {labels}"):
                dclust.write_labels(lazy, labels, overwrite=overwrite)
            seconds = time.perf_counter() - t
        name = type(estimator).__name__
        n_clusters = int(estimator.cluster_centers_.shape[0])
        result = {
            "command": "predict", "estimator": name, "model": os.path.abspath(model),
            "input": os.path.abspath(input_path), "component": component, "n_samples": n,
            "n_clusters": n_clusters, "labels": os.path.abspath(labels), "seconds": {"predict": round(seconds, 3)},
        }
        rows = {"model": f"{model} ({name}, K={n_clusters})", "points": n, "labels": labels,
                "seconds": round(seconds, 2)}
        s.report(result, "predict", rows)


@app.command("info")
def info(
    model: Annotated[str, typer.Argument(metavar="MODEL.zarr", help="A model saved by 'dclust fit'.")],
    json_out: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Show a saved model: estimator, parameters, learned scalars and array shapes."""
    with _command(json_out, True, debug) as s:
        estimator = dclust.load(model)
        name = type(estimator).__name__
        params = estimator.get_params()
        scalars, shapes = learned_attributes(estimator)
        result = {"command": "info", "model": os.path.abspath(model), "estimator": name, "params": params,
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


# more commands, in their own modules (they use the helpers above): fit bpmeans/rdpmeans, stream dmeans/anytime-dpmeans
from . import _more  # noqa: E402,F401 - registers its commands on fit_app
from . import _links  # noqa: E402,F401 - registers fit gmpr on fit_app and the constraints group on app
from ._stream import stream_app  # noqa: E402

app.add_typer(stream_app, name="stream")

if __name__ == "__main__":  # pragma: no cover
    app()
from ._video import video_app; app.add_typer(video_app, name="video")  # noqa: E402,E702
from ._pointcloud import pointcloud_app; app.add_typer(pointcloud_app, name="pointcloud")  # noqa: E402,E702
