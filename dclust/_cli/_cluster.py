"""The Dask cluster a command (or an example script) computes on.

:func:`dask_client` connects to a running cluster when one is named (``scheduler=`` or the ``DCLUST_SCHEDULER``
environment variable), and otherwise starts a :class:`distributed.LocalCluster` with one single-threaded worker
process per core. While the ``with`` block runs, the client is Dask's default scheduler, so every dclust call
inside it computes there.

A script that uses this with the default (process-based) local cluster must keep its top level under
``if __name__ == "__main__":`` -- the worker processes re-import the main module.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Callable, Iterator

__all__ = ["dask_client", "SCHEDULER_ENV", "DEFAULT_DASHBOARD_PORT"]

#: Environment variable naming a running scheduler (``tcp://host:8786``), used when no address is passed.
SCHEDULER_ENV = "DCLUST_SCHEDULER"
DEFAULT_DASHBOARD_PORT = 8787


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

    Raises
    ------
    OSError
        The named scheduler cannot be reached within ``timeout`` seconds.
    """
    from distributed import Client, LocalCluster

    address = resolve_scheduler(scheduler)
    cluster = None
    if address is not None:
        try:
            client = Client(address, timeout=timeout, set_as_default=True)
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
    try:
        if announce is not None:
            link = client.dashboard_link if _has_dashboard(client) else "no dashboard"
            announce(f"{where}; dashboard: {link}")
        yield client
    finally:
        # Explicit close, client first: much faster than the context managers' shutdown path.
        client.close()
        if cluster is not None:
            cluster.close()


def _has_dashboard(client) -> bool:
    try:
        return bool(client.scheduler_info().get("services", {}).get("dashboard"))
    except Exception:  # noqa: BLE001 - the link is informational only
        return False
