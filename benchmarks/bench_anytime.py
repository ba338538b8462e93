"""Benchmark: AnytimeDPMeans over a Zarr store against one plain streaming read of the same store (issue 14).

For each configuration ``N x D`` (default 10,000,000 x 8 in 500,000-row chunks, the case of issue 14, and
1,000,000 x 64 in 125,000-row chunks; float32 Gaussian blobs, ``--centers`` centres of sd ``--cluster-std``, stored
without compression as in ``bench_engine.py``):

- the floor: every chunk read once with plain zarr in 2 threads, no Dask (best of ``--repeats`` after a warm read);
- ``AnytimeDPMeans(lam).fit(store)``: one read, one chunk per batch (best of ``--repeats``), on Dask's default
  threaded scheduler and on a ``LocalCluster`` of 2 single-threaded worker processes; read and fit interleaved
  (read, fit, read, fit, ...) so that load from other processes hits both alike;
- the model's DP-means objective on the whole data set (``SSE + lam K``, one extra pass, not timed), K, batches;
- beside the wall times, the CPU seconds of the read and of the fit (driver process plus the cluster's worker
  processes): on a machine shared with other work the CPU ratio still tells the work done per read, where the
  wall ratio depends on the share of the cores the run gets.

``lam`` defaults to the furthest-first heuristic (``DPMeans(n_clusters=centers).lam_``) on a 200,000-row sample
(about the lam of ``bench_engine.py``: K = 12-16 on these blobs).

Target: AnytimeDPMeans <= 4 x the plain read. Run: ``.venv/bin/python benchmarks/bench_anytime.py`` (writes
``benchmarks/results/bench_anytime.json``); smoke run: ``--configs 400000x8:50000 --repeats 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, fmt_s, machine_info, print_table, timed, write_json, zarr_read  # noqa: E402

T_ANYTIME = 4.0
PATHS = ("threads", "processes")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default="10000000x8:500000,1000000x64:125000",
                   help="comma-separated NxD:chunk_rows")
    p.add_argument("--centers", type=int, default=16)
    p.add_argument("--cluster-std", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lam", type=float, default=None, help="one lam for every configuration (default: heuristic)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    p.add_argument("--data-dir", type=Path, default=HERE / "data")
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_anytime.json")
    return p.parse_args(argv)


def _config(text: str) -> tuple[int, int, int]:
    shape, rows = text.split(":")
    n, d = shape.lower().split("x")
    return int(n), int(d), int(rows)


def ensure_store(args, n: int, d: int, rows: int) -> str:
    """Gaussian blobs, float32, plain zarr without codec; reused when the parameters match."""
    import dclust
    import zarr

    params = {"n": n, "d": d, "centers": args.centers, "cluster_std": args.cluster_std, "chunk_rows": rows,
              "seed": args.seed}
    stem = "anytime_" + "_".join(f"{k}{v}" for k, v in params.items())
    path, side = args.data_dir / f"{stem}.zarr", args.data_dir / f"{stem}.params.json"
    if not (path.exists() and side.exists() and json.loads(side.read_text()) == params):
        print(f"generating {path.name} ...", flush=True)
        args.data_dir.mkdir(parents=True, exist_ok=True)
        if path.exists():
            shutil.rmtree(path)
        b = dclust.make_blobs(n, d, centers=args.centers, cluster_std=args.cluster_std, chunk_rows=rows,
                              dtype="float32", random_state=args.seed, return_labels=False)
        dst = zarr.create_array(store=str(path), shape=b.X.shape, chunks=(rows, d), dtype="float32",
                                compressors=None)
        b.X.store(dst, lock=False)
        side.write_text(json.dumps(params))
    return str(path)



def choose_lam(X, k: int, seed: int) -> float:
    """The furthest-first heuristic (``DPMeans(n_clusters=k).lam_``) on a 200,000-row sample."""
    import dclust

    m = min(X.shape[0], 200_000)
    idx = np.sort(np.random.default_rng(seed).choice(X.shape[0], m, replace=False))
    S = np.asarray(X[idx].compute(), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(dclust.DPMeans(n_clusters=k, random_state=seed).fit(S).lam_)


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of this process and of the processes ``pids`` so far."""
    import psutil

    return sum(sum(psutil.Process(p).cpu_times()[:2]) for p in [None, *pids])


def cpu_timed(fn, pids: list[int]) -> tuple[object, float, float]:
    """``(fn(), wall seconds, CPU seconds of this process and of pids)``."""
    c0 = _cpu_seconds(pids)
    out, wall = timed(fn)
    return out, wall, _cpu_seconds(pids) - c0


def run_config(args, n: int, d: int, rows: int, paths: list[str]) -> dict:
    import dask.array as da

    import dclust
    from dclust._dask.init import reduce_stats

    print(f"\n=== N = {n:,}, D = {d}, chunks of {rows:,} rows ===", flush=True)
    path = ensure_store(args, n, d, rows)
    X = dclust.open_array(path)
    lam = args.lam if args.lam is not None else choose_lam(X, args.centers, args.seed)
    warm = da.from_array(np.asarray(X[: min(n, 40_000)].compute()), chunks=(min(n, 20_000), d))
    res: dict = {"n": n, "d": d, "chunk_rows": rows, "lam": lam, "store": path, "paths": {}}
    zarr_read(path)  # page cache warm
    for name in paths:
        client = cluster = None
        pids: list[int] = []
        if name == "processes":
            from distributed import Client, LocalCluster

            cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                   host="127.0.0.1")
            client = Client(cluster)
            pids = list(client.run(os.getpid).values())
        try:
            dclust.AnytimeDPMeans(lam=lam, random_state=args.seed).fit(warm)  # imports and numba caches
            reads, fits, read_cpu, fit_cpu, model = [], [], [], [], None
            for _ in range(args.repeats):  # interleaved: read, fit, read, fit, ...
                _, t, c = cpu_timed(lambda: zarr_read(path), pids)
                reads.append(t)
                read_cpu.append(c)
                model, t, c = cpu_timed(lambda: dclust.AnytimeDPMeans(lam=lam, random_state=args.seed).fit(X), pids)
                fits.append(t)
                fit_cpu.append(c)
        finally:
            if client is not None:
                client.close()
                cluster.close()
        stats = reduce_stats(X, None, model.cluster_centers_)
        objective = float(stats.cost) + lam * model.cluster_centers_.shape[0]
        res["paths"][name] = {
            "read_seconds": min(reads), "read_times": reads, "fit_seconds": min(fits), "fit_times": fits,
            "ratio": min(fits) / min(reads), "read_cpu_seconds": min(read_cpu), "fit_cpu_seconds": min(fit_cpu),
            "cpu_ratio": min(fit_cpu) / min(read_cpu), "load_average": os.getloadavg()[0],
            "n_clusters": int(model.n_clusters_), "n_batches": int(model.n_batches_),
            "objective": objective,
        }
        r = res["paths"][name]
        print(f"  {name}: read {fmt_s(r['read_seconds'])}, AnytimeDPMeans {fmt_s(r['fit_seconds'])} = "
              f"{r['ratio']:.1f} x read (CPU {r['cpu_ratio']:.1f} x), K = {r['n_clusters']}, objective "
              f"{objective:.6g}, load {r['load_average']:.1f}", flush=True)
    return res


def main(argv=None) -> dict:
    args = parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if not set(paths) <= set(PATHS):
        raise SystemExit(f"--paths must be a subset of {','.join(PATHS)}")
    t0 = time.perf_counter()
    res = {"machine": machine_info(), "target_ratio": T_ANYTIME,
           "configs": [run_config(args, *_config(c), paths) for c in args.configs.split(",")]}
    rows = []
    for c in res["configs"]:
        for name, r in c["paths"].items():
            rows.append([f"{c['n']:,} x {c['d']}", name, fmt_s(r["read_seconds"]), fmt_s(r["fit_seconds"]),
                         f"{r['ratio']:.1f}", "yes" if r["ratio"] <= T_ANYTIME else "no", f"{r['cpu_ratio']:.1f}",
                         f"{r['load_average']:.1f}", r["n_clusters"], f"{r['objective']:.6g}"])
    print_table(rows, ["data", "scheduler", "plain read", "AnytimeDPMeans", "ratio", f"<= {T_ANYTIME:g}", "CPU ratio",
                       "load", "K", "objective"], title="AnytimeDPMeans, one read, vs plain zarr read")
    res["seconds"] = time.perf_counter() - t0
    write_json(res, args.out)
    return res


if __name__ == "__main__":
    main()
