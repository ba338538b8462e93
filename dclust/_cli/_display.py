"""Rendering for the CLI (and the demo): a live rich progress display fed by :func:`dclust.on_progress`, steps with
a spinner, and summary tables. Presentation only -- nothing here computes anything about the data.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Callable, Iterator

import numpy as np
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import ProgressEvent, on_progress

__all__ = ["Display", "learned_attributes", "fmt_number", "fmt_duration", "to_jsonable", "key_value_table"]


def fmt_duration(seconds: float) -> str:
    """``42s``, ``3m05s`` or ``2h07m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_number(value: Any) -> str:
    """Short human form of a number (6 significant digits for floats, thousands separators for ints)."""
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            return str(f)
        return f"{f:.6g}"
    return str(value)


def to_jsonable(value: Any) -> Any:
    """Plain-JSON form: numpy scalars to Python, arrays to lists, non-finite floats to None."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)


def learned_attributes(model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(scalars, shapes)`` of a model's public learned attributes (names ending in ``_``).

    Scalars are numbers, bools and strings; everything else is described by its shape (arrays) or length (lists).
    """
    scalars: dict[str, Any] = {}
    shapes: dict[str, Any] = {}
    for name in sorted(vars(model)):
        if name.startswith("_") or not name.endswith("_"):
            continue
        value = getattr(model, name)
        if isinstance(value, (bool, int, float, str, np.generic)):
            scalars[name] = value.item() if isinstance(value, np.generic) else value
        elif hasattr(value, "shape") and hasattr(value, "dtype"):
            shapes[name] = {"shape": list(value.shape), "dtype": str(value.dtype)}
        elif isinstance(value, (list, tuple)):
            shapes[name] = {"length": len(value)}
    return scalars, shapes


def key_value_table(title: str, rows: dict[str, Any]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in rows.items():
        table.add_row(str(k), fmt_number(v))
    return table


class Display:
    """Live progress on ``console`` (stderr in the CLI); every method is a no-op when ``enabled`` is False.

    Use :meth:`fit` around an estimator's ``fit`` to show iteration, objective, K and seconds per iteration as
    the library's progress events arrive, and :meth:`step` around any other long call (a spinner and the time).
    """

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self._progress: Progress | None = None
        self._iter_seconds: list[float] = []

    def __enter__(self) -> "Display":
        if self.enabled and self.console.is_terminal:  # a pipe or a file gets whole log lines (see fit)
            self._progress = Progress(
                SpinnerColumn(finished_text="[green]✓[/]"),
                TextColumn("[bold]{task.description}[/]"),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=False,
                refresh_per_second=8,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def message(self, text: str) -> None:
        """A line above the live display (e.g. the dashboard link)."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, soft_wrap=True)
        else:
            self.console.print(text, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def step(self, description: str) -> Iterator[None]:
        """A spinner with the elapsed time while the block runs (a log line when it ends, off a terminal)."""
        if self._progress is None:
            t0 = time.perf_counter()
            yield
            if self.enabled:
                self._line(f"{description}: done in {time.perf_counter() - t0:.2f}s")
            return
        task = self._progress.add_task(description, total=None, status="")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._finish(task, f"done in {time.perf_counter() - t0:.2f}s")

    def _finish(self, task: TaskID, status: str) -> None:
        assert self._progress is not None
        self._progress.update(task, total=1, completed=1, status=status)
        self._progress.stop_task(task)

    def seconds_per_iteration(self) -> float | None:
        """Mean seconds of the iterations of the last :meth:`fit` (the figure its live line showed), or None."""
        secs = self._iter_seconds
        return sum(secs) / len(secs) if secs else None

    def _line(self, text: str) -> None:
        """One plain log line (output that is not a terminal: no live display, whole lines)."""
        self.console.print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def fit(self, description: str, *, client: Any = None, n_chunks: int | None = None) -> Iterator[None]:
        """Show the progress events of a fit running inside the block (iteration, objective, K, s/iter) and, with a
        distributed ``client``, the row chunks done in the current pass (out of ``n_chunks``) with their rate and
        the pass's ETA. Live on a terminal; one whole line per event otherwise (a pipe or a log file)."""
        self._iter_seconds = []
        if not self.enabled:
            with on_progress(self._record):
                yield
            return
        live = self._progress is not None and self.console.is_terminal
        task = self._progress.add_task(description, total=None, status="starting") if self._progress else None
        if not live:
            self._line(f"{description}: starting")
        state: dict[str, Any] = {"chunks": 0, "status": "starting", "t0": time.perf_counter(), "printed": 0.0}

        def show(status: str) -> None:
            if live:
                self._progress.update(task, status=status)

        def on_chunk(event: Any) -> None:  # runs on the client's event loop, once per task: (time, chunks done)
            total = n_chunks or 0
            done = state["chunks"] + int(event[1])
            state["chunks"] = min(done, total) if total else done
            elapsed = max(time.perf_counter() - state["t0"], 1e-9)
            rate = state["chunks"] / elapsed
            eta = f", pass ETA {fmt_duration((total - state['chunks']) / rate)}" if total and rate > 0 else ""
            text = f"chunks {state['chunks']}/{total or '?'} ({rate:.1f} chunks/s{eta})"
            show(f"{state['status']}  {text}")
            now = time.perf_counter()
            if not live and now - state["printed"] >= 5.0:  # a log line every 5 s at most
                state["printed"] = now
                self._line(f"{description}: {text}")

        def callback(event: ProgressEvent) -> None:
            self._record(event)
            if event.phase == "init":
                extra = "".join(f", {k}={fmt_number(v)}" for k, v in event.extra.items())
                status = f"initialised in {event.seconds:.2f}s (K={event.n_clusters}{extra})"
            elif event.phase == "iter":
                status = (
                    f"iter {event.iteration}  objective {fmt_number(event.objective)}  K {event.n_clusters}  "
                    f"{event.seconds:.2f}s/iter"
                )
            else:  # done
                mean = self.seconds_per_iteration()
                status = (
                    f"done: {event.iteration} iterations, objective {fmt_number(event.objective)}, "
                    f"K {event.n_clusters}" + (f", {mean:.2f}s/iter" if mean is not None else "")
                )
            state["status"], state["chunks"], state["t0"] = status, 0, time.perf_counter()
            show(status)
            if not live:
                self._line(f"{description}: {status}")

        if client is not None:
            from dclust import CHUNK_DONE_TOPIC

            client.subscribe_topic(CHUNK_DONE_TOPIC, on_chunk)
        try:
            with on_progress(callback):
                yield
        finally:
            if client is not None:
                client.unsubscribe_topic(CHUNK_DONE_TOPIC)
            if task is not None:
                self._progress.update(task, total=1, completed=1)
                self._progress.stop_task(task)

    def _record(self, event: ProgressEvent) -> None:
        if event.phase == "iter":
            self._iter_seconds.append(event.seconds)

    @contextlib.contextmanager
    def counter(self, description: str) -> Iterator[Callable[[int, int | None, str], None]]:
        """A task counting units done (frames, batches): yields ``update(done, total, status)``. Live on a terminal;
        otherwise a whole log line every 5 s at most, and one for the last unit."""
        if not self.enabled:
            yield lambda done, total, status: None
            return
        progress = self._progress
        state: dict[str, Any] = {"task": None, "printed": 0.0}

        def update(done: int, total: int | None, status: str) -> None:
            if progress is not None:
                if state["task"] is None:
                    state["task"] = progress.add_task(description, total=total, status="")
                progress.update(state["task"], total=total, completed=done, status=status)
            elif time.perf_counter() - state["printed"] >= 5.0 or done == total:
                state["printed"] = time.perf_counter()
                self._line(f"{description}: {status}")

        try:
            yield update
        finally:
            if progress is not None and state["task"] is not None:
                progress.stop_task(state["task"])

    @contextlib.contextmanager
    def stream(self, description: str, total: int | None, *, done_batches: int = 0,
               done_points: int = 0) -> Iterator[None]:
        """Show the per-batch progress events of a streaming estimator (``DynamicMeans``, ``AnytimeDPMeans``)
        running inside the block: batch index, K, births/deaths/revivals, objective, points seen and throughput.

        ``done_batches`` / ``done_points`` are what a resumed run had already processed (counted as seen, not in
        the throughput of this run).
        """
        if not self.enabled:
            yield
            return
        progress = self._progress
        start = f"starting at batch {done_batches + 1}" if done_batches else "starting"
        if progress is not None:
            task = progress.add_task(description, total=total, completed=done_batches, status=start)
        else:
            self._line(f"{description}: {start}")
        state = {"t0": time.perf_counter(), "points": 0, "seen": done_points, "batch": done_batches, "printed": 0.0}

        def callback(event: ProgressEvent) -> None:
            if event.phase != "iter" or "n_samples" not in event.extra:
                return
            n = int(event.extra["n_samples"])
            state["points"] += n
            state["seen"] += n
            rate = state["points"] / max(time.perf_counter() - state["t0"], 1e-9)
            of = f"/{total}" if total is not None else ""
            status = (
                f"batch {event.iteration}{of}  K (this batch) {event.n_clusters}  "
                f"births {event.extra.get('births', 0)}  deaths {event.extra.get('deaths', 0)}  "
                f"revivals {event.extra.get('revivals', 0)}  "
                f"objective {fmt_number(event.objective)}  points {fmt_number(state['seen'])}  "
                f"{fmt_number(round(rate))} points/s"
            )
            if total:
                eta = ((total - event.iteration) * (time.perf_counter() - state["t0"])
                       / max(event.iteration - done_batches, 1))
                status += f"  ETA {fmt_duration(eta)}"
            state["batch"] = event.iteration
            if progress is not None:
                progress.update(task, completed=event.iteration, status=status)
            elif time.perf_counter() - state["printed"] >= 5.0 or event.iteration == total:
                state["printed"] = time.perf_counter()
                self._line(f"{description}: {status}")

        try:
            with on_progress(callback):
                yield
        finally:
            if progress is not None:
                progress.update(task, total=state["batch"], completed=state["batch"])  # stopped early: still done
                progress.stop_task(task)
