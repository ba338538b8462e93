"""``dclust video``: colour quantisation of videos (or Zarr frames stores) with Dynamic Means and its baselines.

Commands::

    dclust video quantize IN OUT [--method dmeans|kmeans|dpmeans] [--lam L [--T-Q X --k-tau Y | --Q q --tau t] | --k N]
                                 [--colorspace rgb|lab] [--max-colors M] [--fit-sample S] [--palette-png P.png]
                                 [--report R.json] [--resume] [--overwrite] [--scheduler ADDRESS]

IN is a video file PyAV reads or a Zarr array ``(T, H, W, 3)`` uint8; OUT is a video (H.264 when available) or a
``*.zarr`` store. Runs in-process by default (decode, fit, quantise and encode overlap in threads); with
``--scheduler`` (Zarr input) the workers of a running Dask cluster quantise the frames. The output is renamed into
place only when complete; an interrupted run leaves a checkpoint that ``--resume`` continues from.
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dclust import on_progress

from ._cluster import TlsCaOpt, TlsCertOpt, TlsKeyOpt, dask_client, tls_from_context
from ._display import fmt_number
from ._options import (
    DebugOpt,
    JsonOpt,
    MemoryLimitOpt,
    OverwriteOpt,
    QuietOpt,
    SchedulerOpt,
    VerboseOpt,
    _bounded,
    _positive,
    choices,
    example,
    sub_app,
)
from ._session import _command, _memory_limit, _usage

__all__ = ["video_app"]

video_app = sub_app(
    "Video colour quantisation: persistent palettes with Dynamic Means, per-frame k-means / DP-means baselines."
)


Method = choices("Method", "dmeans", "kmeans", "dpmeans")


ColorSpace = choices("ColorSpace", "lab", "rgb")


_above_one = _bounded(1.0, False)
_at_least_one = _bounded(1.0, True)


@contextlib.contextmanager
def _frame_progress(console: Any, enabled: bool, description: str) -> Iterator[None]:
    """A rich progress bar fed by the job's per-frame events: frames done, fps, K, PSNR, flicker."""
    if not enabled:
        yield
        return
    progress = Progress(TextColumn("[bold]{task.description}[/]"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console,
                        refresh_per_second=8, redirect_stdout=False, redirect_stderr=False)
    task = progress.add_task(description, total=None, status="starting")
    started = []

    def callback(event: Any) -> None:
        if event.estimator != "video":
            return
        if not started:  # shown from the first frame on: errors found before any work print alone
            progress.start()
            started.append(True)
        x = event.extra
        flick = "-" if x["flicker"] is None or not math.isfinite(x["flicker"]) else f"{x['flicker']:.3f}"
        status = (f"{x['fps']:.1f} fps  K {event.n_clusters}  PSNR {fmt_number(round(event.objective, 2))} dB  "
                  f"flicker {flick}" + ("  (replaying)" if x["replayed"] else ""))
        progress.update(task, total=x["n_frames"], completed=event.iteration, status=status)

    try:
        with on_progress(callback):
            yield
    finally:
        if started:
            progress.stop()


@video_app.command(
    "quantize", epilog=example("dclust video quantize clip.mp4 quantized.mp4 --lam 800 --palette-png palette.png "
                               "--report report.json"))
def quantize(
    input_path: Annotated[str, typer.Argument(metavar="IN", help="Video file (mp4, avi, mkv, ...) or Zarr frames "
                                              "store (T, H, W, 3) uint8.")],
    output: Annotated[str, typer.Argument(metavar="OUT", help="Quantised video (e.g. out.mp4) or OUT.zarr.")],
    method: Annotated[Method, typer.Option("--method", help="D-Means, or per-frame k-means / DP-means.")]
    = Method.dmeans,
    lam: Annotated[Optional[float], typer.Option("--lam", callback=_positive, help="Penalty per new colour (a "
                                                 "squared distance in the colour space; default 800 in rgb, "
                                                 "100 in lab).")] = None,
    T_Q: Annotated[Optional[float], typer.Option("--T-Q", callback=_above_one, help="Frames a colour may go unseen "
                                                 "and be revived (> 1; default 15).")] = None,
    k_tau: Annotated[Optional[float], typer.Option("--k-tau", callback=_at_least_one, help="Largest revival radius "
                                                   "in units of lam (>= 1; default 1.1).")] = None,
    Q: Annotated[Optional[float], typer.Option("--Q", min=0.0, help="Instead of --T-Q/--k-tau: revival cost per "
                                               "frame unseen (with --tau).")] = None,
    tau: Annotated[Optional[float], typer.Option("--tau", min=0.0, help="Instead of --T-Q/--k-tau: transition "
                                                 "variance (with --Q); below 1/(T_Q-1) holds the palette more "
                                                 "firmly: less flicker, a little PSNR.")] = None,
    k: Annotated[Optional[int], typer.Option("--k", min=1, help="Colours per frame (--method kmeans).")] = None,
    colorspace: Annotated[ColorSpace, typer.Option("--colorspace", help="Space the colours are clustered in.")]
    = ColorSpace.rgb,
    max_colors: Annotated[Optional[int], typer.Option("--max-colors", min=1, help="At most this many colours per "
                                                      "frame (the most used are kept).")] = None,
    fit_sample: Annotated[int, typer.Option("--fit-sample", min=1, help="Pixels per frame used to fit the "
                                            "palette (every pixel is assigned).")] = 2048,
    max_iter: Annotated[int, typer.Option("--max-iter", min=1, help="Bound on the passes of each frame's fit "
                                          "(fits converge well within the default).")] = 100,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the pixel sample and the orders.")] = 0,
    palette_png: Annotated[Optional[str], typer.Option("--palette-png", metavar="PALETTE.png",
                                                       help="The palette over time (column = frame, row = "
                                                       "persistent colour).")] = None,
    report: Annotated[Optional[str], typer.Option("--report", metavar="REPORT.json", help="Per-frame K, births, "
                                                  "deaths, PSNR, flicker, and the summary, as JSON.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run of the same job from its "
                                         "checkpoint (.OUT.resume).")] = False,
    max_frames: Annotated[Optional[int], typer.Option("--max-frames", min=1, help="Only the first N frames.")]
    = None,
    stop_after: Annotated[Optional[int], typer.Option("--stop-after", min=1, hidden=True,
                                                      help="Testing: stop as if interrupted after N frames.")] = None,
    overwrite: OverwriteOpt = False,
    scheduler: SchedulerOpt = None,
    tls_ca: TlsCaOpt = None, tls_cert: TlsCertOpt = None, tls_key: TlsKeyOpt = None,
    memory_limit: MemoryLimitOpt = "auto",
    json_out: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    debug: DebugOpt = False,
) -> None:
    """Quantise the colours of every frame; write the video, and optionally the palette PNG and a JSON report."""
    if method == Method.kmeans and k is None:
        raise _usage("--method kmeans needs --k (the number of colours).")
    if method != Method.kmeans and k is not None:
        raise _usage(f"--k is for --method kmeans; --method {method.value} takes --lam.")
    if (Q is not None or tau is not None) and (T_Q is not None or k_tau is not None or Q is None or tau is None):
        raise _usage("give D-Means' temporal parameters as one pair: --T-Q and --k-tau, or --Q and --tau.")
    with _command(json_out, quiet, debug, verbose=verbose) as s:
        from dclust.apps.video import VideoOptions, quantize_video
        from dclust.io.video import is_zarr_path

        if scheduler and not is_zarr_path(input_path):
            raise _usage(f"--scheduler needs a Zarr frames store as IN (workers read the frames from it); "
                         f"{input_path!r} is a video file. Quantise it to OUT.zarr locally first, or drop --scheduler.")

        if lam is None and method != Method.kmeans:
            lam = 800.0 if colorspace == ColorSpace.rgb else 100.0
        dmeans = method == Method.dmeans
        options = VideoOptions(
            method=method.value, lam=lam if method != Method.kmeans else None, T_Q=T_Q if dmeans else None,
            k_tau=k_tau if dmeans else None, Q=Q if dmeans else None, tau=tau if dmeans else None, k=k,
            colorspace=colorspace.value, max_colors=max_colors, fit_sample=fit_sample, max_iter=max_iter, seed=seed,
            palette_png=palette_png, report=report, resume=resume, overwrite=overwrite, max_frames=max_frames,
        )
        with contextlib.ExitStack() as stack:
            client = None
            if scheduler:
                client = stack.enter_context(dask_client(scheduler, memory_limit=_memory_limit(memory_limit),
                                                         announce=None if quiet else s.err.print,
                                                         **tls_from_context()))
                s.scheduler_address = client.scheduler.address
            stack.enter_context(_frame_progress(s.err, not quiet, f"{method.value} {os.path.basename(input_path)}"))
            doc = quantize_video(input_path, output, options, client=client, _stop_after=stop_after)
        summ = doc["summary"]
        result = {"command": "video quantize", **{k_: v for k_, v in doc.items() if k_ not in ("frames", "flicker")}}
        rows = {"method": method.value, "frames": doc["n_frames"], "size": f"{doc['width']} x {doc['height']}",
                "colours (median K)": summ["k_median"], "PSNR (dB)": round(summ["psnr"], 3),
                "flicker median |f-1|": summ["flicker_median_abs_dev"], "births": summ["births"],
                "deaths": summ["deaths"], "frames / s": round(doc["frames_per_second"], 2),
                "resumed after": doc["resumed_frames"], "codec": doc["codec"], "output": output}
        if method == Method.kmeans:
            fewer = summ["frames_fewer_colors"]
            rows[f"frames with < {k} colours"] = (f"{len(fewer)} (frames {_frame_list(fewer)})" if fewer else 0)
        if palette_png:
            rows["palette"] = palette_png
        if report:
            rows["report"] = report
        s.report(result, "video quantize", rows)


def _frame_list(frames: list[int], shown: int = 6) -> str:
    """``0, 1, 2, ... (12 in all)``: the first frames of a list."""
    return ", ".join(map(str, frames[:shown])) + (f", ... ({len(frames)} in all)" if len(frames) > shown else "")
