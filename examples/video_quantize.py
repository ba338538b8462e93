"""Colour-quantise a generated video with Dynamic Means and compare with per-frame k-means and DP-means.

Writes a short synthetic video of moving, shaded coloured shapes with PyAV (H.264), quantises it three ways
(``dclust.apps.video.quantize_video``, the library call behind ``dclust video quantize``) and prints, per method,
the PSNR, the flicker ratio's median |f_t - 1| (ALGORITHMS.md 9; 0 is ideal), the median number of colours and the
frames per second. D-Means keeps persistent palette ids over time, so its colours flicker less than DP-means run
on each frame alone.

    python examples/video_quantize.py --frames 48 --width 640 --height 272 --out video-output
"""

from __future__ import annotations

import argparse
import os

from dclust.apps.video import VideoOptions, quantize_video, synthetic_frames
from dclust.io._video import write_video


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, received {text}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", "--frames", dest="frames", type=positive_int, default=48, help="number of frames")
    p.add_argument("--width", type=positive_int, default=640)
    p.add_argument("--height", type=positive_int, default=272)
    p.add_argument("--out", default="video-output", help="directory for the videos, palettes and reports")
    p.add_argument("--lam", type=float, default=800.0, help="D-Means / DP-means penalty (RGB 0..255 units)")
    p.add_argument("--T-Q", dest="T_Q", type=float, default=15.0)
    p.add_argument("--k-tau", dest="k_tau", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    source = os.path.join(args.out, "shapes.mp4")
    write_video(synthetic_frames(args.frames, args.width, args.height, seed=args.seed), source, fps=24,
                overwrite=True)
    print(f"generated {source}: {args.frames} frames of {args.width} x {args.height}")
    results = {}

    def job(name: str, method: str, **kw) -> dict:
        options = VideoOptions(method=method, seed=args.seed, palette_png=os.path.join(args.out, f"{name}-palette.png"),
                               report=os.path.join(args.out, f"{name}-report.json"), overwrite=True, **kw)
        doc = quantize_video(source, os.path.join(args.out, f"{name}.mp4"), options)
        results[name] = doc["summary"] | {"fps": doc["frames_per_second"]}
        return doc

    dm = job("dmeans", "dmeans", lam=args.lam, T_Q=args.T_Q, k_tau=args.k_tau)
    k = max(1, round(dm["summary"]["k_median"]))
    job("kmeans", "kmeans", k=k, lam=None, T_Q=None, k_tau=None)
    job("dpmeans", "dpmeans", lam=args.lam, T_Q=None, k_tau=None)
    print(f"{'method':<10} {'PSNR dB':>8} {'median |f-1|':>13} {'colors':>8} {'frames/s':>9}")
    for name, s in results.items():
        print(f"{name:<10} {s['psnr']:>8.2f} {s['flicker_median_abs_dev']:>13.4f} {s['k_median']:>8.1f} "
              f"{s['fps']:>9.1f}")
    print(f"outputs in {args.out}/ (videos, palette PNGs: one column per frame, one row per colour; JSON reports)")
    return results


if __name__ == "__main__":
    main()
