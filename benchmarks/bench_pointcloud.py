"""Point-cloud tracking: frames per second at 30,000 and 300,000 points per frame, and the [DM] 8.6 protocol.

Speed (issue 7 target: >= 30 frames/s at 30,000 points, D-Means):
- in memory: synthetic frames (moving boxes, spheres, panels; ``dclust.apps.pointcloud.moving_objects_scene``)
  generated first, then ``PointCloudTracker.step`` timed per frame (fit on ``fit_sample`` points, every point
  assigned), for D-Means at 30k and 300k points, D-Means fitted on all 30k points, and SD-Means at 30k;
- end to end: the same 30k frames written as ``.npy`` files, then ``track()`` (read, cluster, write the label
  store and the tracks table), timed as a whole.

Accuracy (docs/algorithms.md 10.2, LiDAR people, Table 3: SD-Means 86.8%, D-Means 53.6% on data that is not
available): tracking accuracy (one-to-one matching per frame, consistent over time, docs/algorithms.md 9), per-frame
matched accuracy and id consistency of D-Means and SD-Means on two synthetic scenes with ground truth: "sparse"
(6 objects, 12 m arena, panels 1.4 m) and "crowded" (8 objects, 8 m arena, objects passing closer, panels 3 m).

    python benchmarks/bench_pointcloud.py            # full size
    python benchmarks/bench_pointcloud.py --quick    # < 1 min, for validation
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from _common import HERE, machine_info, print_table, write_json

PAPER = {"SD-Means": {"accuracy_pct": 86.8, "seconds": 816.7}, "D-Means": {"accuracy_pct": 53.6, "seconds": 38.1}}
SCENES = {
    "sparse": dict(n_objects=6, arena=12.0, separation=2.5, plane_width=1.4),
    "crowded": dict(n_objects=8, arena=8.0, separation=1.6, plane_width=3.0),
}
DM = dict(lam=4.0, T_Q=10, k_tau=1.1)
SD = dict(lam=20.0, T_Q=10, k_tau=1.1, spectral=True, kernel="mst", bandwidth=0.3, max_support=20)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (< 1 min)")
    p.add_argument("--frames", type=int, default=None, help="frames of the 30k speed runs (default 120; quick 15)")
    p.add_argument("--out", default=str(HERE / "results" / "bench_pointcloud.json"))
    return p.parse_args(argv)


def scene_frames(n_frames, n_points, seed=0, **kw):
    from dclust.apps.pointcloud import moving_objects_scene

    return list(moving_objects_scene(n_frames=n_frames, n_points=n_points, random_state=seed, **kw))


def time_tracker(frames, warmup=2, **params):
    """Frames/s of PointCloudTracker.step over ``frames`` (after ``warmup`` frames that JIT-compile and fill the
    state), and the tracking scores of the whole run."""
    from dclust.apps.pointcloud import PointCloudTracker, tracking_scores

    tr = PointCloudTracker(**params)
    labels, per, cpu = [], [], []
    for i, f in enumerate(frames):
        t0, c0 = time.perf_counter(), time.process_time()
        labels.append(tr.step(f))
        if i >= warmup:
            per.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    scores = tracking_scores([(f.ids, z) for f, z in zip(frames, labels)])
    total = sum(per)
    # wall time depends on what else runs on the (shared) machine; CPU time of this process (all its threads)
    # is the load-independent cost, so cpu_fps is what an idle machine reaches with one core per thread used
    return {"frames_timed": len(per), "seconds": total, "fps": len(per) / total, "cpu_seconds": sum(cpu),
            "cpu_fps": len(cpu) / max(sum(cpu), 1e-9), "median_frame_s": statistics.median(per),
            "points_per_frame": len(frames[0]), "fit_sample": tr.fit_sample,
            "segments_last_frame": int(tr.history_["n_clusters"][-1]), **scores}


def _row(label, s):
    return [label, f"{s['fps']:.2f}", f"{s['cpu_fps']:.2f}", f"{s['median_frame_s'] * 1e3:.1f} ms",
            f"{s['tracking_accuracy']:.3f}"]


def end_to_end(frames, tmp, **params):
    from dclust.apps.pointcloud import track
    from dclust.io._pointcloud import write_npy

    d = os.path.join(tmp, "frames")
    os.makedirs(d, exist_ok=True)
    for t, f in enumerate(frames):
        write_npy(os.path.join(d, f"f{t:05d}.npy"), f.xyz, f.rgb, f.normals)
    t0, c0 = time.perf_counter(), time.process_time()
    r = track(d, os.path.join(tmp, "out.zarr"), tracks=os.path.join(tmp, "tracks.parquet"), overwrite=True,
              **params)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"frames": r.n_frames, "points_per_frame": len(frames[0]), "loop_seconds": r.seconds,
            "cpu_seconds_with_scan": cpu, "cpu_fps_with_scan": r.n_frames / max(cpu, 1e-9),
            "fps_loop": r.frames_per_second, "wall_seconds_with_scan": wall, "fps_wall": r.n_frames / wall,
            "format": ".npy (n, 9) float32 -> labels.zarr + tracks.parquet"}


def main(argv=None):
    args = parse_args(argv)
    q = args.quick
    n_speed = args.frames or (10 if q else 120)
    results = {"machine": machine_info(), "quick": q, "paper_table3": PAPER, "speed": {}, "protocol": {}}
    rows = []

    # ---------------------------------------------------------------------------------------------- speed
    f30 = scene_frames(n_speed + 2, 30_000, seed=0, **SCENES["sparse"])
    s = time_tracker(f30, **DM)
    results["speed"]["dmeans_30k"] = s
    rows.append(_row("D-Means, 30k pts, fit 10k + assign all", s))
    s = time_tracker(f30[: min(len(f30), 22 if q else 62)], **DM, fit_sample=30_000)
    results["speed"]["dmeans_30k_fit_all"] = s
    rows.append(_row("D-Means, 30k pts, fit all 30k", s))
    with tempfile.TemporaryDirectory() as tmp:
        e = end_to_end(f30[: min(len(f30), 15 if q else 120)], tmp, **DM)
    results["speed"]["dmeans_30k_end_to_end"] = e
    rows.append(["D-Means, 30k pts, files -> Zarr + Parquet", f"{e['fps_loop']:.1f}",
                 f"{e['cpu_fps_with_scan']:.1f}", "-", "-"])
    del f30
    f300 = scene_frames(3 if q else 32, 300_000, seed=0, **SCENES["sparse"])
    s = time_tracker(f300, **DM)
    results["speed"]["dmeans_300k"] = s
    rows.append(_row("D-Means, 300k pts, fit 10k + assign all", s))
    del f300
    fsd = scene_frames(3 if q else 22, 30_000, seed=0, **SCENES["sparse"])
    s = time_tracker(fsd, **SD, fit_sample=800)
    results["speed"]["sdmeans_30k"] = s
    rows.append(_row("SD-Means (MST), 30k pts, fit 800 + 1-NN", s))
    del fsd
    print_table(rows, ["run", "frames/s (wall)", "frames/s (CPU time)", "median frame", "tracking acc"],
                title="point-cloud tracking speed")
    results["speed"]["target_fps_30k"] = 30.0
    results["speed"]["target_met_wall"] = results["speed"]["dmeans_30k"]["fps"] >= 30.0
    results["speed"]["target_met_cpu"] = results["speed"]["dmeans_30k"]["cpu_fps"] >= 30.0
    results["speed"]["load_average_at_end"] = os.getloadavg()

    # ---------------------------------------------------------------------------------------------- protocol
    trials = 1 if q else 2
    n_frames, n_points = (10, 2_000) if q else (40, 5_000)
    prow = []
    for scene, kw in SCENES.items():
        per_alg = {}
        for name, params in (("D-Means", dict(DM)), ("SD-Means", dict(SD, fit_sample=800))):
            runs = []
            for trial in range(trials):
                frames = scene_frames(n_frames, n_points, seed=100 + trial, **kw)
                runs.append(time_tracker(frames, warmup=0, **params))
            agg = {k: float(np.mean([r[k] for r in runs])) for k in
                   ("tracking_accuracy", "untracked_accuracy", "mean_frame_accuracy", "id_consistency",
                    "objects_without_switch", "fps")}
            agg.update(trials=trials, frames=n_frames, points_per_frame=n_points,
                       tracking_accuracy_per_trial=[r["tracking_accuracy"] for r in runs],
                       seconds_per_sequence=float(np.mean([r["seconds"] for r in runs])),
                       params={k: v for k, v in params.items()}, paper_accuracy_pct=PAPER[name]["accuracy_pct"])
            per_alg[name] = agg
            prow.append([scene, name, f"{100 * agg['tracking_accuracy']:.1f}",
                         f"{100 * agg['mean_frame_accuracy']:.1f}", f"{agg['id_consistency']:.3f}",
                         f"{agg['objects_without_switch']:.2f}", f"{agg['fps']:.1f}", f"{PAPER[name]['accuracy_pct']}"])
        results["protocol"][scene] = {"scene": kw, **per_alg}
    print_table(prow, ["scene", "algorithm", "tracking acc %", "per-frame acc %", "id consistency",
                       "objects w/o id switch", "frames/s", "paper acc % (LiDAR)"],
                title=f"[DM] 8.6 protocol on synthetic scenes ({trials} trial(s) x {n_frames} frames x "
                      f"{n_points:,} pts)")
    results["note"] = (
        "The paper's LiDAR data is not available; these scenes are synthetic (dclust.apps._scenes), with "
        "ground-truth object ids. Tracking accuracy as docs/algorithms.md 9 (first mapping wins), id consistency = "
        "fraction of consecutive frame pairs in which an object's per-frame Hungarian match keeps its id. Fixed "
        f"parameters: D-Means {DM}, SD-Means {SD} with fit_sample=800, not tuned per scene.")
    if not q or args.out != str(HERE / "results" / "bench_pointcloud.json"):
        write_json(results, args.out)
        print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
