"""DP-means on an xarray DataArray with a named sample dimension: the labels come back with its coordinates.

The data are minute-by-minute readings of a few sensor channels, ``readings(channel, time)``; every reading comes
from one of a handful of operating regimes (Gaussian blobs). ``time`` is the sample dimension (not the first one:
``open_array(..., sample_dim="time")`` puts it first and stacks the rest into ``feature``). DP-means finds the regimes
without being told how many there are: a new cluster opens whenever a reading is further than ``sqrt(lam)`` from
every centre.
``predict`` returns a DataArray indexed by ``time``, so the usual xarray tools (selection by date, resampling)
work on the labels.

Usage::

    python examples/dpmeans_xarray.py                     # 200,000 readings of 6 channels, 5 regimes
    python examples/dpmeans_xarray.py --n 20000           # toy size
    python examples/dpmeans_xarray.py --lam 40 --out regimes.zarr

Without ``--lam``, lam is chosen by the furthest-first heuristic for a target of ``--k`` clusters.
"""

from __future__ import annotations

import argparse
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200_000, help="Number of readings (samples) (default: %(default)s).")
    p.add_argument("--channels", type=int, default=6, help="Sensor channels (features) (default: %(default)s).")
    p.add_argument("--regimes", type=int, default=5, help="True regimes in the data (default: %(default)s).")
    p.add_argument("--k", type=int, default=None, help="Target clusters for the lam heuristic (default: --regimes).")
    p.add_argument("--lam", type=float, default=None, help="DP-means penalty (a squared distance); overrides --k.")
    p.add_argument("--chunk-rows", type=int, default=50_000, help="Samples per dask chunk (default: %(default)s).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the data and of the fit (default: %(default)s).")
    p.add_argument("--out", default=None, help="Optionally write the labels with their time coordinate (Zarr).")
    args = p.parse_args(argv)
    for name in ("n", "channels", "regimes", "chunk_rows"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lam is not None and not args.lam > 0:
        p.error("--lam must be > 0")
    if args.k is not None and not 1 <= args.k <= args.n:
        p.error("--k must be in [1, --n]")
    return args


def sensor_readings(n: int, channels: int, regimes: int, chunk_rows: int, seed: int):
    """``(readings, regime)``: DataArrays ``(channel, time)`` and ``(time,)``, dask-backed, chunked along time."""
    import pandas as pd
    import xarray as xr

    import dclust

    blobs = dclust.make_blobs(n, channels, regimes, cluster_std=1.0, chunk_rows=chunk_rows, random_state=seed)
    time_coord = pd.date_range("2024-01-01", periods=n, freq="min", name="time")
    channel = [f"sensor-{i}" for i in range(channels)]
    readings = xr.DataArray(
        blobs.X.T, dims=("channel", "time"), coords={"channel": channel, "time": time_coord}, name="readings",
        attrs={"units": "arbitrary"},
    )
    regime = xr.DataArray(blobs.labels, dims=("time",), coords={"time": time_coord}, name="regime")
    return readings, regime


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import dask.array as da
    import numpy as np

    import dclust

    readings, regime = sensor_readings(args.n, args.channels, args.regimes, args.chunk_rows, args.seed)
    print(f"readings: dims {readings.dims}, shape {readings.shape}, "
          f"time {readings.time.values[0]} .. {readings.time.values[-1]}")

    # (channel, time) -> (time, feature): the sample dimension first, every other dimension a feature.
    X = dclust.open_array(readings, sample_dim="time")
    if args.lam is not None:
        dp = dclust.DPMeans(lam=args.lam, random_state=args.seed)
    else:
        dp = dclust.DPMeans(n_clusters=args.k or args.regimes, random_state=args.seed)
    t = time.perf_counter()
    dp.fit(X)
    seconds = time.perf_counter() - t

    labels = dp.predict(X)  # a lazy DataArray on the time coordinate
    assert labels.dims == ("time",) and labels.indexes["time"].equals(readings.indexes["time"])
    print(f"DPMeans: lam = {dp.lam_:.4g}, K = {dp.n_clusters_}, {dp.n_iter_} iterations in {seconds:.2f}s, "
          f"objective {dp.objective_:.6g}")
    print(f"labels: {type(labels).__name__} dims {labels.dims}, dtype {labels.dtype}, "
          f"coordinate 'time' ({labels.sizes['time']:,} timestamps)")

    # The coordinate makes label-based selection work: the clusters of the first five minutes, by timestamp.
    start = readings.time.values[0]
    window = labels.sel(time=slice(start, start + np.timedelta64(4, "m"))).compute()
    print("first five minutes: " + ", ".join(f"{str(t)[11:16]} -> {int(v)}"
                                             for t, v in zip(window.time.values, window.values)))
    # Cluster sizes without collecting the labels: one tree-reduced bincount over the chunks.
    counts = da.bincount(labels.data, minlength=dp.n_clusters_).compute()
    print("samples per cluster: " + ", ".join(f"{k}: {c:,}" for k, c in enumerate(counts)))
    ari = dclust.metrics.adjusted_rand_score(regime.data, labels.data)
    print(f"adjusted Rand index vs the true regimes: {ari:.4f}")

    if args.out:
        labels.rename("cluster").to_dataset().to_zarr(args.out, mode="w", consolidated=False)
        print(f"labels with their time coordinate written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
