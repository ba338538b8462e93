"""Benchmark: dclust KMeans / DPMeans out of core against the I/O floor, the in-memory compute floor and dask-ml.

For every (D, K) pair (default (8, 16) and (64, 64)) on N x D float32 Gaussian blobs (16 centres) in Zarr with
``--chunk-rows`` rows per chunk, on a LocalCluster of 2 single-threaded worker processes, in one run:

(a) I/O floor: one pass ``da.from_zarr(path).sum(axis=0).compute()`` (warm page cache, best of 3), for stores
    written by ``dclust.write_array`` with codec zstd, lz4 and none; the fastest codec's store is used below;
(b) compute floor: the fastest in-memory iteration of a plain-numpy Lloyd step, scikit-learn ``KMeans``
    (marginal per-iteration cost) and dclust's fused kernel ``assign_stats`` called directly on 500k-row blocks
    (one thread, and two threads since the kernel releases the GIL);
(c) dclust ``KMeans(persist=False)`` seconds per iteration, reading Zarr every pass;
(d) the same with the data persisted in worker memory (``persist="auto"``; the "persisting" log line is recorded);
(e) dask-ml ``KMeans`` per iteration on the same Zarr-backed array;
(f) dclust ``DPMeans`` per iteration after the first (reading Zarr every pass);
(g) peak worker memory (resident set) during (c) and (f), for N and ``--n-large``, side by side.

Per-iteration times are marginal costs, ``(t(max_iter=10) - t(max_iter=2)) / 8``, so one-off passes (seeding,
persist, final inertia) cancel; ``tol=0`` and a fixed init make both runs do exactly ``max_iter`` iterations, which is
checked through ``n_iter_``. Data generation (``dclust.make_blobs`` + ``dclust.write_array``) is not timed, and
stores in ``--data-dir`` with matching parameters are reused.

Run: ``.venv/bin/python benchmarks/bench_kmeans.py`` (defaults: N = 10M, N-large = 40M; about 15-20 minutes on
2 cores). Small smoke run: ``--n 1_000_000 --n-large 2_000_000``.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    HERE,
    LogCapture,
    WorkerPeakMemory,
    fmt_bytes,
    fmt_ratio,
    fmt_s,
    machine_info,
    print_table,
    task_stream_summary,
    timed,
    write_json,
)

CODECS = ("zstd", "lz4", "none")
ITER_HI, ITER_LO = 10, 2

# Targets (ratios measured in one run).
T_OOC_VS_FLOOR = 1.3  # (c) <= 1.3 x max(I/O floor, compute floor)
T_DASKML_SPEEDUP = 2.0  # dask-ml / (c) >= 2
T_PERSIST_VS_SKLEARN = 1.3  # (d) <= 1.3 x scikit-learn's marginal iteration
T_DPMEANS_VS_KMEANS = 1.5  # DPMeans per pass <= 1.5 x (c)
T_MEMORY_GROWTH = 1.2  # peak worker memory at N-large <= 1.2 x at N ("independent of N")


# ------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=10_000_000, help="rows N (default 10,000,000)")
    p.add_argument("--d", type=int, nargs="+", default=[8, 64], help="features D, paired with --k (default 8 64)")
    p.add_argument("--k", type=int, nargs="+", default=[16, 64], help="clusters K, paired with --d (default 16 64)")
    p.add_argument("--centers", type=int, default=16, help="blobs in the data (default 16)")
    p.add_argument("--chunk-rows", type=int, default=500_000, help="rows per Zarr chunk (default 500,000)")
    p.add_argument("--n-large", type=int, default=40_000_000,
                   help="N of the peak-memory comparison (default 40,000,000; 0 skips it)")
    p.add_argument("--data-dir", type=Path, default=HERE / "data", help="where stores are written/reused")
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_kmeans.json")
    p.add_argument("--skip-daskml", action="store_true", help="do not run dask-ml")
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of every dclust/in-memory timing; the fastest is kept (default 2)")
    p.add_argument("--daskml-repeats", type=int, default=1, help="runs of every dask-ml timing (default 1)")
    p.add_argument("--io-repeats", type=int, default=3, help="timed passes of the I/O floor (default 3)")
    p.add_argument("--mem-iter", type=int, default=4, help="max_iter of the peak-memory runs (default 4)")
    p.add_argument("--no-profile", action="store_true", help="skip the task-stream profile runs")
    p.add_argument("--seed", type=int, default=0, help="data seed (default 0)")
    args = p.parse_args(argv)
    if len(args.d) != len(args.k):
        p.error("--d and --k must have the same number of values (they are paired)")
    return args


# ------------------------------------------------------------------------------------------------ data


def store_path(data_dir: Path, n: int, d: int, centers: int, chunk_rows: int, seed: int, codec: str) -> Path:
    return data_dir / f"blobs_n{n}_d{d}_c{centers}_r{chunk_rows}_s{seed}_{codec}.zarr"


def ensure_store(n: int, d: int, centers: int, chunk_rows: int, seed: int, codec: str, data_dir: Path) -> dict:
    """Write (or reuse) ``make_blobs(n, d, centers)`` as Zarr with ``codec``; returns a description."""
    import dclust
    import zarr

    path = store_path(data_dir, n, d, centers, chunk_rows, seed, codec)
    params = {"generator": "dclust.make_blobs", "n": n, "d": d, "centers": centers, "chunk_rows": chunk_rows,
              "seed": seed, "dtype": "float32", "codec": codec}
    side = path.with_name(path.name + ".params.json")
    if path.exists() and side.exists():
        try:
            same = json.loads(side.read_text()) == params
            z = zarr.open_array(str(path), mode="r")
            same = same and z.shape == (n, d) and z.chunks[0] == chunk_rows and z.dtype == np.float32
        except Exception:  # noqa: BLE001 - anything odd: regenerate
            same = False
        if same:
            return {"path": str(path), "generated": False, "seconds": 0.0, "bytes": _du(path), "codec": codec}
    data_dir.mkdir(parents=True, exist_ok=True)
    side.unlink(missing_ok=True)
    print(f"  generating {path.name} ...", flush=True)
    t0 = time.perf_counter()
    blobs = dclust.make_blobs(n, d, centers=centers, chunk_rows=chunk_rows, dtype="float32", random_state=seed,
                              return_labels=False)
    dclust.write_array(blobs.X, str(path), overwrite=True, codec=codec)
    dt = time.perf_counter() - t0
    side.write_text(json.dumps(params))
    return {"path": str(path), "generated": True, "seconds": dt, "bytes": _du(path), "codec": codec}


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def auto_codec_choice() -> str:
    """Which codec ``write_array(codec="auto")`` writes for float32 data (from the store's metadata)."""
    import dclust
    import zarr

    tmp = Path(tempfile.mkdtemp(prefix="dclust-bench-"))
    try:
        p = tmp / "a.zarr"
        dclust.write_array(np.zeros((1000, 4), np.float32), str(p), codec="auto")
        z = zarr.open_array(str(p), mode="r")
        names = []
        for comp in z.compressors or ():
            cname = getattr(comp, "cname", None)
            cname = getattr(cname, "value", cname)
            names.append(str(cname) if cname else type(comp).__name__.lower().replace("codec", ""))
        return "+".join(names) if names else "none"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------ measurements


def io_floor(path: str, repeats: int) -> dict:
    """One streaming pass: ``da.from_zarr(path).sum(axis=0).compute()``; one warm-up pass, then ``repeats``."""
    import dask.array as da

    def one():
        return da.from_zarr(path).sum(axis=0).compute()

    one()  # page cache and worker imports warm
    times = [timed(one)[1] for _ in range(repeats)]
    return {"best": min(times), "times": times}


def numpy_lloyd_step(X: np.ndarray, C: np.ndarray, tile: int = 131072) -> np.ndarray:
    """One plain-numpy Lloyd iteration: GEMM-tile distances, argmin, bincount per column."""
    n, d = X.shape
    k = C.shape[0]
    Cx = C.astype(X.dtype)
    m2ct = -2.0 * Cx.T
    cc = (Cx * Cx).sum(axis=1)
    labels = np.empty(n, dtype=np.intp)
    for s in range(0, n, tile):
        dist = X[s : s + tile] @ m2ct
        dist += cc
        labels[s : s + tile] = dist.argmin(axis=1)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    sums = np.stack([np.bincount(labels, weights=X[:, j], minlength=k) for j in range(d)], axis=1)
    return np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], C)


def dclust_kernel_step(X: np.ndarray, C: np.ndarray, rows: int, pool: ThreadPoolExecutor | None = None):
    """One in-memory Lloyd iteration with dclust's fused kernel on ``rows``-row blocks (no Dask)."""
    from dclust.kernels.distances import assign_stats
    from dclust.kernels.stats import ClusterStats

    starts = range(0, X.shape[0], rows)

    def one(ib):
        i, s = ib
        return assign_stats(X[s : s + rows], C, offset=s, block_index=i)[0]

    parts = list(pool.map(one, enumerate(starts))) if pool is not None else [one(ib) for ib in enumerate(starts)]
    stats = ClusterStats.merge_all(parts)
    return np.where(stats.weight[:, None] > 0, stats.mean, C)


def best_time(fn, repeats: int) -> tuple[object, float, list[float]]:
    times, out = [], None
    for _ in range(max(1, repeats)):
        out, t = timed(fn)
        times.append(t)
    return out, min(times), times


def marginal(fit, repeats: int, hi: int = ITER_HI, lo: int = ITER_LO) -> dict:
    """``(t(max_iter=hi) - t(max_iter=lo)) / (hi - lo)`` with the fastest of ``repeats`` runs of each.

    ``fit(m)`` runs a fit with ``max_iter=m`` and returns ``(n_iter, extra_dict)``."""
    res = {}
    for m in (hi, lo):
        runs = []
        for _ in range(max(1, repeats)):
            gc.collect()
            (n_iter, extra), t = timed(lambda: fit(m))
            runs.append({"seconds": t, "n_iter": n_iter, **extra})
        res[m] = runs
    t_hi = min(r["seconds"] for r in res[hi])
    t_lo = min(r["seconds"] for r in res[lo])
    n_hi = {r["n_iter"] for r in res[hi]}
    n_lo = {r["n_iter"] for r in res[lo]}
    exact = n_hi == {hi} and n_lo == {lo}
    per_iter = (t_hi - t_lo) / (hi - lo)
    return {"per_iter": per_iter, "t_hi": t_hi, "t_lo": t_lo, "hi": hi, "lo": lo, "n_iter_hi": sorted(n_hi),
            "n_iter_lo": sorted(n_lo), "exact_iterations": exact, "runs": {str(k): v for k, v in res.items()}}


def sklearn_fit(X: np.ndarray, K: int, C0: np.ndarray, m: int):
    from sklearn.cluster import KMeans as SKKMeans

    km = SKKMeans(n_clusters=K, init=C0.astype(X.dtype), n_init=1, max_iter=m, tol=0.0, algorithm="lloyd")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        km.fit(X)
    return km


def choose_init(X: np.ndarray, K: int, seed: int) -> tuple[np.ndarray, dict]:
    """A fixed init from which Lloyd does not converge within ITER_HI + 2 iterations (checked with scikit-learn on
    the in-memory data), so that ``tol=0`` runs do exactly ``max_iter`` iterations."""
    rng = np.random.default_rng(seed + 12345)
    n = X.shape[0]
    tried = []
    for attempt in range(3):
        C0 = X[np.sort(rng.choice(n, size=K, replace=False))].astype(np.float64)
        it = sklearn_fit(X, K, C0, ITER_HI + 2).n_iter_
        tried.append({"kind": "random rows", "sklearn_n_iter_at_max_iter_12": int(it)})
        if it >= ITER_HI + 2:
            return C0, {"kind": "K distinct random rows", "seed": seed + 12345, "attempt": attempt, "tried": tried}
    # Clumped: K rows nearest to one random row (of a sample); Lloyd needs many iterations to spread them out.
    sample = X[np.sort(rng.choice(n, size=min(n, 200_000), replace=False))].astype(np.float64)
    r = sample[rng.integers(len(sample))]
    C0 = sample[np.argsort(((sample - r) ** 2).sum(axis=1))[:K]]
    it = sklearn_fit(X, K, C0, ITER_HI + 2).n_iter_
    tried.append({"kind": "clumped rows", "sklearn_n_iter_at_max_iter_12": int(it)})
    return C0, {"kind": "K rows nearest one random row (clumped)", "tried": tried}


# ----------------------------------------------------------------------------------------- estimator runs


def dclust_kmeans_fit(X, K, C0, m, persist, events=None, logs=None):
    import dclust

    km = dclust.KMeans(n_clusters=K, init=C0, n_init=1, max_iter=m, tol=0.0, persist=persist)
    cb = events.append if events is not None else (lambda e: None)
    with dclust.on_progress(cb):
        km.fit(X)
    return km


def daskml_fit(X, K, C0, m):
    from dask_ml.cluster import KMeans as DMKMeans

    km = DMKMeans(n_clusters=K, init=C0.astype(X.dtype), max_iter=m, tol=0.0, oversampling_factor=2,
                  random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        km.fit(X)
    return km, sorted({f"{w.category.__name__}: {str(w.message)[:160]}" for w in caught})


def dpmeans_fit(X, lam, m, events=None, seed=0):
    import dclust

    dp = dclust.DPMeans(lam=lam, max_iter=m, random_state=seed, persist=False)
    cb = events.append if events is not None else (lambda e: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter=2 is expected
        with dclust.on_progress(cb):
            dp.fit(X)
    return dp


def iter_seconds(events, estimator: str) -> list[float]:
    return [e.seconds for e in events if e.estimator == estimator and e.phase == "iter"]


def choose_lam(X_mem: np.ndarray, centers: int, seed: int) -> dict:
    """lam for DPMeans: the furthest-first heuristic of ``DPMeans(n_clusters=centers)`` on a 200k-row sample,
    checked by fitting ``DPMeans(lam)`` on that sample (halving lam while that gives fewer clusters)."""
    import dclust

    rng = np.random.default_rng(seed + 777)
    n = X_mem.shape[0]
    S = X_mem[np.sort(rng.choice(n, size=min(n, 200_000), replace=False))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lam = float(dclust.DPMeans(n_clusters=centers, random_state=seed).fit(S).lam_)
        tried = []
        for _ in range(6):
            k = int(dclust.DPMeans(lam=lam, random_state=seed).fit(S).n_clusters_)
            tried.append({"lam": lam, "k_on_sample": k})
            if k >= centers:
                break
            lam /= 2
    best = min(tried, key=lambda t: (abs(t["k_on_sample"] - centers), -t["lam"]))
    return {"lam": best["lam"], "how": "furthest-first heuristic (DPMeans(n_clusters=16).lam_) on a 200k sample, "
            "halved while DPMeans(lam) on the sample found fewer than 16 clusters", "tried": tried}


# ------------------------------------------------------------------------------------------- one (D, K)


def run_dk(client, args, d: int, k: int) -> dict:
    import dask.array as da

    N, centers, rows = args.n, args.centers, args.chunk_rows
    out: dict = {"d": d, "k": k, "n": N, "centers": centers, "chunk_rows": rows}
    print(f"\n=== D = {d}, K = {k}, N = {N:,} ===", flush=True)

    # (a) I/O floor per codec --------------------------------------------------------------------------------
    stores = {c: ensure_store(N, d, centers, rows, args.seed, c, args.data_dir) for c in CODECS}
    out["stores"] = stores
    io = {}
    for c in CODECS:
        io[c] = io_floor(stores[c]["path"], args.io_repeats)
        print(f"  (a) I/O floor {c:>4}: {fmt_s(io[c]['best'])}  ({fmt_bytes(stores[c]['bytes'])} on disk)", flush=True)
    best_codec = min(CODECS, key=lambda c: io[c]["best"])
    out["io_floor"] = io
    out["best_codec"] = best_codec
    path = stores[best_codec]["path"]
    Xz = da.from_zarr(path)

    # (b) compute floor ---------------------------------------------------------------------------------------
    X_mem = np.ascontiguousarray(Xz.compute())
    C0, init_info = choose_init(X_mem, k, args.seed)
    out["init"] = init_info
    print(f"  init: {init_info['kind']} ({init_info['tried'][-1]})", flush=True)
    floor = {}
    _, t, ts = best_time(lambda: numpy_lloyd_step(X_mem, C0), args.repeats)
    floor["numpy_step"] = {"per_iter": t, "times": ts}
    sk = marginal(lambda m: (sklearn_fit(X_mem, k, C0, m).n_iter_, {}), args.repeats)
    floor["sklearn"] = sk
    dclust_kernel_step(X_mem[: min(N, 10_000)], C0, rows)  # JIT / cache load
    _, t, ts = best_time(lambda: dclust_kernel_step(X_mem, C0, rows), args.repeats)
    floor["dclust_kernel_1thread"] = {"per_iter": t, "times": ts}
    with ThreadPoolExecutor(2) as pool:
        _, t, ts = best_time(lambda: dclust_kernel_step(X_mem, C0, rows, pool), args.repeats)
    floor["dclust_kernel_2threads"] = {"per_iter": t, "times": ts}
    floor_name = min(floor, key=lambda kk: floor[kk]["per_iter"])
    out["compute"] = floor
    out["compute_floor"] = {"per_iter": floor[floor_name]["per_iter"], "which": floor_name}
    for name, v in floor.items():
        print(f"  (b) {name}: {fmt_s(v['per_iter'])}/iter", flush=True)

    # (c) dclust KMeans out of core ---------------------------------------------------------------------------
    def fit_c(m):
        ev: list = []
        km = dclust_kmeans_fit(Xz, k, C0, m, persist=False, events=ev)
        return km.n_iter_, {"inertia": km.inertia_, "iter_seconds": iter_seconds(ev, "KMeans")}

    out["dclust_kmeans_zarr"] = c = marginal(fit_c, args.repeats)
    print(f"  (c) dclust KMeans (Zarr every pass): {fmt_s(c['per_iter'])}/iter  "
          f"n_iter {c['n_iter_hi']}/{c['n_iter_lo']}", flush=True)

    # (d) persisted ---------------------------------------------------------------------------------------------
    logs: list[str] = []

    def fit_d(m):
        with LogCapture("dclust") as cap:
            km = dclust_kmeans_fit(Xz, k, C0, m, persist="auto")
        logs.extend(cap.matching("persist"))
        return km.n_iter_, {"inertia": km.inertia_, "persist_log": cap.matching("persist")}

    out["dclust_kmeans_persisted"] = dd = marginal(fit_d, args.repeats)
    dd["persist_mode"] = "auto"
    dd["log_line"] = logs[0] if logs else None
    if not logs:  # "auto" declined: measure with persist=True and say so
        def fit_d2(m):
            with LogCapture("dclust") as cap:
                km = dclust_kmeans_fit(Xz, k, C0, m, persist=True)
            logs.extend(cap.matching("persist"))
            return km.n_iter_, {"inertia": km.inertia_}

        out["dclust_kmeans_persisted"] = dd = marginal(fit_d2, args.repeats)
        dd["persist_mode"] = "True (auto declined)"
        dd["log_line"] = logs[0] if logs else None
    print(f"  (d) dclust KMeans persisted: {fmt_s(dd['per_iter'])}/iter  log: {dd['log_line']!r}", flush=True)

    # (e) dask-ml --------------------------------------------------------------------------------------------------
    if args.skip_daskml:
        out["daskml"] = {"skipped": True}
    else:
        warns: set = set()

        def fit_e(m):
            km, w = daskml_fit(da.from_zarr(path), k, C0, m)
            warns.update(w)
            return int(km.n_iter_), {"inertia": float(km.inertia_)}

        try:
            e = marginal(fit_e, args.daskml_repeats)
            e["warnings"] = sorted(warns)
        except Exception as exc:  # noqa: BLE001 - report, don't crash
            e = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}
        out["daskml"] = e
        print(f"  (e) dask-ml: {fmt_s(e.get('per_iter')) if 'per_iter' in e else e['error']}", flush=True)

    # (f) DPMeans ------------------------------------------------------------------------------------------------
    lam_info = choose_lam(X_mem, centers, args.seed)
    lam = lam_info["lam"]
    out["dpmeans_lam"] = lam_info

    def fit_f(m):
        ev: list = []
        dp = dpmeans_fit(Xz, lam, m, events=ev, seed=args.seed)
        return dp.n_iter_, {"converged": bool(dp.converged_), "n_clusters": int(dp.n_clusters_),
                            "objective_history": list(dp.objective_history_),
                            "iter_seconds": iter_seconds(ev, "DPMeans")}

    f = marginal(fit_f, args.repeats)
    n_hi = max(f["n_iter_hi"])
    if f["exact_iterations"]:
        f["method"] = f"(t(max_iter={ITER_HI}) - t(max_iter={ITER_LO})) / {ITER_HI - ITER_LO}"
    elif n_hi > ITER_LO and set(f["n_iter_lo"]) == {ITER_LO}:
        f["per_iter"] = (f["t_hi"] - f["t_lo"]) / (n_hi - ITER_LO)
        f["method"] = (f"converged after {n_hi} passes: (t(max_iter={ITER_HI}, ran {n_hi}) - t(max_iter={ITER_LO})) "
                       f"/ {n_hi - ITER_LO}")
    else:
        secs = [s for r in f["runs"][str(ITER_HI)] for s in r["iter_seconds"][1:]]
        f["per_iter"] = float(np.median(secs)) if secs else float("nan")
        f["method"] = f"converged after {n_hi} passes: median of the per-pass progress-event times after the first"
    ev_after_first = [s for r in f["runs"][str(ITER_HI)] for s in r["iter_seconds"][1:]]
    f["event_median_after_first"] = float(np.median(ev_after_first)) if ev_after_first else None
    f["n_clusters"] = f["runs"][str(ITER_HI)][0]["n_clusters"]
    out["dpmeans"] = f
    print(f"  (f) DPMeans: {fmt_s(f['per_iter'])}/pass  ({f['method']}; K = {f['n_clusters']}, lam = {lam:.4g})",
          flush=True)

    # profile: where a Zarr-backed iteration's time goes ---------------------------------------------------------
    if not args.no_profile:
        prof = {}
        for name, fn in (
            ("dclust_kmeans_zarr", lambda: dclust_kmeans_fit(Xz, k, C0, 3, persist=False)),
            ("dclust_kmeans_persisted", lambda: dclust_kmeans_fit(Xz, k, C0, 3, persist=True)),
            ("dpmeans", lambda: dpmeans_fit(Xz, lam, 3, seed=args.seed)),
            ("io_floor_pass", lambda: da.from_zarr(path).sum(axis=0).compute()),
        ) + (() if args.skip_daskml or "error" in out["daskml"] else (
            ("daskml", lambda: daskml_fit(da.from_zarr(path), k, C0, 3)),)):
            from distributed import get_task_stream

            with get_task_stream(client) as ts:
                _, wall = timed(fn)
            prof[name] = task_stream_summary(ts.data, wall, n_threads=2)
        out["profile"] = prof

    X_mem = None  # the in-memory copy is freed before (g) (the timed lambdas above hold it)
    gc.collect()

    # (g) peak worker memory, N vs N-large -------------------------------------------------------------------------
    sizes = [("N", N, path)]
    if args.n_large:
        big = ensure_store(args.n_large, d, centers, rows, args.seed, best_codec, args.data_dir)
        out["stores"]["large"] = big
        sizes.append(("N_large", args.n_large, big["path"]))
    mem = {}
    for label, n_rows, p in sizes:
        X_ = da.from_zarr(p)
        for est, fn in (
            ("kmeans", lambda: dclust_kmeans_fit(X_, k, C0, args.mem_iter, persist=False)),
            ("dpmeans", lambda: dpmeans_fit(X_, lam, args.mem_iter, seed=args.seed)),
        ):
            # no client.restart(): restarting nannies on a loaded 2-core box can time out; the kernel's high-water
            # mark is reset on entry instead, after a collection, so each measurement starts from a clean peak
            client.run(gc.collect)
            client.run(_warm_worker)
            with WorkerPeakMemory(client) as wm:
                res, wall = timed(fn)
            mem[f"{est}_{label}"] = {"n": n_rows, "n_iter": int(res.n_iter_), "wall_s": wall, **wm.as_dict()}
            print(f"  (g) peak worker memory {est} N={n_rows:,}: {fmt_bytes(wm.peak)} "
                  f"(start {fmt_bytes(wm.baseline)}, {wm.method})", flush=True)
    out["memory"] = mem
    return out


def _warm_worker():
    """Import dclust and load its jitted kernels in a fresh worker so their memory is in the baseline."""
    import numpy as np

    from dclust.kernels.distances import assign_stats

    assign_stats(np.zeros((4, 2), np.float32), np.zeros((2, 2)))
    return True


# ---------------------------------------------------------------------------------------------- report


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


def report(res: dict) -> tuple[list, str]:
    """Print the tables of one (D, K) result; returns (target rows, text)."""
    d, k, N = res["d"], res["k"], res["n"]
    io, comp, c, dd, f = res["io_floor"], res["compute"], res["dclust_kmeans_zarr"], res["dclust_kmeans_persisted"], \
        res["dpmeans"]
    best = res["best_codec"]
    io_best = io[best]["best"]
    cf = res["compute_floor"]["per_iter"]
    rows = []
    for cdc in CODECS:
        st = res["stores"][cdc]
        rows.append([f"(a) I/O floor, codec {cdc}" + ("  <- used below" if cdc == best else ""),
                     fmt_s(io[cdc]["best"]),
                     f"{fmt_bytes(st['bytes'])} on disk; {fmt_ratio(io[cdc]['best'] / io_best)} of best"])
    rows.append(["(b) numpy Lloyd step (GEMM tiles, bincount)", fmt_s(comp["numpy_step"]["per_iter"]), "in memory"])
    sk = comp["sklearn"]
    rows.append(["(b) scikit-learn KMeans lloyd, marginal", fmt_s(sk["per_iter"]),
                 f"n_iter {sk['n_iter_hi']}/{sk['n_iter_lo']}"])
    rows.append(["(b) dclust assign_stats direct, 1 thread", fmt_s(comp["dclust_kernel_1thread"]["per_iter"]),
                 f"{res['chunk_rows']:,}-row blocks"])
    rows.append(["(b) dclust assign_stats direct, 2 threads", fmt_s(comp["dclust_kernel_2threads"]["per_iter"]),
                 "nogil kernel, thread pool"])
    rows.append(["(b) compute floor", fmt_s(cf), res["compute_floor"]["which"]])
    rows.append(["(c) dclust KMeans, Zarr every pass", fmt_s(c["per_iter"]),
                 f"n_iter {c['n_iter_hi']}/{c['n_iter_lo']}" + ("" if c["exact_iterations"] else " (NOT EXACT)")])
    rows.append([f"(d) dclust KMeans, persisted ({dd['persist_mode']})", fmt_s(dd["per_iter"]),
                 f"n_iter {dd['n_iter_hi']}/{dd['n_iter_lo']}; log: {dd.get('log_line')!r}"])
    e = res["daskml"]
    if e.get("skipped"):
        rows.append(["(e) dask-ml KMeans", "skipped", ""])
    elif "error" in e:
        rows.append(["(e) dask-ml KMeans", "ERROR", e["error"][:100]])
    else:
        rows.append(["(e) dask-ml KMeans, Zarr", fmt_s(e["per_iter"]), f"n_iter {e['n_iter_hi']}/{e['n_iter_lo']}"
                     + (f"; {len(e.get('warnings', []))} warning kind(s)" if e.get("warnings") else "")])
    rows.append(["(f) dclust DPMeans per pass after the first", fmt_s(f["per_iter"]),
                 f"K={f['n_clusters']}, lam={res['dpmeans_lam']['lam']:.4g}; {f['method']}"])
    mem = res["memory"]
    for est in ("kmeans", "dpmeans"):
        for lab in ("N", "N_large"):
            m = mem.get(f"{est}_{lab}")
            if m:
                rows.append([f"(g) peak worker RSS, {'(c) KMeans' if est == 'kmeans' else '(f) DPMeans'}, "
                             f"N={m['n'] / 1e6:g}M", fmt_bytes(m["peak"]),
                             f"worker RSS at start {fmt_bytes(m['baseline'])}"])
    text = print_table(rows, ["measurement", "value", "notes"],
                       title=f"\nD = {d}, K = {k}, N = {N:,} ({res['chunk_rows']:,}-row chunks, 2 workers x 1 thread)")

    # targets
    t = []
    floor_max = max(io_best, cf)
    r = c["per_iter"] / floor_max
    t.append(["(c) <= 1.3 x max(I/O floor, compute floor)",
              f"{fmt_s(c['per_iter'])} / {fmt_s(floor_max)}", fmt_ratio(r), "<= 1.30x", verdict(r <= T_OOC_VS_FLOOR)])
    if "per_iter" in e:
        r = e["per_iter"] / c["per_iter"]
        t.append(["(c) >= 2 x faster than dask-ml", f"{fmt_s(e['per_iter'])} / {fmt_s(c['per_iter'])}",
                  fmt_ratio(r), ">= 2.00x", verdict(r >= T_DASKML_SPEEDUP)])
    else:
        t.append(["(c) >= 2 x faster than dask-ml", "dask-ml " + ("skipped" if e.get("skipped") else "failed"),
                  "-", ">= 2.00x", "-"])
    r = dd["per_iter"] / sk["per_iter"]
    t.append(["(d) <= 1.3 x scikit-learn marginal iteration", f"{fmt_s(dd['per_iter'])} / {fmt_s(sk['per_iter'])}",
              fmt_ratio(r), "<= 1.30x", verdict(r <= T_PERSIST_VS_SKLEARN)])
    r = f["per_iter"] / c["per_iter"]
    t.append(["(f) DPMeans per pass <= 1.5 x KMeans (c)", f"{fmt_s(f['per_iter'])} / {fmt_s(c['per_iter'])}",
              fmt_ratio(r), "<= 1.50x", verdict(r <= T_DPMEANS_VS_KMEANS)])
    for est in ("kmeans", "dpmeans"):
        a, b = mem.get(f"{est}_N"), mem.get(f"{est}_N_large")
        if a and b:
            r = b["peak"] / a["peak"]
            t.append([f"(g) peak memory {est} independent of N ({b['n'] / 1e6:g}M vs {a['n'] / 1e6:g}M)",
                      f"{fmt_bytes(b['peak'])} / {fmt_bytes(a['peak'])}", fmt_ratio(r), "<= 1.20x",
                      verdict(r <= T_MEMORY_GROWTH)])
    auto = res.get("auto_codec")
    t.append([f"codec: fastest I/O floor = {best}; zarr-default zstd costs",
              f"{fmt_s(io['zstd']['best'])} / {fmt_s(io_best)}", fmt_ratio(io["zstd"]["best"] / io_best),
              f"auto writes {auto!r}", verdict(None if auto is None else auto == best)])
    text += "\n" + print_table(t, ["target", "measured", "ratio", "limit", "verdict"],
                              title=f"Targets, D = {d}, K = {k}")
    if "profile" in res:
        prow = []
        for name, p in res["profile"].items():
            top = sorted(p["by_prefix"].items(), key=lambda kv: -kv[1].get("compute", 0.0))[:4]
            prow.append([name, fmt_s(p["wall_s"]), f"{p['thread_busy_fraction'] * 100:.0f}%",
                         "; ".join(f"{pf} x{int(v['count'])} {fmt_s(v.get('compute', 0.0))}" for pf, v in top)])
        header = ["profiled run (3 iterations)", "wall", "busy", "top task prefixes (count, compute)"]
        text += "\n" + print_table(prow, header, title=f"Task-stream profile, D = {d}, K = {k}")
    return t, text


# ------------------------------------------------------------------------------------------------ main


def main(argv=None) -> dict:
    args = parse_args(argv)
    import dask
    from distributed import Client, LocalCluster

    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    info = machine_info()
    print(f"machine: {info.get('cpu_count')} cores, {fmt_bytes(info.get('memory_total'))} RAM; "
          f"versions: {info['versions']}", flush=True)
    results: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                     "machine": info, "targets": {
                         "ooc_vs_floor": T_OOC_VS_FLOOR, "daskml_speedup": T_DASKML_SPEEDUP,
                         "persist_vs_sklearn": T_PERSIST_VS_SKLEARN, "dpmeans_vs_kmeans": T_DPMEANS_VS_KMEANS,
                         "memory_growth": T_MEMORY_GROWTH}, "runs": []}
    t_start = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        results["cluster"] = {"workers": len(client.scheduler_info()["workers"]), "threads_per_worker": 1,
                              "memory_limit_per_worker": [w["memory_limit"] for w in
                                                          client.scheduler_info()["workers"].values()],
                              "dask_config_worker_saturation": dask.config.get(
                                  "distributed.scheduler.worker-saturation", None)}
        auto = auto_codec_choice()
        texts = []
        for d, k in zip(args.d, args.k):
            res = run_dk(client, args, d, k)
            res["auto_codec"] = auto
            targets, text = report(res)
            res["targets"] = [dict(zip(["target", "measured", "ratio", "limit", "verdict"], r)) for r in targets]
            results["runs"].append(res)
            texts.append(text)
            write_json(results, args.out)  # partial results survive a later failure
    results["total_seconds"] = time.perf_counter() - t_start
    results["report"] = "\n".join(texts)
    path = write_json(results, args.out)
    print(f"\nwrote {path} (total {results['total_seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
