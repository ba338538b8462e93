"""One command's run: errors mapped to exit codes and one-line messages, warnings, consoles, progress display, the
Dask cluster, the check of the outputs before any work, and the report (a table, or one JSON object)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Iterator

import typer
from rich.console import Console

import dclust
from dclust.errors import InvalidParameterError, StorageError

from ._cluster import dask_client, tls_from_context
from ._display import Display, key_value_table, to_jsonable
from ._quiet import _ClickException, _UsageError, current_context, library_logs


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _memory_limit(value: str) -> str | int:
    return int(value) if value.isdigit() else value


def _usage(message: str) -> Exception:
    """A usage error (exit code 2, shown with the command's usage line)."""
    return _UsageError(message, ctx=current_context())


class _Session:
    """The run of one command, with the options every command shares (``--overwrite``, the input options
    ``--component --columns --sample-dim --storage-option``, ``--scheduler``, ``--memory-limit``, ``--json``,
    ``--quiet``, ``--verbose``, ``--debug``)."""

    def __init__(self, json_out: bool, quiet: bool, debug: bool, *, overwrite: bool = False,
                 component: str | None = None, columns: str | None = None, sample_dim: str | None = None,
                 storage_options: dict[str, Any] | None = None, scheduler: str | None = None,
                 memory_limit: str = "auto", verbose: bool = False) -> None:
        self.json = json_out
        self.verbose = verbose
        self.quiet = quiet
        self.debug = debug
        self.overwrite = overwrite
        self.component = component
        self.columns = [c.strip() for c in columns.split(",")] if columns else None
        self.sample_dim = sample_dim
        self.storage_options = storage_options
        self.scheduler = scheduler
        self.memory_limit = memory_limit
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False)
        self.display = Display(self.err, enabled=not quiet)
        self.recorded: list[warnings.WarningMessage] = []
        self.t0 = time.perf_counter()
        self.scheduler_address: str | None = None
        self.client: Any = None

    @contextlib.contextmanager
    def live(self, *, cluster: bool = True) -> Iterator[Display]:
        """The progress display, and (``cluster=True``) the Dask client, for the duration of the block."""
        with self.display:
            if not cluster:
                yield self.display
                return
            with dask_client(
                self.scheduler,
                memory_limit=_memory_limit(self.memory_limit),
                announce=None if self.quiet else self.display.message,
                **tls_from_context(),
            ) as client:
                self.scheduler_address = client.scheduler.address
                self.client = client
                try:
                    yield self.display
                finally:
                    self.client = None

    def check_outputs(self, outputs: dict[str, str], inputs: tuple[str, ...] = (), *,
                      checkpoint: str | None = None) -> bool:
        """:func:`_check_outputs` with ``--overwrite``; an existing ``checkpoint`` is an input (a run to resume,
        the return value), a new one an output."""
        resume = checkpoint is not None and self._exists(checkpoint)
        if checkpoint is not None and not resume:
            outputs = {**outputs, "--checkpoint": checkpoint}
        _check_outputs(outputs, self.overwrite, inputs + ((checkpoint,) if resume else ()),
                       rewritten={"--checkpoint": checkpoint} if resume else None)  # rewritten after every iteration
        return resume

    def _exists(self, path: str) -> bool:
        """Whether ``path`` (a local path, or an fsspec URL opened with ``--storage-option``) exists: on an object
        store a committed store, or one whose commit record a killed writer left (the fit then resumes from it)."""
        if "://" not in path or path.startswith("file://"):
            return os.path.lexists(path.removeprefix("file://"))
        import fsspec

        fs, root = fsspec.core.url_to_fs(path, **(self.storage_options or {}))
        root = root.rstrip("/")
        parent, _, name = root.rpartition("/")
        return bool(fs.exists(root) or fs.exists(f"{parent}/.{name}.commit"))

    def open_input(self, path: str, **kwargs: Any) -> tuple[Any, int, int]:
        """The points of ``path`` (any format :func:`dclust.open_array` opens; ``--component``, ``--columns``,
        ``--sample-dim``, ``--storage-option`` given only where set), lazily, as a dask array, with their row and
        feature counts."""
        given = {"component": self.component, "columns": self.columns, "sample_dim": self.sample_dim,
                 "storage_options": self.storage_options}
        X = dclust.open_array(path, **{k: v for k, v in given.items() if v is not None}, **kwargs)
        X = getattr(X, "data", X) if hasattr(X, "dims") else X  # NetCDF/xarray: the dask array inside
        return X, X.shape[0], (X.shape[1] if X.ndim > 1 else 1)

    def fit(self, display: Display, estimator: Any, X: Any, description: str, *, resumed_from: str | None = None,
            chunk_progress: bool = True, **fit_kwargs: Any) -> float:
        """``estimator.fit(X, **fit_kwargs)`` with its progress shown (with ``chunk_progress``, the row chunks of
        every pass too); the seconds it took."""
        if resumed_from is not None:
            display.message(f"resuming from the checkpoint {resumed_from}")
        chunks = {"client": self.client, "n_chunks": X.numblocks[0]} if chunk_progress else {}
        t = time.perf_counter()
        with display.fit(description, **chunks):
            estimator.fit(X, **fit_kwargs)
        return time.perf_counter() - t

    def save_model(self, display: Display, estimator: Any, model: str) -> None:
        with display.step(f"saving the model to {model}"):
            dclust.save(estimator, model, overwrite=self.overwrite)

    def fit_and_write(self, estimator: Any, X: Any, description: str, labels: str, model: str | None, *,
                      resumed_from: str | None = None, chunk_progress: bool = True,
                      labels_of: Callable[[], Any] | None = None, **fit_kwargs: Any) -> tuple[float, float]:
        """On the cluster: :meth:`fit`, write the labels (``labels_of()``, default ``estimator.predict(X)``) to
        ``labels`` and save the model to ``model`` (unless None); the seconds of the fit and of the labels."""
        with self.live() as display:
            fit_seconds = self.fit(display, estimator, X, description, resumed_from=resumed_from,
                                   chunk_progress=chunk_progress, **fit_kwargs)
            t = time.perf_counter()
            with display.step(f"writing labels to {labels}"):
                dclust.write_labels(labels_of() if labels_of else estimator.predict(X), labels,
                                    overwrite=self.overwrite)
            labels_seconds = time.perf_counter() - t
            if model is not None:
                self.save_model(display, estimator, model)
        return fit_seconds, labels_seconds

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
def _command(json_out: bool, quiet: bool, debug: bool, **options: Any) -> Iterator[_Session]:
    """Run a command body: map exceptions to exit codes and one-line messages, show warnings as one-liners.
    ``options``: the other shared options, kept on the session (see :class:`_Session`)."""
    session = _Session(json_out, quiet, debug, **options)
    try:
        with library_logs(session.verbose), warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("default")
            # Python ignores ResourceWarning by default: they come from the garbage collector finalizing objects of
            # other code (an aiohttp session of fsspec, say), not from this command's work.
            warnings.simplefilter("ignore", ResourceWarning)
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


def _check_outputs(outputs: dict[str, str], overwrite: bool, inputs: tuple[str, ...] = (),
                   rewritten: dict[str, str] | None = None) -> None:
    """Before any work: :func:`dclust.io.check_outputs` (the check write_array/write_labels/save run), its errors
    worded for the command line."""
    try:
        dclust.io.check_outputs(outputs, inputs, overwrite=overwrite, rewritten=rewritten)
    except InvalidParameterError as exc:  # two outputs, or an output and an input, at one path
        raise _usage(str(exc)) from None
    except StorageError as exc:
        if not any(f"{option}(path=" in str(exc) for option in outputs):
            raise
        text = _one_line(str(exc)).replace("overwrite=True", "--overwrite")
        for option in outputs:
            text = text.replace(f"{option}(path=", f"{option} (")
        raise StorageError(text) from None
