"""THE fit loop of every iterative estimator: iterate -> reduce -> finalize -> converged?, with progress events,
checkpoint save/resume and the persist decision in one place.

An estimator describes one run of its algorithm as a :class:`Step` (start, one pass, objective, K, convergence,
checkpoint codec) and hands it to :func:`fit_loop`, or to :func:`best_of` for the best of ``n_init`` runs. The loop
owns what every estimator used to repeat:

* the iteration count, ``max_iter`` and the :class:`~dclust.errors.ConvergenceWarning` (:func:`warn_unconverged`);
* progress events (:class:`ProgressEvent`, :func:`emit`): ``"init"`` after a run's start (its seconds),
  ``"iter"`` after every pass (objective, K, seconds of the pass), ``"done"`` at the end of a fit (:func:`finish`);
  the library logs every event on the ``dclust`` logger and calls the callbacks of :func:`on_progress`;
* checkpoints: after every pass that does not end the run the state is saved *before* the pass is announced, so an
  announced iteration is durable; a refit with the same checkpoint resumes at the next pass (all randomness after
  a checkpoint comes from saved state: :func:`rng_state` / :func:`set_rng_state`), and a finished fit's checkpoint
  restores the model without a pass (:func:`restore_finished`). The checkpoint object comes from
  ``BaseEstimator._checkpointer`` (:class:`NoCheckpoint` when ``checkpoint=None``): this module never imports
  the storage layer. Every loop state is unpacked by one path (:func:`fit_loop` / :func:`best_of` call the step's
  ``from_checkpoint`` inside ``ck.reading()``, so a damaged state is a ``StorageError``);
* the persist decision (:func:`persisted`).

The saved state of a run is ``{**context, "loop": {"iteration": i, "state": step.to_checkpoint(state)}}`` where
``context`` is what the caller adds (``best_of`` adds the restart, the generator's state and the best run so far).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import functools
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import numpy.typing as npt

from ._dask.passes import persist_if_fits
from .errors import ConvergenceWarning

__all__ = [
    "ProgressEvent", "on_progress", "emit", "Stopwatch", "logger", "NoCheckpoint", "rng_state", "set_rng_state",
    "restore_rng",
    "Step", "LoopResult", "fit_loop", "best_of", "warn_unconverged", "persisted", "restore_finished", "finish",
]

logger = logging.getLogger("dclust")

# ------------------------------------------------------------------------------------------------------------------
# progress events
# ------------------------------------------------------------------------------------------------------------------

_callbacks: contextvars.ContextVar[tuple[Callable[["ProgressEvent"], None], ...]] = contextvars.ContextVar(
    "dclust_progress_callbacks", default=()
)


@dataclass(frozen=True)
class ProgressEvent:
    """One step of a long computation, delivered to the callbacks of :func:`on_progress`.

    ``phase`` is ``"init"`` (initialisation passes), ``"iter"`` (one pass of the main loop) or ``"done"``.

    Attributes
    ----------
    estimator : str
        Class name of the estimator that emitted the event.
    phase : str
        ``"init"``, ``"iter"`` or ``"done"`` (the jobs of :mod:`dclust.apps` also emit ``"frame"``).
    iteration : int
        Iterations (passes of the main loop) completed so far.
    objective : float
        The objective after this step (NaN for ``"init"``).
    n_clusters : int
        Clusters (or features) after this step.
    seconds : float
        Seconds of this step, as the emitter measured it.
    extra : dict
        Emitter-specific figures (for example the proposals of an OCC pass, or a frame's births and deaths).

    Examples
    --------
    An initialisation event, one per iteration, and a final one:

    >>> import dclust
    >>> seen = []
    >>> with dclust.on_progress(seen.append):
    ...     model = dclust.KMeans(n_clusters=2, random_state=0).fit([[0.0], [0.2], [4.0], [4.2]])
    >>> [(e.phase, e.iteration, e.n_clusters) for e in seen]
    [('init', 0, 2), ('iter', 1, 2), ('done', 1, 2)]
    >>> round(seen[-1].objective, 6) == round(model.inertia_, 6)
    True
    """

    estimator: str
    phase: str
    iteration: int
    objective: float
    n_clusters: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


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
    """Log ``event`` on the ``dclust`` logger (INFO) and pass it to the callbacks of :func:`on_progress`
    (public as ``dclust.emit_progress``: the applications' jobs report their steps through it).

    Examples
    --------
    >>> import dclust
    >>> events = []
    >>> with dclust.on_progress(events.append):
    ...     dclust.emit_progress(dclust.ProgressEvent("myjob", "iter", 1, 0.5, 3, 0.01))
    >>> events[0].estimator, events[0].n_clusters
    ('myjob', 3)
    """
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


# ------------------------------------------------------------------------------------------------------------------
# checkpoints
# ------------------------------------------------------------------------------------------------------------------


class NoCheckpoint:
    """The checkpoint of a fit without ``checkpoint=``: nothing is read or written, nothing is computed.

    It has the interface of the checkpointer that ``BaseEstimator._checkpointer`` returns, so the loop calls
    ``ck.save(...)`` unconditionally; ``active`` is False so a loop skips building a state nobody saves.
    """

    active = False

    def resume(self) -> None:
        return None

    def save(self, state: dict[str, Any]) -> None:
        pass

    def save_done(self, model: Any, **extra: Any) -> None:
        pass

    def check_content(self, weight: float, mean: npt.NDArray[np.float64], scatter: float) -> None:
        pass

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        yield


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


def restore_rng(rng: np.random.Generator, state: str) -> None:
    """Put ``rng`` in the ``state`` saved by :func:`rng_state` (in place: its users draw the saved numbers)."""
    bg_state = json.loads(state)
    if bg_state.get("bit_generator") != type(rng.bit_generator).__name__:
        raise ValueError(f"a {bg_state.get('bit_generator')} state for a {type(rng.bit_generator).__name__}")
    rng.bit_generator.state = bg_state


def restore_finished(est: Any, ck: Any, state: dict[str, Any] | None) -> dict[str, Any] | None:
    """When ``state`` is a finished fit's checkpoint, set its learned attributes on ``est`` and return its
    ``extra`` entries (a dict); else None (start or resume the fit)."""
    if state is None or state.get("phase") != "done":
        return None
    extra: dict[str, Any] = ck.restore_attributes(est, state)
    return extra


def finish(est: Any, ck: Any, *, n_iter: int, objective: float, n_clusters: int, seconds: float = 0.0,
           save: bool = True, **extra: Any) -> Any:
    """The end of a fit whose learned attributes are set: save the finished model in the checkpoint (with
    ``extra`` private state), then emit the ``"done"`` event. Returns ``est``."""
    if save:
        ck.save_done(est, **extra)
    emit(ProgressEvent(type(est).__name__, "done", int(n_iter), float(objective), int(n_clusters), seconds))
    return est


# ------------------------------------------------------------------------------------------------------------------
# the persist decision
# ------------------------------------------------------------------------------------------------------------------


def persisted(arr: Any, kind: str, persist: Any) -> Any:
    """The data a loop iterates over: ``arr`` kept in (cluster) memory between passes when ``persist`` asks for it
    (``"auto"``: when it fits comfortably); numpy input is already in memory."""
    if kind == "numpy":
        return arr
    return persist_if_fits(arr, persist, logger)


# ------------------------------------------------------------------------------------------------------------------
# the loop
# ------------------------------------------------------------------------------------------------------------------


class Step:
    """One run of an iterative algorithm, as the fit loop drives it. Subclasses implement:

    ``start()``
        The state before the first pass (may run initialisation passes, may draw from the fit's generator).
    ``step(state)``
        One pass over the data (built with the pass engine), reduced and finalized: the next state.
    ``objective(state)``, ``n_clusters(state)``
        What the ``"iter"`` event of the pass that made ``state`` reports; ``extra(state)`` adds entries
        (``start_extra(state)`` those of the ``"init"`` event).
    ``converged(old, new)``
        True when the pass from ``old`` to ``new`` ends the run.
    ``to_checkpoint(state)`` / ``from_checkpoint(ck, saved, iteration)``
        The state as a dict of arrays and JSON values, and back (shapes checked with ``ck.require_shape``; any
        ``KeyError``/``ValueError``/``TypeError`` is reported as a damaged checkpoint).
    ``result(state, run)`` / ``result_from_checkpoint(ck, saved)``
        For :func:`best_of`: what a finished run keeps (a dict of arrays and JSON values), and its check on resume.
    ``unconverged_note(state)``
        Appended to the :class:`~dclust.errors.ConvergenceWarning`.
    """

    #: The estimator's name in events and warnings.
    name: str = "fit"
    #: What one iteration is called in the convergence warning.
    unit: str = "iterations"

    def start(self) -> Any:
        raise NotImplementedError

    def step(self, state: Any) -> Any:
        raise NotImplementedError

    def objective(self, state: Any) -> float:
        raise NotImplementedError

    def n_clusters(self, state: Any) -> int:
        raise NotImplementedError

    def converged(self, old: Any, new: Any) -> bool:
        raise NotImplementedError

    def extra(self, state: Any) -> dict[str, Any]:
        return {}

    def start_extra(self, state: Any) -> dict[str, Any]:
        return {}

    def to_checkpoint(self, state: Any) -> dict[str, Any]:
        raise NotImplementedError

    def from_checkpoint(self, ck: Any, saved: dict[str, Any], iteration: int) -> Any:
        raise NotImplementedError

    def result(self, state: Any, run: "LoopResult") -> dict[str, Any]:
        raise NotImplementedError

    def result_from_checkpoint(self, ck: Any, saved: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def unconverged_note(self, state: Any) -> str:
        return ""


@dataclass
class LoopResult:
    """The end of one run: its last state, the number of passes (``n_iter``) and whether it converged."""

    state: Any
    n_iter: int
    converged: bool


def warn_unconverged(name: str, max_iter: int, *, unit: str = "iterations", note: str = "",
                     fix: str = "Increase max_iter.") -> None:
    """The :class:`~dclust.errors.ConvergenceWarning` of a fit that used all its ``max_iter`` passes."""
    warnings.warn(f"{name} did not converge in max_iter={max_iter} {unit}{note}. {fix}", ConvergenceWarning,
                  stacklevel=4)


def fit_loop(step: Step, *, max_iter: int, ck: Any = None, resume: dict[str, Any] | None = None,
             context: Callable[[], dict[str, Any]] | None = None, warn: bool = False, announce: bool = True,
             fix: str = "Increase max_iter.", at_end: Callable[[LoopResult], None] | None = None) -> LoopResult:
    """Run ``step`` from ``step.start()`` (or from the checkpointed ``resume``) until ``step.converged`` or
    ``max_iter`` passes.

    Parameters
    ----------
    step : Step
    max_iter : int
        Passes of the run (including those of the interrupted run that ``resume`` continues).
    ck : checkpointer, optional
        The object of ``BaseEstimator._checkpointer`` (default: none).
    resume : dict, optional
        The ``"loop"`` entry of a saved state: ``{"iteration": i, "state": ...}`` with ``0 <= i < max_iter``.
    context : callable, optional
        Returns the entries saved beside ``"loop"`` (called at each save; default ``{"phase": "iter"}``).
    warn : bool
        Warn (:class:`~dclust.errors.ConvergenceWarning`) when the run ends at ``max_iter`` unconverged.
    announce : bool
        Emit the ``"init"`` and ``"iter"`` events (False for the inner runs of an outer search).
    at_end : callable, optional
        Called with the run's :class:`LoopResult` once its last pass is done, before that pass is announced (so
        what it saves is durable when the event is seen).

    Returns
    -------
    LoopResult

    Examples
    --------
    >>> from dclust._fit import Step, fit_loop
    >>> class Halve(Step):
    ...     name = "Halve"
    ...     def start(self): return 8.0
    ...     def step(self, x): return x / 2
    ...     def objective(self, x): return x
    ...     def n_clusters(self, x): return 1
    ...     def converged(self, old, new): return new < 1
    >>> run = fit_loop(Halve(), max_iter=10)
    >>> run.state, run.n_iter, run.converged
    (0.5, 4, True)
    """
    ck = NoCheckpoint() if ck is None else ck
    context = context or (lambda: {"phase": "iter"})
    watch = Stopwatch()
    if resume is None:
        first, state = 0, step.start()
        if announce:
            emit(ProgressEvent(step.name, "init", 0, float("nan"), step.n_clusters(state), watch.lap(),
                               step.start_extra(state)))
    else:
        with ck.reading():
            first = int(resume["iteration"])
            if not 0 <= first < max_iter:
                raise ValueError(f"iteration {first} with max_iter={max_iter}")
            state = step.from_checkpoint(ck, resume["state"], first)
    converged, i = False, first - 1
    for i in range(first, max_iter):
        new = step.step(state)
        converged = bool(step.converged(state, new))
        state = new
        if not converged and i + 1 < max_iter:
            if ck.active:  # durable before it is announced
                ck.save({**context(), "loop": {"iteration": i + 1, "state": step.to_checkpoint(state)}})
            seconds = watch.lap()
        else:
            seconds = watch.lap()  # the pass (what "seconds" means), without what at_end does
            if at_end is not None:
                at_end(LoopResult(state, i + 1, converged))
        if announce:
            emit(ProgressEvent(step.name, "iter", i + 1, float(step.objective(state)), int(step.n_clusters(state)),
                               seconds, step.extra(state)))
        if converged:
            break
    if warn and not converged:
        warn_unconverged(step.name, max_iter, unit=step.unit, note=step.unconverged_note(state), fix=fix)
    return LoopResult(state, i + 1, converged)


def best_of(make_step: Callable[[int, np.random.Generator], Step], *, n_init: int, max_iter: int,
            rng: np.random.Generator, key: Callable[[dict[str, Any]], Any], ck: Any = None,
            resume: dict[str, Any] | None = None, context: Callable[[], dict[str, Any]] | None = None,
            announce: bool = True) -> dict[str, Any]:
    """The best (lowest ``key``, the first on ties) of ``n_init`` runs, each a :func:`fit_loop` of
    ``make_step(restart, rng)`` (whose ``start`` draws its seeds from ``rng``); returns its ``step.result``.

    The saved state is ``{**context(), "restart": j, "rng": ..., "best": ..., "loop": ...}`` (``"loop"`` None
    between two runs); ``resume`` is such a state. The generator's state is saved at every save and restored into
    ``rng`` on resume (in place), so the resumed fit draws the same numbers.
    """
    ck = NoCheckpoint() if ck is None else ck
    context = context or (lambda: {"phase": "iter"})
    first, loop = 0, None
    holder: dict[str, dict[str, Any] | None] = {"best": None}
    if resume is not None:
        with ck.reading():
            first = int(resume["restart"])
            if not 0 <= first < n_init:
                raise ValueError(f"restart {first} of n_init={n_init}")
            restore_rng(rng, resume["rng"])
            if resume["best"] is not None:
                holder["best"] = make_step(first, rng).result_from_checkpoint(ck, resume["best"])
            loop = resume["loop"]

    def saved(j: int) -> dict[str, Any]:
        return {**context(), "restart": j, "rng": rng_state(rng), "best": holder["best"]}

    for j in range(first, n_init):
        step = make_step(j, rng)

        def at_end(run: LoopResult, j: int = j, step: Step = step) -> None:
            result = step.result(run.state, run)
            if holder["best"] is None or key(result) < key(holder["best"]):
                holder["best"] = result
            if ck.active and j + 1 < n_init:
                ck.save({**saved(j + 1), "loop": None})

        fit_loop(step, max_iter=max_iter, ck=ck, resume=loop, context=functools.partial(saved, j), announce=announce,
                 at_end=at_end)
        loop = None
    best = holder["best"]
    assert best is not None, "n_init >= 1 runs set a best result"
    return best
