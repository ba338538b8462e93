"""The options several commands share, defined once; the small helpers that turn options into estimator
parameters; and :func:`shared_options`, the decorator that adds the options every computing command ends with
(``--component ... --debug``) and runs its body in a session."""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import math
import os
from enum import Enum
from typing import Annotated, Any, Callable, Iterator, Optional

import typer

from dclust.errors import message

from ._cluster import SCHEDULER_ENV, TlsCaOpt, TlsCertOpt, TlsKeyOpt
from ._session import _command, _usage


def example(*commands: str) -> str:
    """The epilog of a command's ``--help``: ``Example:`` and one or more command lines."""
    return "Example:\n\n" + "\n\n".join(f"  $ {c}" for c in commands)


def _bounded(low: float, inclusive: bool) -> Callable[..., float | None]:
    """An option callback: the value (if given) is a finite number > ``low`` (>= with ``inclusive``)."""
    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and (value >= low if inclusive else value > low)):
            bound = f"{'>=' if inclusive else '>'} {low:g}"
            raise _usage(message(param.opts[0], f"a finite number {bound}", repr(value),
                                 f"Pass a value {bound}."))
        return value

    return check


_positive = _bounded(0.0, False)


def _check_scheduler(value: str | None) -> str | None:
    """``--scheduler`` / ``$DCLUST_SCHEDULER``: empty (a local cluster) or ``[scheme://]host:port``."""
    if value is None or not value.strip():
        return value
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(value.strip())
        if scheme in ("tcp", "tls", "ws", "wss"):
            host, port = parse_host_port(location)
            if not host or not 0 < int(port) < 65536:
                raise ValueError(value)
        elif scheme != "inproc":
            raise ValueError(scheme)
    except (ValueError, TypeError):
        raise _usage(message(
            "--scheduler", "the address of a running Dask scheduler, scheme://host:port (e.g. tcp://10.0.0.5:8786)",
            repr(value), "Pass the address 'dask scheduler' printed, or drop --scheduler (and unset "
            f"${SCHEDULER_ENV}) to start a local cluster.")) from None
    return value


def _check_memory_limit(value: str) -> str:
    """``--memory-limit``: ``auto``, a byte size (``4GB``, ``512MiB``, a count of bytes) or a fraction of the
    machine's memory in (0, 1]."""
    from dask.utils import parse_bytes

    text = value.strip()
    try:
        ok = text == "auto" or 0 < float(text) <= 1 or parse_bytes(text) >= 2**20
    except (ValueError, TypeError):
        try:
            ok = parse_bytes(text) >= 2**20
        except (ValueError, TypeError):
            ok = False
    if not ok:
        raise _usage(message(
            "--memory-limit", "'auto', a size per worker of at least 1 MiB ('4GB', '512MiB', bytes) or a fraction "
            "of the machine's memory in (0, 1]", repr(value), "Pass e.g. --memory-limit 4GB."))
    return text


def _check_component(value: str | None) -> str | None:
    """``--component``: the path of an array inside the input group (``X``, ``data/X``), never outside it."""
    if value is None:
        return value
    parts = value.replace("\\", "/").split("/")
    if not value.strip() or value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _usage(message(
            "--component", "the name of an array inside the input Zarr group ('X', or 'sub/X' in a subgroup), "
            "without '..', '.' or a leading '/'", repr(value),
            "Name an array of the group (zarr.open_group(IN).tree() lists them), or give its store as IN."))
    return value

# ---------------------------------------------------------------------------------------------------------------
# the options every computing command ends with (added by shared_options)
# ---------------------------------------------------------------------------------------------------------------

SchedulerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--scheduler",
        envvar=SCHEDULER_ENV,
        metavar="ADDRESS",
        callback=_check_scheduler,
        help="Address of a running Dask scheduler (tcp://host:8786). Default: start a local cluster.",
    ),
]
MemoryLimitOpt = Annotated[
    str,
    typer.Option("--memory-limit", callback=_check_memory_limit,
                 help='Memory limit per worker of the local cluster ("4GB", "512MiB", a fraction of the memory '
                 'such as 0.5, or "auto").'),
]
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace existing output stores.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object with the results on stdout.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display and no dashboard link.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show the full traceback of errors.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", help="Show the Dask libraries' own log on stderr (default: "
                                          "a log file, $DCLUST_LOG_FILE or dclust-PID.log in the temp directory).")]
ComponentOpt = Annotated[
    Optional[str],
    typer.Option("--component", metavar="NAME", callback=_check_component,
                 help="Array inside the input Zarr group (e.g. 'X'), or variable of a NetCDF/HDF5 input "
                      "('group/var')."),
]
ColumnsOpt = Annotated[
    Optional[str],
    typer.Option("--columns", metavar="A,B,...",
                 help="Parquet/CSV input: the (numeric) columns to use, comma-separated. Default: every column."),
]
SampleDimOpt = Annotated[
    Optional[str],
    typer.Option("--sample-dim", metavar="DIM",
                 help="NetCDF/HDF5 input: the sample dimension (default: the first); the others become features."),
]


def _key_value(values: Optional[list[str]]) -> Optional[list[str]]:
    """An option callback: every value is KEY=VALUE with a non-empty KEY."""
    for value in values or []:
        if "=" not in value or not value.split("=", 1)[0].strip():
            raise typer.BadParameter(f"{value!r} is not KEY=VALUE (e.g. endpoint_url=http://127.0.0.1:9000).")
    return values


StorageOptionOpt = Annotated[
    Optional[list[str]],
    typer.Option("--storage-option", metavar="KEY=VALUE", callback=_key_value,
                 help="An argument of the filesystem of the command's URLs (repeatable), e.g. "
                      "endpoint_url=http://host:9000, anon=true, client_kwargs.region_name=eu-west-1. S3 also reads "
                      "the AWS_* environment."),
]

# ---------------------------------------------------------------------------------------------------------------
# options of the fit and stream commands
# ---------------------------------------------------------------------------------------------------------------

InputArg = Annotated[
    str,
    typer.Argument(metavar="IN", help="Input points (N x D): a Zarr store, Parquet, CSV or NetCDF/HDF5 file; a local "
                                      "path or a URL (s3://bucket/points.zarr)."),
]
LabelsOpt = Annotated[str, typer.Option("--labels", metavar="OUT.zarr", help="Where to write the labels (Zarr).")]
ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", metavar="MODEL.zarr", help="Also save the fitted model here (default: labels only)."),
]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", min=0, help="random_state (reproducible runs).")]


def sub_app(help: str) -> typer.Typer:
    """A command family's typer app (``dclust fit``, ``dclust plot``, ...): ``help`` is its one-line description;
    called without a command, it shows its help."""
    return typer.Typer(help=help, no_args_is_help=True)


def choices(name: str, *values: str) -> Any:
    """The choice type of an option: the ``str`` Enum ``name`` with one member per value (named as the value)."""
    return Enum(name, {v: v for v in values}, type=str)



def max_iter_option(what: str) -> Any:
    """The ``--max-iter`` option type (optional, >= 1): the maximum ``what`` (default: the estimator's)."""
    return Annotated[Optional[int],
                     typer.Option("--max-iter", min=1, help=f"Maximum {what} (default: the estimator's).")]


def checkpoint_option(state: str, step: str, resume: str) -> Any:
    """The ``--checkpoint PATH`` option type: ``state`` is saved at PATH after every ``step``; an existing PATH
    resumes ``resume``."""
    return Annotated[Optional[str], typer.Option(
        "--checkpoint", metavar="PATH", help=f"Save {state} here after every {step}; if PATH exists, resume {resume}.")]


MaxIterOpt = max_iter_option("number of iterations")
FitCheckpointOpt = checkpoint_option("the fit's state", "iteration", "from it")
TargetKOpt = Annotated[
    Optional[int], typer.Option("--k", min=1, help="Target number of clusters: lam from the furthest-first heuristic.")
]
ClusterLamOpt = Annotated[
    Optional[float], typer.Option("--lam", callback=_positive, help="Penalty per cluster (a squared distance, > 0).")
]
ConstraintsOpt = Annotated[
    Optional[str],
    typer.Option("--constraints", metavar="LINKS.zarr|LINKS.csv",
                 help="Must/cannot links over the rows of IN: a graph (ConstraintGraph.to_zarr) or a links CSV."),
]

# ---------------------------------------------------------------------------------------------------------------
# from options to estimator parameters and report rows
# ---------------------------------------------------------------------------------------------------------------


def _estimator_params(params: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``params`` and those of ``optional`` that are given (not None): unset options keep the estimator's
    defaults."""
    return {**params, **{name: value for name, value in optional.items() if value is not None}}


def _exactly_one_of_k_and_lam(k: int | None, lam: float | None) -> None:
    if (k is None) == (lam is None):
        raise _usage("give exactly one of --k (target number of clusters) and --lam (penalty per cluster).")


def _location(path: str | None) -> str | None:
    """A path as reports show it: URLs stay URLs, local paths (and file:// URLs) become absolute paths."""
    if path is None:
        return None
    protocol, sep, rest = path.partition("://")
    if sep and protocol not in ("file", "local"):
        return path
    return os.path.abspath(os.path.expanduser(rest if sep else path))


def _storage_options(values: list[str] | None) -> dict[str, Any] | None:
    """``--storage-option KEY=VALUE`` values as fsspec storage options: a VALUE that reads as JSON (``true``,
    ``3``, ``{"a": 1}``) is that value, any other VALUE a string; dotted keys nest (``client_kwargs.region_name``)."""
    if not values:
        return None
    options: dict[str, Any] = {}
    for item in values:
        key, _, raw = item.partition("=")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        *parents, last = key.strip().split(".")
        node = options
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return options


@contextlib.contextmanager
def _filesystem_defaults(storage_options: dict[str, Any] | None, arguments: list[str]) -> Iterator[None]:
    """For the duration of a command, make ``storage_options`` fsspec's defaults for the protocols of the URLs
    among ``arguments`` (outputs, models, checkpoints: every location the command reads or writes on that
    filesystem, not only the input). Filesystems made meanwhile carry them, also to the workers they are pickled
    to. The previous defaults are restored afterwards."""
    if not storage_options:
        yield
        return
    import fsspec.config

    protocols = {a.split("://", 1)[0] for a in arguments if "://" in a} - {"file", "local"}
    saved = {p: fsspec.config.conf.get(p) for p in protocols}
    try:
        for p in protocols:
            fsspec.config.conf[p] = {**(saved[p] or {}), **storage_options}
        yield
    finally:
        for p, old in saved.items():
            if old is None:
                fsspec.config.conf.pop(p, None)
            else:
                fsspec.config.conf[p] = old


def _checkpoint_row(checkpoint: str | None, resume: bool) -> dict[str, str]:
    """The table row of ``--checkpoint`` (none without it)."""
    return {"checkpoint": f"{checkpoint} ({'resumed' if resume else 'new'})"} if checkpoint else {}


# ---------------------------------------------------------------------------------------------------------------
# shared_options
# ---------------------------------------------------------------------------------------------------------------

# (name, annotation, default), in the order --help lists them after a command's own options
_COMPONENT = [("component", ComponentOpt, None), ("columns", ColumnsOpt, None), ("sample_dim", SampleDimOpt, None),
              ("storage_option", StorageOptionOpt, None)]
_OVERWRITE = [("overwrite", OverwriteOpt, False)]
_SCHEDULER = [("scheduler", SchedulerOpt, None)]
_TLS = [("tls_ca", TlsCaOpt, None), ("tls_cert", TlsCertOpt, None), ("tls_key", TlsKeyOpt, None)]
_MEMORY_LIMIT = [("memory_limit", MemoryLimitOpt, "auto")]
_OUTPUT = [("json_out", JsonOpt, False), ("quiet", QuietOpt, False), ("verbose", VerboseOpt, False),
           ("debug", DebugOpt, False)]


def shared_options(*, component: bool = True, cluster: bool = True, tls: bool = True) -> Callable:
    """Make ``body(s, <own options>)`` a command taking its own options, then the input options ``--component
    --columns --sample-dim --storage-option`` (with ``component``), ``--overwrite``, ``--scheduler``, ``--tls-*``
    (with ``tls``) and ``--memory-limit`` (with ``cluster``), ``--json``, ``--quiet``, ``--verbose`` and
    ``--debug``. The body runs inside :func:`_command`; ``s`` is the session, which holds the shared values
    (``s.overwrite``, ``s.component``, ``s.scheduler``, ...). The TLS values reach the cluster through the click
    context (:func:`dclust._cli._cluster.tls_from_context`)."""
    shared = ((_COMPONENT if component else []) + _OVERWRITE
              + ((_SCHEDULER + (_TLS if tls else []) + _MEMORY_LIMIT) if cluster else []) + _OUTPUT)

    def decorate(body: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(body, eval_str=True).parameters.values())[1:]  # [0] is the session
        params = own + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                                          default=default) for name, annotation, default in shared]

        @functools.wraps(body)
        def command(**kwargs: Any) -> None:
            options = {name: kwargs.pop(name) for name, _, _ in shared}
            for name, _, _ in _TLS:
                options.pop(name, None)
            if "storage_option" in options:
                options["storage_options"] = _storage_options(options.pop("storage_option"))
            urls = [v for v in kwargs.values() if isinstance(v, str)]
            with _filesystem_defaults(options.get("storage_options"), urls), \
                    _command(options.pop("json_out"), options.pop("quiet"), options.pop("debug"), **options) as s:
                body(s, **kwargs)

        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
