"""Progress events of iterative fits, and the hook that lets a front end (the CLI) display them.

Library code never prints: every event is logged on the ``dclust`` logger at INFO level and passed to the
callbacks registered with :func:`on_progress`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

__all__ = ["ProgressEvent", "on_progress", "emit", "Stopwatch", "logger"]

logger = logging.getLogger("dclust")

_callbacks: contextvars.ContextVar[tuple[Callable[["ProgressEvent"], None], ...]] = contextvars.ContextVar(
    "dclust_progress_callbacks", default=()
)


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a long computation.

    ``phase`` is ``"init"`` (initialisation passes), ``"iter"`` (one pass of the main loop) or ``"done"``.
    """

    estimator: str
    phase: str
    iteration: int
    objective: float
    n_clusters: int
    seconds: float
    extra: dict = field(default_factory=dict)


@contextlib.contextmanager
def on_progress(callback: Callable[[ProgressEvent], None]) -> Iterator[None]:
    """Call ``callback(event)`` for every progress event emitted inside the ``with`` block.

    Examples
    --------
    >>> import numpy as np, dclust
    >>> events = []
    >>> with dclust.on_progress(events.append):
    ...     _ = dclust.KMeans(n_clusters=2, random_state=0).fit(np.array([[0.0], [0.1], [5.0], [5.1]]))
    >>> events[-1].phase
    'done'
    """
    token = _callbacks.set(_callbacks.get() + (callback,))
    try:
        yield
    finally:
        _callbacks.reset(token)


def emit(event: ProgressEvent) -> None:
    logger.info(
        "%s %s %d: objective=%.6g K=%d (%.3fs)",
        event.estimator, event.phase, event.iteration, event.objective, event.n_clusters, event.seconds,
    )
    for cb in _callbacks.get():
        cb(event)


class Stopwatch:
    """Seconds since the last call to :meth:`lap`."""

    def __init__(self) -> None:
        self._t = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        dt, self._t = now - self._t, now
        return dt
