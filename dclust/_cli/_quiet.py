"""One line per failure: usage errors as one ``dclust: error:`` line, the Dask libraries' own log in a file.

* :class:`OneLineErrorsGroup` is the class of the root ``dclust`` group: a usage error of any command (a bad or
  missing option, an option value refused by its check) prints one line, ``dclust: error: MESSAGE (see
  'dclust fit kmeans -h')``, and exits with code 2, instead of click's usage box.
* :func:`library_logs` routes the loggers of distributed, tornado and asyncio (a scheduler that dies mid-fit makes
  distributed's client log ~30 lines of traceback) to a log file for the duration of a command; ``--verbose``
  leaves them on stderr. The file is ``$DCLUST_LOG_FILE``, else ``dclust-PID.log`` in the temporary directory,
  created only when something is logged.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import tempfile
from typing import Any, Iterator

import typer
from typer.core import TyperGroup

__all__ = ["OneLineErrorsGroup", "library_logs", "LOG_FILE_ENV", "LIBRARY_LOGGERS", "log_file_note", "current_context"]

#: Environment variable naming the log file of the Dask libraries (default: dclust-PID.log in the temp directory).
LOG_FILE_ENV = "DCLUST_LOG_FILE"
#: Loggers of the libraries below dclust whose records go to the log file (their console handlers are detached).
LIBRARY_LOGGERS = ("distributed", "tornado", "asyncio", "bokeh")

_CURRENT: list[str | None] = [None]  # the log file of the running command


# typer >= 0.2x vendors click (typer._click) and no longer depends on it; older typer re-exports click's classes.
# Exceptions must be typer's own, or typer does not recognise them (an uncaught traceback instead of exit code 2).
def _click_class(name: str) -> type:
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_UsageError = _click_class("UsageError")
_ClickException = _click_class("ClickException")


def current_context() -> Any:
    """The running command's click context (for the usage line of usage errors and the ``--tls-*`` values), or
    None outside a command."""
    for module in (typer.BadParameter.__module__.rsplit(".", 1)[0] + ".globals", "click.globals"):
        try:
            return importlib.import_module(module).get_current_context(silent=True)
        except (ImportError, AttributeError):
            continue
    return None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _given(args: list[str], opts: list[str]) -> str | None:
    """The last value given on the command line for the option spelled ``opts`` (``--k 0`` or ``--k=0``)."""
    value = None
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(opt + "="):
                value = arg[len(opt) + 1:]
    return value


def _text(exc: Any, args: list[str]) -> str:
    """The message of a usage error; a value refused by the option's type names the option, what it expects (the
    type's words) and what it received."""
    text = _one_line(exc.format_message())
    param = getattr(exc, "param", None)
    opts = [o for o in getattr(param, "opts", []) if o.startswith("-")]
    if type(exc) is not typer.BadParameter or not opts or getattr(param, "callback", None) is not None:
        return text  # dclust's own checks (option callbacks) already say expected / received / fix
    detail = exc.message.replace("Value error, ", "").rstrip(".")
    detail = detail[0].lower() + detail[1:] if detail else detail
    given = _given(args, opts)
    received = f"; received {given!r}" if given is not None and repr(given) not in detail else ""
    return f"{opts[0]}: {detail}{received}."


@contextlib.contextmanager
def _usage_errors_on_one_line(args: list[str]) -> Iterator[None]:
    try:
        yield
    except _UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a group called without arguments: its help, as before
            raise
        ctx = getattr(exc, "ctx", None)
        where = f" (see '{ctx.command_path} -h')" if ctx is not None else ""
        sys.stderr.write(f"dclust: error: {_text(exc, args)}{where}\n")
        sys.stderr.flush()
        raise typer.Exit(2) from None


class OneLineErrorsGroup(TyperGroup):
    """The root group: usage errors of every sub-command print one ``dclust: error:`` line (exit code 2)."""

    _args: list[str] = []

    def make_context(self, info_name: Any, args: Any, parent: Any = None, **extra: Any) -> Any:
        self._args = [str(a) for a in args]
        with _usage_errors_on_one_line(self._args):
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _usage_errors_on_one_line(self._args):
            return super().invoke(ctx)


def _log_path() -> str:
    return os.environ.get(LOG_FILE_ENV, "").strip() or os.path.join(tempfile.gettempdir(), f"dclust-{os.getpid()}.log")


@contextlib.contextmanager
def library_logs(verbose: bool) -> Iterator[str | None]:
    """For the block: the records of :data:`LIBRARY_LOGGERS` go to a log file (its path is yielded), not to the
    console; with ``verbose`` nothing changes (None is yielded). Handlers and propagation are restored after."""
    if verbose:
        yield None
        return
    path = _CURRENT[0] = _log_path()
    handler = logging.FileHandler(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"))
    import distributed  # noqa: F401 - its import attaches console handlers to its loggers: detach them after it

    names = [name for name in logging.root.manager.loggerDict
             if any(name == top or name.startswith(top + ".") for top in LIBRARY_LOGGERS)]
    saved = []
    for name in sorted(set(names) | set(LIBRARY_LOGGERS)):
        logger = logging.getLogger(name)
        consoles = [h for h in logger.handlers if isinstance(h, logging.StreamHandler)
                    and not isinstance(h, logging.FileHandler)]
        if name not in LIBRARY_LOGGERS and not consoles:
            continue  # propagates to its library's top logger, which writes to the file
        saved.append((logger, list(logger.handlers), logger.propagate))
        for h in consoles:
            logger.removeHandler(h)
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield path
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate
        handler.close()
        _CURRENT[0] = None


def log_file_note() -> str:
    """`` (details in Dask's log: PATH)`` while :func:`library_logs` routes the logs to a file, else ``""``."""
    return f" (details in Dask's log: {_CURRENT[0]})" if _CURRENT[0] else ""
