"""``dclust pointcloud``: segment and track point-cloud sequences with persistent ids.

Commands::

    dclust pointcloud track IN OUT.zarr --lam L --T-Q X --k-tau Y [--spectral --kernel rbf|mst --bandwidth W]
                            [--features xyz,rgb,normals] [--feature-weights 1,0.5,0.2] [--fit-sample N]
                            [--tracks PATH.parquet|.csv] [--plot PNG --plot-frames 0,5] [--overwrite] [--seed S]
                            [--scheduler ADDRESS]

IN is a directory or glob of ``.ply`` / ``.las`` / ``.laz`` / ``.npy`` frames, or a Zarr store of frames. Each
frame is clustered in memory (``dclust.apps.pointcloud.track``); no local Dask cluster is started, because a frame
is small and a cluster would only add its start-up time. ``--scheduler`` (or ``$DCLUST_SCHEDULER``) connects to a
running cluster, which then runs the Dask parts (the SD-Means Gram blocks).
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Optional

import typer

from dclust.apps.pointcloud import track

from ._options import _bounded, _positive, choices, example, shared_options, sub_app
from ._session import _Session, _usage

__all__ = ["pointcloud_app"]

pointcloud_app = sub_app("Point-cloud sequences: per-point segment ids that persist over frames (D-Means / SD-Means).")


Kernel = choices("Kernel", "rbf", "mst")


class _FrameProgress:
    """Frames done, frames/s, points/s and the segments of the last frame, on a :meth:`Display.counter`."""

    def __init__(self, update) -> None:
        self.update = update
        self.t0 = time.perf_counter()
        self.points = 0

    def __call__(self, event) -> None:
        if event.estimator != "PointCloudTracker" or event.phase != "frame":
            return
        total = int(event.extra["n_frames"])
        self.points += int(event.extra["n_points"])
        dt = max(time.perf_counter() - self.t0, 1e-9)
        self.update(event.iteration, total,
                    f"frame {event.iteration}/{total}  {event.iteration / dt:.1f} frames/s  "
                    f"{self.points / dt:,.0f} points/s  segments {event.n_clusters}  "
                    f"births {event.extra['births']}  revivals {event.extra['revivals']}  "
                    f"deaths {event.extra['deaths']}")


@pointcloud_app.command(
    "track", epilog=example('dclust pointcloud track "frames/*.ply" segments.zarr --lam 0.5 --T-Q 10 --k-tau 1.1 '
                            "--tracks tracks.csv"))
@shared_options(component=False, tls=False)
def pointcloud_track(
    s: _Session,
    input_path: Annotated[str, typer.Argument(metavar="IN", help="Directory or glob of .ply/.las/.laz/.npy frames, "
                                              "or a Zarr store of frames.")],
    out: Annotated[str, typer.Argument(metavar="OUT.zarr", help="New Zarr store: labels (frames x max_points, "
                                       "int32, -1 padding) and counts.")],
    lam: Annotated[float, typer.Option("--lam", callback=_positive, help="Penalty of a new segment (> 0).")],
    T_Q: Annotated[float, typer.Option("--T-Q", callback=_bounded(1.0, False),
                                       help="Frames a segment may go unseen and still be revived (> 1).")],
    k_tau: Annotated[float, typer.Option("--k-tau", callback=_bounded(1.0, True),
                                         help="Largest revival radius, in units of lam (>= 1).")],
    spectral: Annotated[bool, typer.Option("--spectral", help="SD-Means (kernelised, spectral) instead of D-Means.")]
    = False,
    kernel: Annotated[Kernel, typer.Option("--kernel", help="SD-Means kernel.")] = Kernel.rbf,
    bandwidth: Annotated[Optional[float], typer.Option("--bandwidth", callback=_positive,
                                                       help="SD-Means kernel width omega (required with --spectral).")]
    = None,
    features: Annotated[str, typer.Option("--features", help="Point attributes to cluster: xyz[,rgb][,normals].")]
    = "xyz",
    feature_weights: Annotated[Optional[str], typer.Option("--feature-weights", metavar="W1,W2,...",
                                                           help="One weight > 0 per feature (default 1 each).")]
    = None,
    fit_sample: Annotated[Optional[int], typer.Option("--fit-sample", min=2, help="Points per frame to fit on "
                                                      "(every point is assigned). Default 10000 (D-Means), 1000 "
                                                      "(SD-Means).")] = None,
    tracks: Annotated[Optional[str], typer.Option("--tracks", metavar="PATH.parquet|.csv",
                                                  help="Write the tracks table (id, frame, n_points, centroid, "
                                                  "birth, death).")] = None,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="PNG", help="Write a PNG of the segments.")]
    = None,
    plot_frames: Annotated[str, typer.Option("--plot-frames", metavar="0,5", help="Frames to plot.")] = "0",
    n_restarts: Annotated[int, typer.Option("--n-restarts", min=1, help="Random orders tried per frame.")] = 1,
    seed: Annotated[int, typer.Option("--seed", min=0, help="random_state (reproducible runs).")] = 0,
) -> None:
    """Segment every frame and keep segment ids persistent over time (birth, motion, death, revival)."""
    if spectral and bandwidth is None:
        raise _usage("--spectral needs --bandwidth (the kernel width omega, in the units of the points).")
    if not spectral and (bandwidth is not None or kernel is not Kernel.rbf):
        raise _usage("--bandwidth and --kernel apply to --spectral (SD-Means) only.")
    if plot is None and plot_frames != "0":
        raise _usage("--plot-frames needs --plot PNG.")
    outputs = {"OUT.zarr": out, **({"--tracks": tracks} if tracks else {}), **({"--plot": plot} if plot else {})}
    if os.path.lexists(os.path.abspath(input_path)):  # a glob is not a store and cannot be an output
        s.check_outputs(outputs, (input_path,))
    else:
        s.check_outputs({"OUT.zarr": out})
    with s.live(cluster=s.scheduler is not None) as display:
        from dclust import on_progress

        with display.counter(f"{'SD-Means' if spectral else 'D-Means'} tracking {input_path}") as update:
            with on_progress(_FrameProgress(update)):
                r = track(input_path, out, lam=lam, T_Q=T_Q, k_tau=k_tau, spectral=spectral,
                          kernel=kernel.value, bandwidth=bandwidth, features=features,
                          feature_weights=feature_weights, fit_sample=fit_sample, tracks=tracks, plot=plot,
                          plot_frames=plot_frames, overwrite=s.overwrite, n_restarts=n_restarts, random_state=seed)
    h = r.history
    totals = {k: int(sum(h.get(k, []))) for k in ("births", "deaths", "revivals")}
    result = {
        "command": "pointcloud track", "estimator": r.estimator, "input": input_path, "output": r.out,
        "tracks": r.tracks, "plot": r.plot, "n_frames": r.n_frames, "n_points": r.n_points,
        "max_points": r.max_points, "features": list(r.features), "n_segments": r.n_segments,
        "segments_per_frame": h.get("n_clusters", []), **totals, "seconds": round(r.seconds, 3),
        "frames_per_second": round(r.frames_per_second, 2),
        "params": {"lam": lam, "T_Q": T_Q, "k_tau": k_tau, "spectral": spectral,
                   "kernel": kernel.value if spectral else None, "bandwidth": bandwidth,
                   "feature_weights": feature_weights, "fit_sample": fit_sample, "seed": seed},
    }
    rows = {"estimator": r.estimator, "frames": r.n_frames, "points": r.n_points,
            "features": ",".join(r.features), "segments (ids used)": r.n_segments,
            "segments (last frame)": (h.get("n_clusters") or [0])[-1], **totals,
            "frames / s": round(r.frames_per_second, 1), "labels": out}
    if tracks:
        rows["tracks"] = tracks
    if plot:
        rows["plot"] = plot
    s.report(result, "pointcloud track", rows)
