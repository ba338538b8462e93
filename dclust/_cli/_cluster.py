"""The Dask cluster a command (or an example script) computes on.

:func:`dask_client` connects to a running cluster when one is named (``scheduler=`` or the ``DCLUST_SCHEDULER``
environment variable), and otherwise starts a :class:`distributed.LocalCluster` with one single-threaded worker
process per core. While the ``with`` block runs, the client is Dask's default scheduler, so every dclust call
inside it computes there.

A script that uses this with the default (process-based) local cluster must keep its top level under
``if __name__ == "__main__":`` -- the worker processes re-import the main module.

TLS: ``tls_ca``/``tls_cert``/``tls_key`` (CLI ``--tls-ca/--tls-cert/--tls-key``, environment ``DCLUST_TLS_CA``/
``DCLUST_TLS_CERT``/``DCLUST_TLS_KEY``) connect to a ``tls://`` scheduler through
``distributed.security.Security(..., require_encryption=True)``: the CA that signed the scheduler's certificate,
and the client certificate and key the scheduler checks (mutual TLS, as ``dask scheduler --tls-ca-file ...
--tls-cert ... --tls-key ...`` requires). The CLI options are defined once here (:data:`TlsCaOpt`, ...) and
every command that takes ``--scheduler`` declares them; their values travel in the click context
(:func:`tls_from_context`), so command bodies stay unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Annotated, Any, Callable, Iterator, Optional

import dask
import typer

from dclust.errors import InvalidParameterError, message

from ._quiet import current_context, log_file_note

__all__ = ["dask_client", "SCHEDULER_ENV", "TLS_ENV", "DEFAULT_DASHBOARD_PORT", "TlsCaOpt", "TlsCertOpt",
           "TlsKeyOpt", "tls_from_context", "security"]

#: Environment variable naming a running scheduler (``tcp://host:8786``), used when no address is passed.
SCHEDULER_ENV = "DCLUST_SCHEDULER"
#: Environment variables for the TLS files, used when no path is passed.
TLS_ENV = {"tls_ca": "DCLUST_TLS_CA", "tls_cert": "DCLUST_TLS_CERT", "tls_key": "DCLUST_TLS_KEY"}
DEFAULT_DASHBOARD_PORT = 8787
_TLS_META = "dclust_tls"


def _remember_tls(ctx: typer.Context, param: typer.CallbackParam, value: Optional[str]) -> Optional[str]:
    ctx.meta.setdefault(_TLS_META, {})[param.name] = value or None
    return value


def _tls_option(name: str, what: str) -> Any:
    return typer.Option(
        f"--{name.replace('_', '-')}", envvar=TLS_ENV[name], metavar="FILE.pem", callback=_remember_tls,
        help=f"TLS to the scheduler (tls://host:port): {what} (PEM).",
    )


TlsCaOpt = Annotated[Optional[str], _tls_option("tls_ca", "the CA certificate that signed the scheduler's")]
TlsCertOpt = Annotated[Optional[str], _tls_option("tls_cert", "this client's certificate")]
TlsKeyOpt = Annotated[Optional[str], _tls_option("tls_key", "this client's private key")]


def tls_from_context(ctx: Any = None) -> dict[str, Optional[str]]:
    """The ``--tls-*`` values of the running command (``{}`` outside a command)."""
    if ctx is None:
        ctx = current_context()
    while ctx is not None:
        if _TLS_META in ctx.meta:
            return dict(ctx.meta[_TLS_META])
        ctx = ctx.parent
    return {}


def security(
    address: str | None, tls_ca: str | None = None, tls_cert: str | None = None, tls_key: str | None = None
) -> Any:
    """A ``distributed.security.Security`` requiring encryption, or None when no TLS file is named anywhere.

    Missing arguments fall back to ``$DCLUST_TLS_CA``/``$DCLUST_TLS_CERT``/``$DCLUST_TLS_KEY``.

    Raises
    ------
    InvalidParameterError
        Some but not all three files are named, a file does not exist, no scheduler address is given, the
        address is not ``tls://``, or a ``tls://`` address comes without TLS files.
    """
    given = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key}
    files = {k: (v or os.environ.get(TLS_ENV[k], "").strip() or None) for k, v in given.items()}
    options = ", ".join(f"--{k.replace('_', '-')}" for k in files)
    if not any(files.values()):
        if address is not None and address.startswith("tls://"):
            raise InvalidParameterError(
                message("--scheduler", f"{options} (or {', '.join(TLS_ENV.values())}) for a tls:// scheduler",
                        f"{address!r} without TLS files", "Pass the CA certificate, client certificate and key.")
            )
        return None
    missing = [f"--{k.replace('_', '-')}" for k, v in files.items() if not v]
    if missing:
        raise InvalidParameterError(
            message("TLS", f"all of {options} (or {', '.join(TLS_ENV.values())})", f"no {', '.join(missing)}",
                    "Pass the CA certificate, the client certificate and the client key together.")
        )
    for k, v in files.items():
        if not os.path.isfile(v):
            raise InvalidParameterError(
                message(f"--{k.replace('_', '-')}", "an existing PEM file", repr(v), "Check the path.")
            )
    if address is None:
        raise InvalidParameterError(
            message("TLS options", f"a running scheduler (--scheduler tls://host:port or ${SCHEDULER_ENV})",
                    "no scheduler address (the local cluster needs no TLS)",
                    f"Pass --scheduler, or drop {options}.")
        )
    if not address.startswith("tls://"):
        raise InvalidParameterError(
            message("--scheduler with TLS", "a tls:// address", repr(address),
                    f"Use tls://{address.split('://', 1)[-1]} (the scheduler must be started with --tls-* too).")
        )
    from distributed.security import Security

    return Security(tls_ca_file=files["tls_ca"], tls_client_cert=files["tls_cert"], tls_client_key=files["tls_key"],
                    require_encryption=True)


#: Dask settings of the local cluster the CLI starts. distributed's nanny starts workers with
#: ``MALLOC_TRIM_THRESHOLD_=65536``; setting it switches off glibc's dynamic mmap threshold, so every chunk-sized
#: array (a decoded Zarr chunk) is a fresh mmap whose pages fault in on every task. Without it glibc reuses the
#: freed chunk buffers; the workers' memory stays bounded by their memory limit (spill / pause / restart).
EMBEDDED_WORKER_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def resolve_scheduler(scheduler: str | None) -> str | None:
    """The scheduler address to connect to: ``scheduler``, else ``$DCLUST_SCHEDULER``, else None (start one)."""
    address = scheduler if scheduler else os.environ.get(SCHEDULER_ENV, "").strip()
    return address or None


@contextlib.contextmanager
def dask_client(
    scheduler: str | None = None,
    *,
    memory_limit: str | float | int = "auto",
    n_workers: int | None = None,
    processes: bool = True,
    timeout: float = 10.0,
    announce: Callable[[str], None] | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> Iterator["distributed.Client"]:  # noqa: F821
    """Yield a :class:`distributed.Client` that is Dask's default scheduler for the ``with`` block.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (``tcp://10.0.0.5:8786``). Default: ``$DCLUST_SCHEDULER``; when neither is
        set a local cluster is started and shut down at the end of the block.
    memory_limit : str or number, default "auto"
        Memory limit per worker of a started local cluster (``"4GB"``, bytes, or ``"auto"``: the machine's memory
        divided among the workers). Ignored when connecting to a running cluster.
    n_workers : int, optional
        Workers of a started local cluster; default one per core (``os.cpu_count()``), one thread each.
    processes : bool, default True
        Worker processes (True) or threads in this process (False, for tests).
    timeout : float, default 10
        Seconds to wait for a running scheduler to answer.
    announce : callable, optional
        Called once with a one-line description including the dashboard link (the CLI prints it on stderr).
    tls_ca, tls_cert, tls_key : str, optional
        PEM files for TLS to a ``tls://`` scheduler: the CA certificate, this client's certificate and key.
        Default: ``$DCLUST_TLS_CA``, ``$DCLUST_TLS_CERT``, ``$DCLUST_TLS_KEY``. All three or none.

    Raises
    ------
    OSError
        The named scheduler cannot be reached within ``timeout`` seconds (or refuses the TLS handshake).
    InvalidParameterError
        Incomplete or misplaced TLS options (see :func:`security`).
    """
    from distributed import Client, LocalCluster

    address = resolve_scheduler(scheduler)
    sec = security(address, tls_ca, tls_cert, tls_key)
    cluster = None
    if address is not None:
        try:
            client = Client(address, timeout=timeout, set_as_default=True, security=sec)
        except (OSError, TimeoutError) as exc:
            raise OSError(
                f"cannot reach the Dask scheduler at {address!r} within {timeout:g}s ({exc}). Start one with "
                f"'dask scheduler' and 'dask worker ADDRESS', or drop --scheduler/{SCHEDULER_ENV} to use a local "
                "cluster."
            ) from exc
        n = len(client.scheduler_info().get("workers", {}))
        where = f"Dask cluster at {address} ({n} worker{'s' if n != 1 else ''})"
    else:
        workers = n_workers or os.cpu_count() or 1
        dashboard = f":{DEFAULT_DASHBOARD_PORT}" if _port_free(DEFAULT_DASHBOARD_PORT) else ":0"
        with dask.config.set(EMBEDDED_WORKER_CONFIG):
            cluster = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=processes,
                memory_limit=memory_limit,
                dashboard_address=dashboard,
                silence_logs=logging.ERROR,
            )
        try:
            client = Client(cluster, set_as_default=True)
        except BaseException:
            cluster.close()
            raise
        where = f"local Dask cluster ({workers} worker{'s' if workers != 1 else ''} x 1 thread)"
    scheduler_address = client.scheduler.address
    try:
        if announce is not None:
            link = client.dashboard_link if _has_dashboard(client) else "no dashboard"
            announce(f"{where}; dashboard: {link}")
        try:
            yield client
        except Exception as exc:
            if client.status == "running" and not _connection_lost(exc):
                raise
            raise ConnectionError(
                f"lost the connection to the Dask scheduler at {scheduler_address} during the run (the scheduler "
                f"stopped or the network failed; distributed raised {type(exc).__name__}). Outputs not yet complete "
                f"were not written. Restart the scheduler (or drop --scheduler) and rerun; a fit with --checkpoint "
                f"resumes.{log_file_note()}"
            ) from exc
    finally:
        # Explicit close, client first: much faster than the context managers' shutdown path.
        client.close()
        if cluster is not None:
            cluster.close()


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or its cause) is distributed's report of a lost scheduler connection."""
    from distributed.comm import CommClosedError

    while exc is not None:
        if isinstance(exc, CommClosedError) or "scheduler-connection-lost" in str(exc):
            return True
        exc = exc.__cause__
    return False


def _has_dashboard(client) -> bool:
    try:
        return bool(client.scheduler_info().get("services", {}).get("dashboard"))
    except Exception:  # noqa: BLE001 - the link is informational only
        return False
