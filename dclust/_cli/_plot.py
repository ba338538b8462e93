"""``dclust plot``: figures of data, models and jobs, written as images (needs the ``plot`` extra).

Commands::

    dclust plot clusters IN.zarr (--model MODEL.zarr | --labels LABELS.zarr) --out PNG [--sample-size N] [--seed S]
    dclust plot history  MODEL.zarr --out PNG
    dclust plot sweep    SWEEP.json --out PNG
    dclust plot palette  REPORT.json --out PNG
    dclust plot tracks   LABELS.zarr --batch-rows N --out PNG
    dclust plot links    LABELS.zarr --constraints LINKS.zarr|LINKS.csv --out PNG

``clusters``: a uniform sample of rows on a 2-D projection (PCA beyond two features), colored by the model's
prediction or by stored labels, with the model's centers. ``history``: the objective per iteration of a saved model
(``objective_history_``; K per batch for stream models). ``sweep``: the JSON of ``dclust sweep dpmeans --json``.
``palette``: the report of ``dclust video quantize --report`` (palette over time, flicker and K per frame).
``tracks``: the persistent ids of ``dclust stream dmeans`` labels, batch by batch (``--batch-rows`` as in the
stream). ``links``: satisfied and violated links of stored labels. The format follows the extension of ``--out``
(png, svg, pdf); the image is written atomically. ``--json`` prints what was drawn as one object.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

import dclust

from ._options import ConstraintsOpt, InputArg, SeedOpt, _location, example, shared_options, sub_app
from ._session import _Session, _usage

__all__ = ["plot_app"]

plot_app = sub_app("Figures: clusters, fit history, lam sweep, video palette, stream tracks, links.")

OutOpt = Annotated[str, typer.Option("--out", metavar="PNG", help="The image to write (.png, .svg or .pdf).")]
ModelArg = Annotated[
    str, typer.Argument(metavar="MODEL.zarr", help="A model saved by 'dclust fit' or 'dclust stream'.")
]
LabelsArg = Annotated[str, typer.Argument(metavar="LABELS.zarr", help="Labels written by 'dclust fit' or 'stream'.")]


def _plotting(s: _Session, out: str) -> Any:
    """``dclust.plot`` (an ImportError names the extra), with ``--out`` checked before any work."""
    import dclust.plot as plotting

    plotting.check_figure_path(out, overwrite=s.overwrite)
    return plotting


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path!r} does not exist.") from None
    except json.JSONDecodeError as exc:
        raise dclust.errors.InvalidDataError(
            dclust.errors.message(what, "a JSON file", f"invalid JSON ({exc})", "Pass the file the command wrote.")
        ) from None
    if not isinstance(doc, dict):
        raise dclust.errors.InvalidDataError(
            dclust.errors.message(what, "a JSON object", type(doc).__name__, "Pass the file the command wrote."))
    return doc


def _done(s: _Session, plotting: Any, fig: Any, out: str, command: str, info: dict[str, Any]) -> None:
    path = plotting.save_figure(fig, out, overwrite=s.overwrite)
    s.report({"command": f"plot {command}", "output": path, **info}, f"plot {command}", {"image": out, **info})


@plot_app.command("clusters", epilog=example("dclust plot clusters points.zarr --model km.zarr --out clusters.png"))
@shared_options()
def plot_clusters(
    s: _Session,
    input_path: InputArg,
    out: OutOpt,
    model: Annotated[Optional[str], typer.Option("--model", metavar="MODEL.zarr", help="A saved model.")] = None,
    labels: Annotated[Optional[str], typer.Option("--labels", metavar="LABELS.zarr", help="Stored labels.")] = None,
    sample_size: Annotated[int, typer.Option("--sample-size", min=1, help="Rows drawn.")] = 5000,
    seed: SeedOpt = None,
) -> None:
    """Clusters on a 2-D projection (PCA beyond two features) of a uniform sample of rows."""
    if model is None and labels is None:
        raise _usage("give --model (a saved model: its predictions and centers) or --labels (stored labels).")
    plotting = _plotting(s, out)
    X, n, d = s.open_input(input_path)
    estimator = dclust.load(model) if model else None
    y = dclust.open_array(labels) if labels else None
    with s.live() as display:
        with display.step(f"drawing {min(n, sample_size):,} of {n:,} rows"):
            fig = plotting.plot_clusters(X, y, model=estimator, sample_size=sample_size,
                                         random_state=0 if seed is None else seed)
    info = {"n_samples": n, "n_features": d, "sample_size": min(n, sample_size),
            "model": _location(model), "labels": _location(labels)}
    _done(s, plotting, fig, out, "clusters", info)


@plot_app.command("history", epilog=example("dclust plot history km.zarr --out history.png"))
@shared_options(component=False, cluster=False)
def plot_history(s: _Session, model: ModelArg, out: OutOpt) -> None:
    """The objective per iteration of a saved model (and K per batch for stream models)."""
    plotting = _plotting(s, out)
    estimator = dclust.load(model)
    fig = plotting.plot_objective_history(estimator)
    history = [float(v) for v in estimator.objective_history_]
    _done(s, plotting, fig, out, "history", {"estimator": type(estimator).__name__, "n_iterations": len(history),
                                             "objective_first": history[0], "objective_last": history[-1]})


def _json_plot(name: str, metavar: str, source: str, draw: str, info: Any, doc: str, epilog: str) -> None:
    """Register ``dclust plot NAME FILE.json --out PNG``: ``plotting.<draw>(doc)`` of the JSON file ``FILE.json``
    (``source`` says which command wrote it); ``info(doc)`` is what the report shows."""

    def command(s: _Session, path: str, out: str) -> None:
        plotting = _plotting(s, out)
        doc = _read_json(path, metavar)
        _done(s, plotting, getattr(plotting, draw)(doc), out, name, info(doc))

    command.__annotations__ = {"s": _Session, "path": Annotated[str, typer.Argument(metavar=metavar, help=source)],
                               "out": OutOpt, "return": None}
    command.__name__ = command.__qualname__ = f"plot_{name}"
    command.__doc__ = doc
    plot_app.command(name, epilog=example(epilog))(shared_options(component=False, cluster=False)(command))


def _sweep_info(doc: dict) -> dict[str, Any]:
    sw = doc.get("sweep", doc)
    return {"n_candidates": len(sw.get("lam", [])), "suggested_lam": sw.get("suggested_lam")}


_json_plot("sweep", "SWEEP.json", "The output of 'dclust sweep dpmeans --json'.", "plot_sweep", _sweep_info,
           "K and SSE + lam K against lam, with the suggested lam.",
           "dclust sweep dpmeans points.zarr --json > sweep.json && dclust plot sweep sweep.json --out sweep.png")
_json_plot("palette", "REPORT.json", "The report of 'dclust video quantize'.", "plot_palette_timeline",
           lambda doc: {"n_frames": len(doc["frames"])},
           "The video job's palette over time, with the flicker ratio and K of every frame.",
           "dclust plot palette report.json --out palette.png")


@plot_app.command("tracks", epilog=example("dclust plot tracks labels.zarr --batch-rows 10000 --out tracks.png"))
@shared_options(component=False, cluster=False)
def plot_tracks(
    s: _Session,
    labels: LabelsArg,
    out: OutOpt,
    batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, help="Rows per batch (time step), as streamed.")],
) -> None:
    """When each persistent cluster id of a stream is alive (from the labels of 'dclust stream dmeans')."""
    plotting = _plotting(s, out)
    y = dclust.open_array(labels, chunks=batch_rows)
    steps = [y.blocks[i] for i in range(y.numblocks[0])]  # read one batch at a time
    fig = plotting.plot_track_lifetimes(steps)
    _done(s, plotting, fig, out, "tracks", {"n_steps": len(steps), "title": fig.axes[0].get_title()})


@plot_app.command("links", epilog=example("dclust plot links labels.zarr --constraints links.csv --out links.png"))
@shared_options(component=False, cluster=False)
def plot_links(s: _Session, labels: LabelsArg, out: OutOpt, constraints: ConstraintsOpt = None) -> None:
    """Satisfied and violated must-links and cannot-links of stored labels."""
    if constraints is None:
        raise _usage("give --constraints LINKS.zarr|LINKS.csv (the links of the constrained fit).")
    from ._links import load_constraints

    plotting = _plotting(s, out)
    y = dclust.open_array(labels)
    graph = load_constraints(constraints, y)
    fig = plotting.plot_link_satisfaction(y, graph)
    _done(s, plotting, fig, out, "links", dclust.metrics.link_satisfaction(y, graph))
