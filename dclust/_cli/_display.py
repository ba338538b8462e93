"""Rendering for the CLI (and the demo): a live rich progress display fed by :func:`dclust.on_progress`, steps with
a spinner, and summary tables. Presentation only -- nothing here computes anything about the data.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Iterator

import numpy as np
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import ProgressEvent, on_progress

__all__ = ["Display", "learned_attributes", "fmt_number", "to_jsonable", "key_value_table"]


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

    def __enter__(self) -> "Display":
        if self.enabled:
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
        """A spinner with the elapsed time while the block runs."""
        if self._progress is None:
            yield
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

    @contextlib.contextmanager
    def fit(self, description: str, *, client: Any = None, n_chunks: int | None = None) -> Iterator[None]:
        """Show the progress events of a fit running inside the block (iteration, objective, K, s/iter) and, with a
        distributed ``client``, the row chunks done in the current pass (out of ``n_chunks``), live."""
        if self._progress is None:
            yield
            return
        progress = self._progress
        task = progress.add_task(description, total=None, status="starting")
        state: dict[str, Any] = {"iter_seconds": [], "chunks": 0, "status": "starting"}

        def on_chunk(event: Any) -> None:  # runs on the client's event loop, once per task: (time, chunks done)
            state["chunks"] = min(state["chunks"] + int(event[1]), n_chunks or state["chunks"] + int(event[1]))
            progress.update(task, status=f"{state['status']}  chunks {state['chunks']}/{n_chunks or '?'}")

        def callback(event: ProgressEvent) -> None:
            if event.phase == "init":
                extra = "".join(f", {k}={fmt_number(v)}" for k, v in event.extra.items())
                status = f"initialised in {event.seconds:.2f}s (K={event.n_clusters}{extra})"
            elif event.phase == "iter":
                state["iter_seconds"].append(event.seconds)
                status = (
                    f"iter {event.iteration}  objective {fmt_number(event.objective)}  K {event.n_clusters}  "
                    f"{event.seconds:.2f}s/iter"
                )
            else:  # done
                secs = state["iter_seconds"]
                mean = f", {sum(secs) / len(secs):.2f}s/iter" if secs else ""
                status = (
                    f"done: {event.iteration} iterations, objective {fmt_number(event.objective)}, "
                    f"K {event.n_clusters}{mean}"
                )
            state["status"], state["chunks"] = status, 0
            progress.update(task, status=status)

        if client is not None:
            from dclust._dask.passes import CHUNK_DONE_TOPIC

            client.subscribe_topic(CHUNK_DONE_TOPIC, on_chunk)
        try:
            with on_progress(callback):
                yield
        finally:
            if client is not None:
                client.unsubscribe_topic(CHUNK_DONE_TOPIC)
            progress.update(task, total=1, completed=1)
            progress.stop_task(task)

    @contextlib.contextmanager
    def stream(self, description: str, total: int | None, *, done_batches: int = 0,
               done_points: int = 0) -> Iterator[None]:
        """Show the per-batch progress events of a streaming estimator (``DynamicMeans``, ``AnytimeDPMeans``)
        running inside the block: batch index, K, births/deaths/revivals, objective, points seen and throughput.

        ``done_batches`` / ``done_points`` are what a resumed run had already processed (counted as seen, not in
        the throughput of this run).
        """
        if self._progress is None:
            yield
            return
        progress = self._progress
        task = progress.add_task(description, total=total, completed=done_batches,
                                 status=f"starting at batch {done_batches + 1}" if done_batches else "starting")
        state = {"t0": time.perf_counter(), "points": 0, "seen": done_points, "batch": done_batches}

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
            state["batch"] = event.iteration
            progress.update(task, completed=event.iteration, status=status)

        try:
            with on_progress(callback):
                yield
        finally:
            progress.update(task, total=state["batch"], completed=state["batch"])  # stopped early: still done
            progress.stop_task(task)
