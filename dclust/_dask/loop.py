"""Progress events of iterative fits, and the hook that lets a front end (the CLI) display them.

Library code never prints: every event is logged on the ``dclust`` logger at INFO level and passed to the
callbacks registered with :func:`on_progress`.

Checkpoints: a fit loop talks to a checkpoint object (``resume``, ``save``, ``check_content``, ``save_done``);
:class:`NoCheckpoint` is the one of a fit without ``checkpoint=`` (nothing happens), the real one
(:class:`dclust.io._checkpoint.Checkpointer`, which writes Zarr) is created lazily by
``BaseEstimator._checkpointer``. A loop saves an iteration's state *before* emitting its progress event, so an
announced iteration is durable; :func:`rng_state` / :func:`set_rng_state` carry a generator's exact state.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

__all__ = ["ProgressEvent", "on_progress", "emit", "Stopwatch", "logger", "NoCheckpoint", "rng_state", "set_rng_state"]

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


class NoCheckpoint:
    """The checkpoint of a fit without ``checkpoint=``: nothing is read or written, nothing is computed.

    It has the interface of :class:`dclust.io._checkpoint.Checkpointer` that the fit loops use, so a loop calls
    ``ck.save(...)`` unconditionally; ``active`` is False so a loop can skip building a state nobody saves.
    """

    active = False

    def resume(self) -> None:
        return None

    def save(self, state: dict) -> None:
        pass

    def save_done(self, model, **extra) -> None:
        pass

    def check_content(self, weight, mean, scatter) -> None:
        pass


def rng_state(rng: np.random.Generator) -> str:
    """The exact state of ``rng`` as a JSON string (restored by :func:`set_rng_state`)."""
    return json.dumps(rng.bit_generator.state)


def set_rng_state(state: str) -> np.random.Generator:
    """A new generator in the ``state`` saved by :func:`rng_state` (numpy's own bit generators only)."""
    bg_state = json.loads(state)
    name = bg_state["bit_generator"]
    if name not in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64"):
        raise ValueError(f"unknown bit generator {name!r}")
    bg = getattr(np.random, name)()
    bg.state = bg_state
    return np.random.Generator(bg)
