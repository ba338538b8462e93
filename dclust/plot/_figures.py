"""The figures of :mod:`dclust.plot` (matplotlib imported lazily, inside each function)."""

from __future__ import annotations

import io
import json
import numbers
import os
from typing import Any, Callable, Sequence, TypeVar

import numpy as np

from ..errors import InvalidDataError, InvalidParameterError, NotFittedError, message

__all__ = ["plot_clusters", "plot_objective_history", "plot_sweep", "plot_palette_timeline", "plot_track_lifetimes",
           "plot_link_satisfaction", "save_figure", "check_figure_path"]

_MISSING = ("dclust.plot needs matplotlib, which comes with the 'plot' extra: pip install 'dclust[plot]' "
            "(or pip install 'matplotlib>=3.8').")


def _new_figure(figsize: tuple[float, float]) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(_MISSING) from exc
    return Figure(figsize=figsize, layout="constrained")


def _axes(ax: Any, figsize: tuple[float, float] = (6.4, 4.8)) -> tuple[Any, Any]:
    if ax is not None:
        return ax.figure, ax
    fig = _new_figure(figsize)
    return fig, fig.add_subplot()


#: The last parameter and the Returns of a plot that can draw on given axes, put in place of ``{axes}``.
_AXES_DOC = """ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.figure.Figure"""


_Plot = TypeVar("_Plot", bound=Callable[..., Any])


def _axes_doc(plot: _Plot) -> _Plot:
    if plot.__doc__:  # None under python -OO
        plot.__doc__ = plot.__doc__.replace("{axes}", _AXES_DOC)
    return plot


def _colors(codes: np.ndarray) -> Any:
    from matplotlib import colormaps

    return colormaps["tab20"](np.asarray(codes) % 20)


def _positive_int(name: str, value: Any, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidParameterError(message(name, "an integer >= 1", repr(value), fix))
    return int(value)


# --------------------------------------------------------------------------------------------------------------
# clusters on a 2-D projection of a sample
# --------------------------------------------------------------------------------------------------------------


def _projection(P: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(mean, basis (D, 2), axis names)``: the features themselves for D <= 2, else the top-2 principal axes."""
    d = P.shape[1]
    mean = np.zeros(d)
    if d <= 2:
        basis = np.eye(d, 2)
        return mean, basis, [f"feature {i}" if i < d else "" for i in range(2)]
    mean = P.mean(axis=0)
    _, s, vt = np.linalg.svd(P - mean, full_matrices=False)
    share = s**2 / max(float((s**2).sum()), 1e-300)
    return mean, vt[:2].T, [f"PC {i + 1} ({100 * share[i]:.0f}% of the variance)" for i in range(2)]


def plot_clusters(X: Any, labels: Any = None, *, model: Any = None, sample_size: int = 5_000,
                  random_state: Any = 0, ax: Any = None, title: str | None = None) -> Any:
    """Scatter plot of a uniform sample of rows, colored by cluster, on a 2-D projection.

    With more than two features the projection is the sample's top two principal axes (PCA by SVD on the
    sample). The rows are gathered in one pass that reads only the chunks holding sampled rows.

    Parameters
    ----------
    X : array-like, dask, zarr, xarray, or a path ``dclust.open_array`` accepts; shape (n_samples, n_features)
    labels : array-like or dask.array.Array, shape (n_samples,), optional
        Cluster of every row (only the sampled entries are read). Default: ``model.predict`` on the sample.
    model : fitted estimator, optional
        Its ``cluster_centers_`` (when it has them) are drawn as crosses; it labels the sample when ``labels``
        is not given.
    sample_size : int, default 5000
    random_state : int, Generator or None, default 0
        The draw of the sample.
    ax : matplotlib Axes, optional
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.plot import plot_clusters
    >>> X = np.random.default_rng(0).normal(size=(300, 4))
    >>> fig = plot_clusters(X, np.arange(300) % 3, sample_size=100)
    >>> len(fig.axes[0].collections)
    1
    """
    import dask.array as da

    from ..io import open_array

    sample_size = _positive_int("sample_size", sample_size, "Pass e.g. sample_size=5000.")
    arr = open_array(X)
    if arr.ndim != 2:
        raise InvalidDataError(message("X", "a 2-D array (n_samples, n_features)", f"shape {arr.shape}",
                                       "Pass the points as rows."))
    n = int(arr.shape[0])
    if labels is not None and np.shape(labels)[:1] != (n,):
        raise InvalidDataError(message("labels", f"one label per row of X ({n})", f"shape {np.shape(labels)}",
                                       "Pass the labels of exactly the rows of X."))
    if labels is None and model is None:
        raise InvalidParameterError(message("plot_clusters", "labels or a fitted model", "neither",
                                            "Pass labels=... or model=... (e.g. the estimator you fitted)."))
    rng = np.random.default_rng(random_state) if not isinstance(random_state, np.random.Generator) else random_state
    index = np.arange(n) if sample_size >= n else np.sort(rng.choice(n, size=sample_size, replace=False))
    P = np.asarray(arr[index].compute(), dtype=np.float64)
    if labels is not None:
        lab = labels[index].compute() if isinstance(labels, da.Array) else np.asarray(labels)[index]
    else:
        lab = model.predict(P)
    lab = np.asarray(lab)
    mean, basis, names = _projection(P)
    xy = (P - mean) @ basis
    uniq, codes = np.unique(lab, return_inverse=True)
    fig, ax = _axes(ax)
    ax.scatter(xy[:, 0], xy[:, 1], c=_colors(codes), s=6, linewidths=0, alpha=0.8)
    centers = getattr(model, "cluster_centers_", None)
    if centers is not None and np.ndim(centers) == 2 and np.shape(centers)[1] == P.shape[1]:
        cxy = (np.asarray(centers, dtype=np.float64) - mean) @ basis
        ax.scatter(cxy[:, 0], cxy[:, 1], marker="x", c="black", s=60, linewidths=2, label="centers")
        ax.legend(loc="best", fontsize="small")
    ax.set_xlabel(names[0])
    ax.set_ylabel(names[1])
    ax.set_title(title or f"{uniq.size} clusters, {index.size:,} of {n:,} rows")
    return fig


# --------------------------------------------------------------------------------------------------------------
# objective and K per iteration
# --------------------------------------------------------------------------------------------------------------


@_axes_doc
def plot_objective_history(model: Any, *, events: Sequence[Any] | None = None, ax: Any = None) -> Any:
    """The objective after every iteration (``objective_history_``) and, where known, K per iteration.

    K comes from ``events`` (the :class:`dclust.ProgressEvent` s of the fit, collected with
    :func:`dclust.on_progress`: one per ``"iter"`` event), else from a streaming model's ``history_["n_clusters"]``
    (one per batch).

    Parameters
    ----------
    model : fitted estimator with ``objective_history_``
    events : sequence of dclust.ProgressEvent, optional
    {axes}

    Examples
    --------
    >>> import numpy as np, dclust
    >>> from dclust.plot import plot_objective_history
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> events = []
    >>> with dclust.on_progress(events.append):
    ...     dp = dclust.DPMeans(lam=2.0, random_state=0).fit(X)
    >>> fig = plot_objective_history(dp, events=events)
    >>> [a.get_ylabel() for a in fig.axes]
    ['objective', 'K']
    """
    history = getattr(model, "objective_history_", None)
    if history is None:
        raise NotFittedError(message("model", "a fitted estimator with objective_history_",
                                     f"{type(model).__name__} without objective_history_", "Fit the model first."))
    y = np.asarray(history, dtype=np.float64)
    if y.size == 0:
        raise InvalidDataError(message("model.objective_history_", "at least one value", "an empty history",
                                       "Fit the model first."))
    k = None
    step = "iteration"
    if events is not None:
        k = [e.n_clusters for e in events if getattr(e, "phase", None) == "iter"]
    elif isinstance(getattr(model, "history_", None), dict) and "n_clusters" in model.history_:
        k, step = list(model.history_["n_clusters"]), "batch"
    x = np.arange(1, y.size + 1)
    fig, ax = _axes(ax)
    ax.plot(x, y, marker="o", ms=3, color="tab:blue")
    ax.set_xlabel(step)
    ax.set_ylabel("objective")
    ax.set_title(f"{type(model).__name__}: {y.size} {step}{'s' if y.size != 1 else ''}")
    if k:
        twin = ax.twinx()
        twin.step(np.arange(1, len(k) + 1), k, where="mid", color="tab:orange")
        twin.set_ylabel("K")
        twin.yaxis.label.set_color("tab:orange")
    return fig


# --------------------------------------------------------------------------------------------------------------
# the lam sweep
# --------------------------------------------------------------------------------------------------------------


def _as_sweep(sweep: Any) -> Any:
    from ..model_selection import LamSweep

    if isinstance(sweep, LamSweep):
        return sweep
    if isinstance(sweep, (str, os.PathLike)):
        with open(sweep, encoding="utf-8") as f:
            sweep = json.load(f)
    if isinstance(sweep, dict):
        return LamSweep.from_dict(sweep.get("sweep", sweep))
    raise InvalidParameterError(message("sweep", "a LamSweep, its to_dict(), or a path to its JSON",
                                        type(sweep).__name__, "Pass the result of sweep_dpmeans."))


@_axes_doc
def plot_sweep(sweep: Any, *, ax: Any = None) -> Any:
    """K and ``SSE + lam K`` against lam (log scale) for a DP-means sweep, with the suggested lam marked.

    Parameters
    ----------
    sweep : dclust.model_selection.LamSweep, its ``to_dict()``, or a path to the JSON of
        ``dclust sweep dpmeans --json``
    {axes}

    Examples
    --------
    >>> import numpy as np
    >>> from dclust.model_selection import sweep_dpmeans
    >>> from dclust.plot import plot_sweep
    >>> X = np.concatenate([np.random.default_rng(0).normal(c, 0.5, (100, 2)) for c in (0, 20, 40)])
    >>> fig = plot_sweep(sweep_dpmeans(X, n_lams=8, random_state=0))
    >>> fig.axes[0].get_xscale()
    'log'
    """
    sw = _as_sweep(sweep)
    fig, ax = _axes(ax)
    ax.step(sw.lam, sw.n_clusters, where="mid", color="tab:blue", marker="o", ms=3, label="K")
    ax.set_xscale("log")
    ax.set_xlabel("lam (penalty per cluster, squared distance)")
    ax.set_ylabel("K")
    ax.yaxis.label.set_color("tab:blue")
    twin = ax.twinx()
    twin.plot(sw.lam, sw.objective, color="tab:green", marker=".", label="SSE + lam K")
    twin.set_ylabel("SSE + lam K")
    twin.yaxis.label.set_color("tab:green")
    if sw.suggested_lam is not None:
        ax.axvline(sw.suggested_lam, color="tab:red", ls="--",
                   label=f"suggested lam={sw.suggested_lam:.4g} (K={sw.suggested_n_clusters})")
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title("DP-means lam sweep")
    return fig


# --------------------------------------------------------------------------------------------------------------
# video palette timeline
# --------------------------------------------------------------------------------------------------------------


def palette_image(records: list[dict[str, Any]], *, cell_height: int = 8, max_width: int = 2048) -> np.ndarray:
    """RGBA image of a palette over time: column = frame, row = persistent color id (in id order), transparent
    where the color is absent.

    Parameters
    ----------
    records : list of dict
        One record per frame with ``ids`` (the frame's palette ids) and ``rgb`` (their colors, uint8 triples): the
        ``frames`` of the report of :func:`dclust.apps.video.quantize_video`.
    cell_height : int, default 8
        Pixel rows per id.
    max_width : int, default 2048
        Each frame is ``max(1, min(8, max_width // n_frames))`` pixels wide.

    Returns
    -------
    ndarray of shape (n_ids * cell_height, n_frames * width, 4), uint8

    Examples
    --------
    >>> from dclust.plot import palette_image
    >>> img = palette_image([{"ids": [0], "rgb": [[255, 0, 0]]}, {"ids": [1], "rgb": [[0, 0, 255]]}],
    ...                     cell_height=1, max_width=2)
    >>> img.shape, img[0, 0].tolist(), int(img[1, 0, 3])
    ((2, 2, 4), [255, 0, 0, 255], 0)
    """
    ids = sorted({i for r in records for i in r["ids"]})
    row = {i: j for j, i in enumerate(ids)}
    T = len(records)
    img = np.zeros((max(1, len(ids)), T, 4), np.uint8)
    for t, r in enumerate(records):
        for i, c in zip(r["ids"], r["rgb"]):
            img[row[i], t, :3] = c
            img[row[i], t, 3] = 255
    cw = max(1, min(8, max_width // max(T, 1)))
    return np.repeat(np.repeat(img, cell_height, axis=0), cw, axis=1)


def plot_palette_timeline(report: Any) -> Any:
    """The video job's palette over time (one column per frame, one row per persistent color id) above the
    flicker ratio and K of every frame.

    Parameters
    ----------
    report : dict or path
        What :func:`dclust.apps.video.quantize_video` returns (or the JSON it writes with ``report=``): its
        ``frames`` list of per-frame records (``ids``, ``rgb``, ``k``, ``flicker``).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from dclust.plot import plot_palette_timeline
    >>> frames = [{"t": t, "k": 2, "flicker": 1.0 + 0.1 * t, "ids": [0, 1 + t // 2], "rgb": [[255, 0, 0], [0, 0, 255]]}
    ...           for t in range(4)]
    >>> fig = plot_palette_timeline({"frames": frames})
    >>> len(fig.axes)
    3
    """
    if isinstance(report, (str, os.PathLike)):
        with open(report, encoding="utf-8") as f:
            report = json.load(f)
    frames = report.get("frames") if isinstance(report, dict) else None
    if not frames:
        raise InvalidDataError(message("report", "the video job's report with a non-empty 'frames' list",
                                       "no frames", "Pass what dclust.apps.video.quantize_video returned."))
    fig = _new_figure((8.0, 5.0))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[2, 1])
    image = palette_image(frames, cell_height=1, max_width=len(frames))
    t = np.arange(len(frames))
    top.imshow(image, aspect="auto", interpolation="nearest", extent=(-0.5, len(frames) - 0.5, image.shape[0], 0))
    top.set_ylabel("persistent color id (rank)")
    top.set_title(f"palette over {len(frames)} frames")
    flick = np.array([np.nan if f.get("flicker") is None else float(f["flicker"]) for f in frames])
    bottom.plot(t, flick, color="tab:red", marker=".", label="flicker")
    bottom.axhline(1.0, color="gray", lw=0.8, ls=":")
    bottom.set_ylabel("flicker ratio")
    bottom.set_xlabel("frame")
    twin = bottom.twinx()
    twin.step(t, [f["k"] for f in frames], where="mid", color="tab:blue")
    twin.set_ylabel("K")
    twin.yaxis.label.set_color("tab:blue")
    return fig


# --------------------------------------------------------------------------------------------------------------
# track lifetimes of a stream
# --------------------------------------------------------------------------------------------------------------


def _runs(present: np.ndarray) -> list[tuple[int, int]]:
    """``(start, length)`` of the runs of True."""
    edges = np.diff(np.concatenate([[0], present.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return [(int(a), int(b - a)) for a, b in zip(starts, stops)]


@_axes_doc
def plot_track_lifetimes(steps: Sequence[Any], *, ax: Any = None) -> Any:
    """When each persistent cluster id of a stream is alive: one horizontal bar per id, gaps where it is absent
    (dead, or not observed in that batch) and comes back (revival).

    Parameters
    ----------
    steps : sequence of 1-D integer arrays
        The ids present at every time step, e.g. ``model.labels_`` (or ``np.unique`` of it) after each
        ``DynamicMeans.partial_fit``; ``-1`` entries are ignored.
    {axes}

    Examples
    --------
    >>> from dclust.plot import plot_track_lifetimes
    >>> fig = plot_track_lifetimes([[0, 1], [0, 1], [1, 2], [0, 2]])
    >>> fig.axes[0].get_title()
    '3 tracks over 4 steps (1 revival)'
    """
    sets = []
    for t, s in enumerate(steps):
        a = np.asarray(s.compute() if hasattr(s, "compute") else s).ravel()
        if a.size and a.dtype.kind not in "iu":
            raise InvalidDataError(message(f"steps[{t}]", "integer cluster ids", f"dtype {a.dtype}",
                                           "Pass the persistent labels of each batch (model.labels_)."))
        sets.append(np.unique(a[a >= 0]))
    if not sets:
        raise InvalidDataError(message("steps", "at least one time step", "none", "Pass the labels of each batch."))
    ids = np.unique(np.concatenate(sets)) if any(s.size for s in sets) else np.zeros(0, np.int64)
    present = np.zeros((ids.size, len(sets)), bool)
    for t, s in enumerate(sets):
        present[np.searchsorted(ids, s), t] = True
    fig, ax = _axes(ax, (7.0, max(2.5, min(12.0, 0.25 * ids.size + 1.5))))
    revivals = 0
    colors = _colors(np.arange(ids.size))
    for row in range(ids.size):
        runs = _runs(present[row])
        revivals += len(runs) - 1
        ax.broken_barh([(a - 0.4, n - 0.2) for a, n in runs], (row - 0.4, 0.8), facecolors=colors[row])
    ax.set_yticks(np.arange(ids.size), [str(i) for i in ids] if ids.size <= 40 else None)
    if ids.size > 40:
        ax.set_yticks([])
    ax.set_xlim(-0.6, len(sets) - 0.4)
    ax.set_ylim(-0.6, max(ids.size, 1) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("time step")
    ax.set_ylabel("cluster id")
    ax.set_title(f"{ids.size} track{'s' if ids.size != 1 else ''} over {len(sets)} steps "
                 f"({revivals} revival{'s' if revivals != 1 else ''})")
    return fig


# --------------------------------------------------------------------------------------------------------------
# link satisfaction
# --------------------------------------------------------------------------------------------------------------


@_axes_doc
def plot_link_satisfaction(labels: Any, constraints: Any, *, ax: Any = None) -> Any:
    """Satisfied and violated must-links and cannot-links of a labeling, as stacked bars with the fractions.

    Parameters
    ----------
    labels : array-like or dask.array.Array, shape (n_samples,)
        E.g. ``model.labels_`` or ``model.predict(X, constraints=G)`` of a constrained fit.
    constraints : dclust.ConstraintGraph
    {axes}

    Examples
    --------
    >>> import dclust
    >>> from dclust.plot import plot_link_satisfaction
    >>> G = dclust.ConstraintGraph.from_pairs([0, 1], [1, 2], [True, False], n_samples=4)
    >>> fig = plot_link_satisfaction([0, 0, 1, 1], G)
    >>> fig.axes[0].get_title()
    'links satisfied: 2 of 2 (100.0%)'
    """
    from ..metrics import link_satisfaction

    s = link_satisfaction(labels, constraints)
    fig, ax = _axes(ax, (6.4, 3.0))
    kinds = ["must-link", "cannot-link"]
    ok = [s["must_satisfied"], s["cannot_satisfied"]]
    total = [s["must_total"], s["cannot_total"]]
    bad = [n - k for n, k in zip(total, ok)]
    ax.barh(kinds, ok, color="tab:green", label="satisfied")
    ax.barh(kinds, bad, left=ok, color="tab:red", label="violated")
    for y, (k, n) in enumerate(zip(ok, total)):
        ax.text(max(n, 1) * 1.01, y, f"{k}/{n}" + (f" ({100 * k / n:.1f}%)" if n else ""), va="center")
    ax.set_xlim(0, max(max(total), 1) * 1.35)
    ax.set_xlabel("links")
    ax.legend(loc="lower right", fontsize="small")
    n_all = sum(total)
    frac = "" if not n_all else f" ({100 * sum(ok) / n_all:.1f}%)"
    ax.set_title(f"links satisfied: {sum(ok)} of {n_all}{frac}")
    return fig


# --------------------------------------------------------------------------------------------------------------
# saving
# --------------------------------------------------------------------------------------------------------------


def check_figure_path(path: str | os.PathLike[str], *, overwrite: bool = False) -> str:
    """Check, before any long work, that :func:`save_figure` may write ``path``; returns its absolute path.

    Raises
    ------
    StorageError
        ``path`` exists and ``overwrite`` is False, or its directory does not exist.

    Examples
    --------
    >>> import os, tempfile
    >>> from dclust.plot import check_figure_path
    >>> d = tempfile.mkdtemp()
    >>> check_figure_path(os.path.join(d, "sweep.png")) == os.path.abspath(os.path.join(d, "sweep.png"))
    True
    """
    from .._store._atomic import check_output

    return check_output(path, overwrite, "figure")


def save_figure(fig: Any, path: str | os.PathLike[str], *, overwrite: bool = False, dpi: int = 100) -> str:
    """Write ``fig`` to ``path`` atomically (a temporary sibling renamed into place); the format follows the
    extension (``.png``, ``.svg``, ``.pdf``, ...). Returns the absolute path.

    Raises
    ------
    StorageError
        As :func:`check_figure_path` (checked before the figure is rendered).

    Examples
    --------
    >>> import os, tempfile
    >>> from dclust.plot import plot_track_lifetimes, save_figure
    >>> path = save_figure(plot_track_lifetimes([[0], [0, 1]]), os.path.join(tempfile.mkdtemp(), "tracks.png"))
    >>> open(path, "rb").read(4)
    b'\\x89PNG'
    """
    from .._store._atomic import write_bytes

    dpi = _positive_int("dpi", dpi, "Pass e.g. dpi=100.")
    target = check_figure_path(path, overwrite=overwrite)
    fmt = os.path.splitext(target)[1].lstrip(".").lower() or "png"
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    write_bytes(buf.getvalue(), target)
    return target
