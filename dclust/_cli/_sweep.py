"""``dclust sweep``: choose a model's size before fitting it.

Commands::

    dclust sweep dpmeans IN.zarr [--lams L1,L2,...] [--n-lams N] [--max-clusters K] [--sample-size S]
                                 [--silhouette-sample-size S] [--seed S] [--plot SWEEP.png]

``sweep dpmeans`` runs :func:`dclust.model_selection.sweep_dpmeans`: DP-means fitted on a uniform sample for every
candidate lam, then one pass over the full data scores every candidate (two passes in all). It prints one row per
candidate (lam, K, ``SSE + lam K``, Calinski-Harabasz, silhouette) and the suggested lam with the rule that chose
it; ``--json`` prints the same figures as one object (``sweep``, ``suggested_lam``, ``suggested_n_clusters``,
``rule``); ``--plot`` draws K and the objective against lam (:func:`dclust.plot.plot_sweep`). Then fit with
``dclust fit dpmeans IN.zarr --lam <suggested_lam> ...``.
"""

from __future__ import annotations

import math
from typing import Annotated, Optional

import typer
from rich.table import Table

import dclust.model_selection as model_selection
from dclust.errors import message

from ._display import fmt_number
from ._options import InputArg, SeedOpt, _location, example, shared_options, sub_app
from ._session import _Session, _usage

__all__ = ["sweep_app"]

sweep_app = sub_app("Choose lam (or K) before fitting: sweep candidates, score them, suggest one.")

PlotOpt = Annotated[
    Optional[str],
    typer.Option("--plot", metavar="PNG", help="Also draw the curve (K and SSE + lam K against lam) to this image."),
]


def _lams(text: Optional[str]) -> Optional[list[float]]:
    if text is None:
        return None
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise _usage(message("--lams", "comma-separated finite penalties > 0", repr(text),
                             "Pass e.g. --lams 1,10,100, or drop --lams for candidates from the data."))
    return values


def _sweep_table(sw: model_selection.LamSweep) -> Table:
    table = Table(title="DP-means lam sweep", title_justify="left")
    for name in ("lam", "K", "SSE + lam K", "Calinski-Harabasz", "silhouette (sample)", ""):
        table.add_column(name, justify="right" if name else "left")
    for lam, k, obj, ch, sil in zip(sw.lam, sw.n_clusters, sw.objective, sw.calinski_harabasz, sw.silhouette):
        mark = "<- suggested" if lam == sw.suggested_lam else ""
        table.add_row(fmt_number(lam), fmt_number(k), fmt_number(obj), fmt_number(ch),
                      fmt_number(None if sil is None else round(sil, 4)), mark)
    return table


@sweep_app.command("dpmeans", epilog=example("dclust sweep dpmeans points.zarr --n-lams 16 --plot sweep.png"))
@shared_options()
def sweep_dpmeans(
    s: _Session,
    input_path: InputArg,
    lams: Annotated[
        Optional[str],
        typer.Option("--lams", metavar="L1,L2,...", help="Candidate penalties. Default: from the furthest-first "
                                                          "heuristic on the sample."),
    ] = None,
    n_lams: Annotated[int, typer.Option("--n-lams", min=2, help="Number of default candidates.")] = 24,
    max_clusters: Annotated[
        int,
        typer.Option("--max-clusters", min=2, help="The smallest default candidate gives about this many clusters."),
    ] = 20,
    sample_size: Annotated[int, typer.Option("--sample-size", min=3, help="Rows the candidates are fitted on.")] = 5000,
    silhouette_sample_size: Annotated[
        int, typer.Option("--silhouette-sample-size", min=3, help="Rows of the sample the silhouette uses.")
    ] = 1000,
    seed: SeedOpt = None,
    plot: PlotOpt = None,
) -> None:
    """DP-means for many lam in two passes: K, SSE + lam K, Calinski-Harabasz, silhouette, and a suggested lam."""
    candidates = _lams(lams)
    s.check_outputs({}, (input_path,))
    if plot:
        import dclust.plot as plotting

        plotting.check_figure_path(plot, overwrite=s.overwrite)
    X, n, d = s.open_input(input_path)
    with s.live() as display:
        with display.step(f"sweeping lam for DP-means on {n:,} x {d} (sample of {min(n, sample_size):,} rows)"):
            sw = model_selection.sweep_dpmeans(
                X, candidates, n_lams=n_lams, max_clusters=max_clusters, sample_size=sample_size,
                silhouette_sample_size=silhouette_sample_size, random_state=seed,
            )
    if plot:
        plotting.save_figure(plotting.plot_sweep(sw), plot, overwrite=s.overwrite)
    result = {
        "command": "sweep dpmeans", "input": _location(input_path), "component": s.component,
        "n_samples": n, "n_features": d, "sweep": sw.to_dict(), "suggested_lam": sw.suggested_lam,
        "suggested_n_clusters": sw.suggested_n_clusters, "rule": sw.rule, "n_passes": sw.n_passes,
        "plot": _location(plot),
    }
    rows = {"data": f"{n:,} x {d}", "candidates": len(sw.lam), "passes over the data": sw.n_passes,
            "suggested lam": sw.suggested_lam, "suggested K": sw.suggested_n_clusters, "rule": sw.rule,
            "seconds": sw.seconds.get("total")}
    if plot:
        rows["plot"] = plot
    if sw.suggested_lam is not None:
        rows["next"] = f"dclust fit dpmeans {input_path} --lam {sw.suggested_lam:.6g} --labels ... --model ..."
    if not s.json:
        s.out.print(_sweep_table(sw))
    s.report(result, "suggestion", rows)
