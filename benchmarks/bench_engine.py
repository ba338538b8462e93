"""Benchmark of dclust's pass engine: every estimator and every execution path beside the floor, in one run.

For every configuration ``N x D, K`` (default ``10,000,000 x 8, K = 16`` and ``2,000,000 x 64, K = 64``) on
overlapping float32 Gaussian blobs (``dclust.make_blobs(cluster_std=...)``) written with ``dclust.write_array``
in ``--chunk-rows``-row chunks, one run measures:

- the floor: a plain Zarr read of every chunk with 2 threads (``zarr.open_array(path)[a:b]`` in a
  ``ThreadPoolExecutor``, no Dask; best of ``--io-repeats`` after a warm-up read) plus scikit-learn's marginal
  Lloyd iteration in memory (``KMeans(algorithm="lloyd", init=C0, n_init=1, tol=0)``,
  ``(t(max_iter=12) - t(max_iter=2)) / 10``, the fastest of ``--marginal-repeats`` runs of each);
- faiss' ``Kmeans`` (every row used, 2 OpenMP threads) the same way, when faiss is installed;
- scikit-learn's ``GaussianMixture(covariance_type="diag")``, the in-memory peer of the GM-PR step: its marginal
  iteration (``max_iter=iter_lo + 2`` against ``iter_lo``, one run each, ``means_init=C0``) on the first
  ``GMM_SAMPLE_ROWS`` rows, scaled to N (its cost is linear in the rows; all of them would take minutes);
- the read cost and size of the codecs: zstd, blosc-lz4 with byte shuffle (both written by
  ``dclust.write_array``), blosc-lz4 with bit shuffle and no compression, and no compression plus a
  ``zarr.codecs.Crc32cCodec`` checksum;
- dclust ``KMeans`` seconds per iteration, marginal as above with a fixed init and ``tol=0`` (``n_iter_`` checked),
  reading the store every pass on (i) Dask's default threaded scheduler (no client; also on the crc32c store),
  (ii) a ``LocalCluster`` of 2 single-threaded worker processes, (iii) a ``LocalCluster(processes=False)`` of one
  worker with 2 threads; and (iv) with the data persisted in the workers' memory of (ii);
- on path (ii): ``DPMeans``, ``RDPMeans`` (with ``--link-fraction * N`` links, 90 % inside a true cluster),
  ``BPMeans`` and ``GMPR`` (diagonal covariances, the same links) per iteration, as the median of the per-pass
  seconds of the progress events (``dclust.on_progress``) of the passes after the first of one fit with
  ``max_iter=12``, the fastest of ``--repeats`` rounds in which every estimator is fitted once in turn (so the
  machine's drift reaches them alike); KMeans' figure of the same kind on the same path is their reference;
- dask-ml's ``KMeans`` (marginal, same init, path (ii));
- ``AnytimeDPMeans`` over the store (one read, one chunk per batch) against the plain Zarr read of the same
  (uncompressed) store: the fastest of ``--anytime-repeats`` fits (5: as many as the floor's reads), each right
  after a read, against the lower of the table's read and those interleaved reads; the JSON also keeps the median
  fit over the median interleaved read;
- peak resident memory of the workers of (ii) during KMeans and DPMeans fits at N and ``--mem-factor`` x N.

Every figure is printed in one table (value, ratio to the floor and to KMeans on the same path, target, verdict)
and written to ``benchmarks/results/bench_engine.json``. Data generation is not timed; stores live in a temporary
directory unless ``--data-dir`` is given (then they are kept and reused).

Run: ``python benchmarks/bench_engine.py`` (about 15 minutes on 2 cores); ``--quick``: 1,000,000 x 8 and
250,000 x 64 in 125,000-row chunks (about 2-3 minutes).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
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
    WorkerPeakMemory,
    best_of,
    fmt_bytes,
    fmt_ratio,
    fmt_s,
    machine_info,
    median,
    print_table,
    timed,
    write_json,
    zarr_read,
)
from bench_constraints import _warm_gmpr_kernels, make_links  # noqa: E402
from bench_kmeans import _warm_worker, choose_init, choose_lam, daskml_fit, marginal, sklearn_fit  # noqa: E402

# Targets (issue 14; ratios from one run).
T_FLOOR = 1.3  # KMeans over Zarr <= 1.3 x (plain-zarr read + scikit-learn iteration), paths (i) and (ii)
T_PERSISTED = 1.5  # KMeans persisted <= 1.5 x scikit-learn's in-memory iteration (aim 1.0)
T_DP = 1.2  # DP-means iteration <= 1.2 x KMeans, same path
T_RDP = 1.5  # RDP-means <= 1.5 x DP-means
T_BP = 2.0  # BP-means <= 2 x DP-means
T_GMPR = 1.5  # GM-PR step <= 1.5 x KMeans
T_DASKML = 3.0  # dask-ml / dclust KMeans >= 3
T_ANYTIME = 4.0  # AnytimeDPMeans over a store <= 4 x one streaming read
T_MEMORY = 1.2  # peak worker memory at mem_factor x N <= 1.2 x at N ("flat in N")
T_CRC = 1.05  # a crc32c checksum costs at most 5 % of a pass

#: Codec variants of the data store: name -> how it is written (write_array's codec, or zarr compressors).
CODECS = ("none", "zstd", "lz4_shuffle", "lz4_bitshuffle", "none_crc32c")

#: Every row of the table (per configuration), in order; ``tests/benchmarks`` checks the JSON has them all.
ROWS = (
    ["read_" + c for c in CODECS]
    + ["sklearn", "floor", "faiss", "sklearn_gmm", "kmeans_default", "kmeans_default_crc32c", "kmeans_processes",
       "kmeans_threads_cluster", "kmeans_persisted", "kmeans_processes_events", "dpmeans", "rdpmeans", "bpmeans",
       "gmpr", "daskml", "anytime", "memory_kmeans_N", "memory_kmeans_mN", "memory_dpmeans_N", "memory_dpmeans_mN"]
)

PATHS = {
    "memory": "in memory (driver)",
    "zarr": "plain zarr, 2 threads",
    "default": "(i) default threaded scheduler",
    "processes": "(ii) LocalCluster 2 procs x 1 thread",
    "threads": "(iii) LocalCluster(processes=False) 1 x 2 threads",
    "persisted": "(iv) persisted in (ii)",
}


_T0 = time.perf_counter()


def say(text: str) -> None:
    """A progress line, with the seconds since the start of the run."""
    print(f"  [{time.perf_counter() - _T0:6.0f} s] {text}", flush=True)


# ------------------------------------------------------------------------------------------------- CLI


def _config(text: str) -> tuple[int, int, int]:
    try:
        n, d, k = (int(v.replace("_", "")) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NxDxK (e.g. 10000000x8x16), got {text!r}") from None
    if min(n, d, k) < 1 or k > n:
        raise argparse.ArgumentTypeError(f"N, D, K must be >= 1 and K <= N, got {text!r}")
    return n, d, k


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=_config, nargs="+", default=[(10_000_000, 8, 16), (2_000_000, 64, 64)],
                   metavar="NxDxK", help="data sizes and K (default 10000000x8x16 2000000x64x64)")
    p.add_argument("--chunk-rows", type=int, default=500_000, help="rows per Zarr chunk (default 500,000)")
    p.add_argument("--centers", type=int, default=16, help="blobs in the data (default 16)")
    p.add_argument("--cluster-std", type=float, default=3.0,
                   help="blob standard deviation; centres lie in [-10, 10]^D, so 3 makes them overlap (default 3)")
    p.add_argument("--iter-hi", type=int, default=12, help="max_iter of the long fits (default 12)")
    p.add_argument("--iter-lo", type=int, default=2, help="max_iter of the short fits (default 2)")
    p.add_argument("--repeats", type=int, default=2, help="runs of every timing, the fastest kept (default 2)")
    p.add_argument("--io-repeats", type=int, default=3, help="timed plain-zarr reads, best kept (default 3)")
    p.add_argument("--marginal-repeats", type=int, default=4,
                   help="runs of the two fits of scikit-learn's and dclust KMeans' marginal iterations (the floor "
                        "and the rows against it), the fastest of each kept (default 4: a fit's fixed cost, "
                        "0.4-1.9 s, swings a marginal iteration by up to 2x with 2)")
    p.add_argument("--anytime-repeats", type=int, default=5,
                   help="AnytimeDPMeans fits, each after a plain-zarr read of the same store; the fastest fit against "
                        "the fastest of these reads and the table's (default 5: as many fits as reads)")
    p.add_argument("--link-fraction", type=float, default=0.01, help="links per row for RDP-means/GM-PR")
    p.add_argument("--mem-factor", type=int, default=4, help="peak memory at N and this x N (0 skips; default 4)")
    p.add_argument("--mem-iter", type=int, default=3, help="max_iter of the peak-memory fits (default 3)")
    p.add_argument("--skip", nargs="*", default=[],
                   choices=["faiss", "sklearn_gmm", "daskml", "memory", "bpmeans", "gmpr", "rdpmeans"],
                   help="measurements to leave out (reported as skipped)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="keep the stores here and reuse them (default: a temporary directory, removed at the end)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default benchmarks/results/bench_engine.json; "
                        "bench_engine_quick.json with --quick)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true",
                   help="1000000x8x16 and 250000x64x64 in 125,000-row chunks, 1 repeat, max_iter 6/2 (2-3 minutes)")
    args = p.parse_args(argv)
    if args.quick:
        args.configs, args.chunk_rows = [(1_000_000, 8, 16), (250_000, 64, 64)], 125_000
        args.repeats, args.io_repeats, args.anytime_repeats, args.marginal_repeats, args.iter_hi = 1, 2, 2, 1, 6
    if args.out is None:
        args.out = HERE / "results" / ("bench_engine_quick.json" if args.quick else "bench_engine.json")
    if not 1 <= args.iter_lo < args.iter_hi:
        p.error("--iter-lo must be >= 1 and below --iter-hi")
    if min(args.chunk_rows, args.repeats, args.io_repeats, args.anytime_repeats, args.marginal_repeats) < 1 \
            or args.mem_factor < 0:
        p.error("--chunk-rows, --repeats, --io-repeats, --anytime-repeats, --marginal-repeats must be >= 1 and "
                "--mem-factor >= 0")
    return args


# ------------------------------------------------------------------------------------------------ data


def _du(path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def ensure_data(args, n: int, d: int, data_dir: Path) -> dict:
    """The blobs (``dclust.write_array``, no compression) and their labels; reused when the parameters match."""
    import dclust

    params = {"n": n, "d": d, "centers": args.centers, "cluster_std": args.cluster_std,
              "chunk_rows": args.chunk_rows, "seed": args.seed, "dtype": "float32"}
    stem = "engine_plain_" + "_".join(f"{k}{v}" for k, v in params.items() if k != "dtype")
    path, lpath, side = (data_dir / f"{stem}.zarr", data_dir / f"{stem}_labels.zarr",
                         data_dir / f"{stem}.params.json")
    if not (path.exists() and lpath.exists() and side.exists() and json.loads(side.read_text()) == params):
        say(f"generating {path.name} ...")
        b = dclust.make_blobs(n, d, centers=args.centers, cluster_std=args.cluster_std, chunk_rows=args.chunk_rows,
                              dtype="float32", random_state=args.seed)
        import zarr

        # plain zarr, no codec at all (dclust.write_array adds a crc32c checksum: the "none_crc32c" store)
        if path.exists():
            shutil.rmtree(path)
        dst = zarr.create_array(store=str(path), shape=b.X.shape, chunks=(args.chunk_rows, d), dtype="float32",
                                compressors=None)
        b.X.store(dst, lock=False)
        dclust.write_labels(b.labels, lpath, overwrite=True)
        side.write_text(json.dumps(params))
    return {"path": str(path), "labels": str(lpath)}


def codec_store(base: str, codec: str) -> str:
    """Copy of the store ``base`` (no compression) written with ``codec``; returns its path."""
    import dclust
    import zarr
    from zarr.codecs import BloscCodec, Crc32cCodec

    if codec == "none":
        return base
    out = base[: -len(".zarr")] + f"_{codec}.zarr"
    if Path(out).exists():
        return out
    if codec in ("zstd", "lz4_shuffle"):  # what dclust.write_array(codec=...) writes for float32
        dclust.write_array(dclust.open_array(base), out, codec=codec.split("_")[0], overwrite=True)
        return out
    compressors = {"lz4_bitshuffle": [BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle", typesize=4)],
                   "none_crc32c": [Crc32cCodec()]}[codec]
    src = zarr.open_array(base, mode="r")
    dst = zarr.create_array(store=out, shape=src.shape, chunks=src.chunks, dtype=src.dtype, compressors=compressors)
    rows = src.chunks[0]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda a: dst.__setitem__(slice(a, a + rows), src[a: a + rows]), range(0, src.shape[0], rows)))
    return out



def read_floor(path: str, repeats: int) -> dict:
    zarr_read(path)  # page cache warm
    _, best, times = best_of(lambda: zarr_read(path), repeats)
    return {"seconds": best, "times": times, "bytes_on_disk": _du(path)}


# ---------------------------------------------------------------------------------------------- fits


def faiss_fit(X: np.ndarray, K: int, C0: np.ndarray, m: int):
    """faiss ``Kmeans`` over every row (no subsampling) from ``C0``, ``m`` iterations; ``(iterations, extra)``."""
    import faiss

    km = faiss.Kmeans(X.shape[1], K, niter=m, nredo=1, verbose=False, seed=0, spherical=False,
                      max_points_per_centroid=X.shape[0] // K + 1, min_points_per_centroid=1)
    km.train(X, init_centroids=np.ascontiguousarray(C0, dtype=np.float32))
    return len(km.obj), {"objective": float(km.obj[-1])}


#: Rows of scikit-learn's GaussianMixture measurement (the first rows of the store; its figure is scaled to N).
GMM_SAMPLE_ROWS = 500_000


def sklearn_gmm_fit(X: np.ndarray, K: int, C0: np.ndarray, m: int):
    """scikit-learn's diagonal Gaussian mixture, ``m`` EM iterations from the means ``C0`` (``tol=0``)."""
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(n_components=K, covariance_type="diag", max_iter=m, tol=0.0, means_init=C0.astype(X.dtype),
                         init_params="random_from_data", random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gm.fit(X)
    return gm.n_iter_, {}


def sklearn_gmm_marginal(X: np.ndarray, K: int, C0: np.ndarray, args) -> dict:
    """scikit-learn's GaussianMixture per iteration (marginal, ``iter_lo + 2`` against ``iter_lo`` iterations, one
    run each) on the first :data:`GMM_SAMPLE_ROWS` rows, scaled to all rows in ``per_iter``."""
    S = min(len(X), GMM_SAMPLE_ROWS)
    v = marginal(lambda it: sklearn_gmm_fit(X[:S], K, C0, it), 1, hi=args.iter_lo + 2, lo=args.iter_lo)
    v.update(sample_rows=S, per_iter_sample=v["per_iter"], per_iter=v["per_iter"] * len(X) / S)
    return v


def kmeans_fit(X, K: int, C0: np.ndarray, m: int, persist=False):
    """dclust KMeans from ``C0`` with ``tol=0``; ``(n_iter_, extra)`` with the per-pass event seconds."""
    import dclust

    events: list = []
    km = dclust.KMeans(n_clusters=K, init=C0, n_init=1, max_iter=m, tol=0.0, persist=persist)
    with dclust.on_progress(events.append):
        km.fit(X)
    return km.n_iter_, {"inertia": float(km.inertia_), "iter_seconds": _iter_seconds(events)}


def _iter_seconds(events) -> list[float]:
    return [e.seconds for e in events if e.phase == "iter"]


def _warm_fit(make, warm, fit_kw: dict) -> bool:
    """A first fit of ``make()`` on ``warm`` (a small array; two links when the fit takes constraints): loads the
    estimator's kernels in every worker. True once done."""
    import dclust

    warm_kw = dict(fit_kw)
    if fit_kw.get("constraints") is not None:
        warm_kw["constraints"] = dclust.ConstraintGraph.from_pairs([0, 2], [1, 3], [True, False],
                                                                   n_samples=warm.shape[0], chunks=warm.chunks[0],
                                                                   check_feasible=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make()
        est.set_params(max_iter=2)
        est.fit(warm, **warm_kw)
    return True


def _events_run(make, X, fit_kw: dict) -> dict:
    """One fit of ``make()``; s/iter = median of the per-pass event seconds after the first pass."""
    import dclust

    gc.collect()
    events: list = []
    with dclust.on_progress(events.append), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter is expected
        model, wall = timed(lambda: make().fit(X, **fit_kw))
    secs = _iter_seconds(events)
    later = secs[1:] if len(secs) > 1 else secs
    return {"seconds": wall, "iter_seconds": secs, "per_iter": median(later),
            "n_iter": int(getattr(model, "n_iter_", len(secs))), "n_clusters": _size(model)}


def events_fits(specs: dict, X, repeats: int, warm, errors: dict) -> dict:
    """Every estimator of ``specs`` (name -> ``(make, fit_kw)``) warmed (:func:`_warm_fit`), then fitted in
    ``repeats`` rounds, each round fitting every estimator once in turn: the machine's drift over the minutes of
    the fits then reaches every estimator alike, not the later ones only. Per estimator the fastest run is kept
    (s/iter of :func:`_events_run`); an estimator that raises is recorded in ``errors`` and gets None."""
    out: dict = {name: [] for name in specs}
    for name, (make, fit_kw) in specs.items():
        if not _guard(name, lambda: _warm_fit(make, warm, fit_kw), errors):
            out[name] = None
    for _ in range(repeats):
        for name, (make, fit_kw) in specs.items():
            if out[name] is not None:
                run = _guard(name, lambda: _events_run(make, X, fit_kw), errors)
                out[name] = None if run is None else out[name] + [run]
    result = {}
    for name, runs in out.items():
        if not runs:
            result[name] = None
            continue
        best = min(runs, key=lambda r: r["per_iter"] if math.isfinite(r["per_iter"]) else math.inf)
        result[name] = {**best, "runs": runs, "method": "median of the progress-event seconds of the passes after "
                        "the first; fits interleaved across the estimators, the fastest of the rounds"}
    return result


def _size(model) -> int:
    for attr in ("n_clusters_", "n_latent_features_", "n_clusters", "n_classes"):
        if hasattr(model, attr):
            return int(getattr(model, attr))
    return 0


def marginal_per_iter(fit, repeats: int, args) -> dict:
    """:func:`bench_kmeans.marginal` with this run's ``--iter-hi``/``--iter-lo``."""
    return marginal(fit, repeats, hi=args.iter_hi, lo=args.iter_lo)


def _guard(name: str, fn, errors: dict):
    """Run one measurement; an exception is recorded (and reported as an error row), not fatal to the run."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - one failed peer must not lose the other figures
        errors[name] = f"{type(exc).__name__}: {exc}"
        say(f"{name}: ERROR {errors[name]}\n{traceback.format_exc(limit=6)}")
        return None


def in_memory_peers(args, path: str, k: int, m: dict, errors: dict) -> tuple[np.ndarray, dict, dict]:
    """scikit-learn (and the floor) and faiss on the store loaded into memory; returns the fixed init, how it was
    chosen, and DP-means' lam (chosen on a sample of the same data)."""
    import zarr

    X_mem = np.ascontiguousarray(zarr.open_array(path, mode="r")[...])
    C0, init_info = choose_init(X_mem, k, args.seed)
    m["sklearn"] = marginal_per_iter(lambda it: (sklearn_fit(X_mem, k, C0, it).n_iter_, {}), args.marginal_repeats,
                                     args)
    m["floor"] = {"per_iter": m["read_none"]["seconds"] + m["sklearn"]["per_iter"]}
    say(f"scikit-learn: {fmt_s(m['sklearn']['per_iter'])}/iter; floor {fmt_s(m['floor']['per_iter'])}")
    if "sklearn_gmm" in args.skip:
        m["sklearn_gmm"] = {"skipped": "--skip sklearn_gmm"}
    else:
        m["sklearn_gmm"] = _guard("sklearn_gmm", lambda: sklearn_gmm_marginal(X_mem, k, C0, args), errors)
        if m["sklearn_gmm"]:
            say(f"scikit-learn GaussianMixture diag: {fmt_s(m['sklearn_gmm']['per_iter'])}/iter (scaled to N)")
    if "faiss" in args.skip:
        m["faiss"] = {"skipped": "--skip faiss"}
    else:
        try:
            import faiss

            faiss.omp_set_num_threads(2)
            m["faiss"] = _guard("faiss", lambda: marginal_per_iter(lambda it: faiss_fit(X_mem, k, C0, it),
                                                                   args.repeats, args), errors)
            if m["faiss"]:
                m["faiss"]["version"] = faiss.__version__
        except ImportError:
            m["faiss"] = {"skipped": "faiss is not installed (pip install faiss-cpu)"}
    return C0, init_info, choose_lam(X_mem, args.centers, args.seed)


# ------------------------------------------------------------------------------------------- one config


def run_config(args, n: int, d: int, k: int, data_dir: Path) -> dict:
    import dask.array as da
    from distributed import Client, LocalCluster

    import dclust
    import zarr

    print(f"\n=== N = {n:,}, D = {d}, K = {k} ({args.chunk_rows:,}-row chunks) ===", flush=True)
    res: dict = {"n": n, "d": d, "k": k, "chunk_rows": args.chunk_rows, "m": {}, "errors": {}}
    m, errors = res["m"], res["errors"]
    data = ensure_data(args, n, d, data_dir)
    path = data["path"]
    stores = {c: codec_store(path, c) for c in CODECS}
    res["stores"] = {c: {"path": p, "bytes_on_disk": _du(p)} for c, p in stores.items()}

    # plain zarr reads, per codec ---------------------------------------------------------------------------
    for c in CODECS:
        m[f"read_{c}"] = read_floor(stores[c], args.io_repeats)
        say(f"read {c:>15}: {fmt_s(m[f'read_{c}']['seconds'])} ({fmt_bytes(m[f'read_{c}']['bytes_on_disk'])})")

    # in-memory peers (the data is in the driver's memory only inside this call) ----------------------------------
    C0, res["init"], lam_info = in_memory_peers(args, path, k, m, errors)
    res["lam"] = lam = lam_info["lam"]
    res["lam_info"] = lam_info
    y = np.asarray(zarr.open_array(data["labels"], mode="r")[...])

    X = dclust.open_array(path)
    a, b, must = make_links(y, int(round(args.link_fraction * n)), 0.9, np.random.default_rng(args.seed))
    del y
    graph = dclust.ConstraintGraph.from_pairs(a, b, must, n_samples=n, chunks=X.chunks[0], check_feasible=False)
    res["links"] = {"n_links": graph.n_links, "n_must": graph.n_must, "n_cannot": graph.n_cannot}

    # The warm-up fits (imports, numba caches) run on an in-memory copy of the first rows, in two blocks: a slice of
    # X itself would give Dask keys that collide with the timed fits' graphs.
    n_warm = min(n, 40_000)
    warm = da.from_array(X[:n_warm].compute(), chunks=(-(-n_warm // 2), d))

    def kmeans_marginal(Xs, persist=False):
        return marginal_per_iter(lambda it: kmeans_fit(Xs, k, C0, it, persist=persist), args.marginal_repeats, args)

    # (i) default threaded scheduler, no client -----------------------------------------------------------------
    kmeans_fit(warm, k, C0, 1)
    m["kmeans_default"] = kmeans_marginal(X)
    m["kmeans_default_crc32c"] = kmeans_marginal(dclust.open_array(stores["none_crc32c"]))
    say(f"(i) default scheduler: {fmt_s(m['kmeans_default']['per_iter'])}/iter "
        f"(crc32c store {fmt_s(m['kmeans_default_crc32c']['per_iter'])})")

    # (iii) LocalCluster(processes=False) -------------------------------------------------------------------------
    # in-process transport: no host address
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster):
        kmeans_fit(warm, k, C0, 1)
        m["kmeans_threads_cluster"] = kmeans_marginal(X)
    say(f"(iii) LocalCluster(processes=False): {fmt_s(m['kmeans_threads_cluster']['per_iter'])}/iter")

    # (ii) LocalCluster of processes, and (iv) persisted there ----------------------------------------------------
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.run(_warm_worker)
        kmeans_fit(warm, k, C0, 1)
        m["kmeans_processes"] = kmeans_marginal(X)
        m["kmeans_persisted"] = kmeans_marginal(X, persist=True)
        say(f"(ii) processes: {fmt_s(m['kmeans_processes']['per_iter'])}/iter; (iv) persisted: "
            f"{fmt_s(m['kmeans_persisted']['per_iter'])}/iter")

        it = args.iter_hi
        seed = {"random_state": args.seed}
        specs = {
            "kmeans_processes_events": (
                lambda: dclust.KMeans(n_clusters=k, init=C0, n_init=1, max_iter=it, tol=0.0, persist=False), {}),
            "dpmeans": (lambda: dclust.DPMeans(lam=lam, max_iter=it, persist=False, **seed), {}),
            "rdpmeans": (lambda: dclust.RDPMeans(lam=lam, xi0=1.0, xi_rate=2.0, max_iter=it, persist=False, **seed),
                         {"constraints": graph}),
            "bpmeans": (lambda: dclust.BPMeans(lam=lam, n_init=1, max_iter=it, persist=False, **seed), {}),
            "gmpr": (lambda: dclust.GMPR(n_classes=k, covariance_type="diag", max_iter=it, tol=0.0, persist=False,
                                         **seed), {"constraints": graph}),
        }
        for name in ("rdpmeans", "bpmeans", "gmpr"):
            if name in args.skip:
                del specs[name]
                m[name] = {"skipped": f"--skip {name}"}
        if "gmpr" in specs:
            client.run(_warm_gmpr_kernels)
        m.update(events_fits(specs, X, args.repeats, warm, errors))
        for name in ("kmeans_processes_events", "dpmeans", "rdpmeans", "bpmeans", "gmpr"):
            v = m[name]
            if v and "per_iter" in v:
                say(f"(ii) {name}: {fmt_s(v['per_iter'])}/iter ({v['n_iter']} passes, size {v['n_clusters']})")

        if "daskml" in args.skip:
            m["daskml"] = {"skipped": "--skip daskml"}
        else:
            def fit_daskml(it_):
                km, warns = daskml_fit(da.from_zarr(path), k, C0, it_)
                return int(km.n_iter_), {"inertia": float(km.inertia_), "warnings": warns}

            m["daskml"] = _guard("daskml", lambda: marginal(fit_daskml, 1, hi=args.iter_hi, lo=args.iter_lo), errors)
            if m["daskml"]:
                say(f"dask-ml: {fmt_s(m['daskml']['per_iter'])}/iter")

        def anytime():
            # The fit reads the store of the floor (``path``: no compression, the "read_none" row) once; its figure is
            # the fastest of --anytime-repeats fits, each right after a plain-zarr read of that store (interleaved: the
            # ratio compares reads and fits taken under the same load; a fit is one read, as noisy as a read, so it
            # gets as many runs as the floor's reads).
            dclust.AnytimeDPMeans(lam=lam, random_state=args.seed).fit(warm)  # kernels loaded
            reads, fits = [], []
            for _ in range(args.anytime_repeats):
                reads.append(timed(lambda: zarr_read(path))[1])
                model, wall = timed(lambda: dclust.AnytimeDPMeans(lam=lam, random_state=args.seed).fit(X))
                fits.append(wall)
            _, dask_read, _ = best_of(lambda: X.sum(axis=0).compute(), args.io_repeats)
            return {"seconds": min(fits), "runs": fits, "read_seconds": min(reads), "read_runs": reads,
                    "median_ratio": float(np.median(fits) / np.median(reads)),
                    "store": "none", "n_batches": int(model.n_batches_), "n_clusters": int(model.n_clusters_),
                    "dask_read_seconds_path_ii": dask_read}

        m["anytime"] = _guard("anytime", anytime, errors)
        if m["anytime"]:
            say(f"AnytimeDPMeans: {fmt_s(m['anytime']['seconds'])} ({m['anytime']['n_batches']} batches)")

        # peak worker memory at N and mem_factor x N ------------------------------------------------------------
        if "memory" in args.skip or not args.mem_factor:
            for key in ("memory_kmeans_N", "memory_kmeans_mN", "memory_dpmeans_N", "memory_dpmeans_mN"):
                m[key] = {"skipped": "--skip memory" if args.mem_factor else "--mem-factor 0"}
        else:
            big = ensure_data(args, args.mem_factor * n, d, data_dir)
            res["stores"]["memory_large"] = {"path": big["path"], "bytes_on_disk": _du(big["path"])}
            for label, Xs in (("N", X), ("mN", dclust.open_array(big["path"]))):
                for est, make in (
                    ("kmeans", lambda: dclust.KMeans(n_clusters=k, init=C0, n_init=1, max_iter=args.mem_iter, tol=0.0,
                                                     persist=False)),
                    ("dpmeans", lambda: dclust.DPMeans(lam=lam, max_iter=args.mem_iter, persist=False, **seed)),
                ):
                    client.run(gc.collect)
                    with WorkerPeakMemory(client) as wm, warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        _, wall = timed(lambda: make().fit(Xs))
                    m[f"memory_{est}_{label}"] = {"n": Xs.shape[0], "wall_s": wall, **wm.as_dict()}
                    say(f"peak worker memory {est} N={Xs.shape[0]:,}: {fmt_bytes(wm.peak)}")
    return res


# ---------------------------------------------------------------------------------------------- report


def _per_iter(v) -> float | None:
    if not v or "skipped" in v:
        return None
    x = v.get("per_iter", v.get("seconds"))
    return float(x) if x is not None and math.isfinite(x) else None


def build_rows(res: dict) -> list[dict]:
    """The table rows of one configuration (every id of :data:`ROWS`, in order)."""
    m, errors = res["m"], res["errors"]
    floor = _per_iter(m["floor"])
    sk = _per_iter(m["sklearn"])
    km = {p: _per_iter(m.get(f"kmeans_{p}")) for p in ("default", "processes", "threads_cluster", "persisted")}
    km_ev = _per_iter(m["kmeans_processes_events"])
    dp = _per_iter(m.get("dpmeans"))
    read_none = _per_iter(m["read_none"])

    def ratio(a, b):
        """``a / b``; none when either is missing or not positive (a marginal cost a loaded machine pushed to or
        below zero has no meaningful ratio, and no verdict)."""
        return a / b if a is not None and b is not None and a > 0 and b > 0 else None

    def row(rid, method, path, value, unit="s", vs_kmeans=None, target=None, measured=None, limit=None, ge=False,
            note=""):
        v = m.get(rid) or {}
        if rid in errors:
            note = "ERROR " + errors[rid]
        elif "skipped" in v:
            note = "skipped: " + v["skipped"]
        met = None if measured is None or limit is None else (measured >= limit if ge else measured <= limit)
        return {"id": rid, "method": method, "path": PATHS.get(path, path), "value": value, "unit": unit,
                "vs_floor": ratio(value, floor) if unit == "s" else None, "vs_kmeans": vs_kmeans,
                "target": target, "ratio": measured, "limit": limit, "met": met, "note": note}

    def marg_note(v):
        """Iteration counts, and the event median of the long fits as a cross-check of the marginal cost (which
        a loaded machine can push below zero)."""
        secs = [x for r in v["runs"][str(v["hi"])] for x in r.get("iter_seconds", [])[1:]]
        note = f"n_iter {v['n_iter_hi']}/{v['n_iter_lo']}" + ("" if v["exact_iterations"] else " NOT EXACT")
        if secs:
            note += f"; event median {fmt_s(median(secs))}"
        return note + ("; NOISY (negative marginal)" if v["per_iter"] <= 0 else "")

    rows = []
    labels = {"none": "no compression", "zstd": "zstd (write_array)", "lz4_shuffle": "blosc-lz4 shuffle (write_array)",
              "lz4_bitshuffle": "blosc-lz4 bitshuffle", "none_crc32c": "no compression + crc32c"}
    for c in CODECS:
        v = m[f"read_{c}"]
        r = ratio(v["seconds"], read_none)
        crc = c == "none_crc32c"
        rows.append(row(f"read_{c}", f"read, {labels[c]}", "zarr", v["seconds"],
                        target="crc32c read <= 1.05x plain read" if crc else None, measured=r if crc else None,
                        limit=T_CRC if crc else None,
                        note=f"{fmt_bytes(v['bytes_on_disk'])} on disk; {fmt_ratio(r)} of uncompressed read"))
    s = m["sklearn"]
    rows.append(row("sklearn", "scikit-learn KMeans lloyd (marginal)", "memory", sk,
                    note=marg_note(s)))
    rows.append(row("floor", "FLOOR = zarr read + scikit-learn iteration", "memory", floor))
    f = m.get("faiss") or {}
    rows.append(row("faiss", "faiss Kmeans (marginal, all rows)", "memory", _per_iter(f),
                    note=(f"{fmt_ratio(ratio(_per_iter(f), sk))} of scikit-learn; {marg_note(f)}"
                          if _per_iter(f) else "")))

    g = m.get("sklearn_gmm") or {}
    sk_gmm = _per_iter(g)
    rows.append(row("sklearn_gmm", "scikit-learn GaussianMixture diag (marginal)", "memory", sk_gmm,
                    note=(f"{g['sample_rows']:,}-row sample x {res['n'] / g['sample_rows']:.3g} (linear in rows); "
                          f"{fmt_ratio(ratio(sk_gmm, sk))} of scikit-learn KMeans; {marg_note(g)}"
                          if sk_gmm is not None else "")))

    rows.append(row("kmeans_default", "dclust KMeans, Zarr every pass", "default", km["default"],
                    target="<= 1.3x floor", measured=ratio(km["default"], floor), limit=T_FLOOR,
                    note=marg_note(m["kmeans_default"])))
    crc_km = _per_iter(m["kmeans_default_crc32c"])
    rows.append(row("kmeans_default_crc32c", "dclust KMeans, crc32c store", "default", crc_km,
                    target="<= 1.05x no checksum", measured=ratio(crc_km, km["default"]), limit=T_CRC,
                    note=marg_note(m["kmeans_default_crc32c"])))
    rows.append(row("kmeans_processes", "dclust KMeans, Zarr every pass", "processes", km["processes"],
                    vs_kmeans=1.0, target="<= 1.3x floor", measured=ratio(km["processes"], floor), limit=T_FLOOR,
                    note=marg_note(m["kmeans_processes"])))
    rows.append(row("kmeans_threads_cluster", "dclust KMeans, Zarr every pass", "threads", km["threads_cluster"],
                    target="(for the default choice) vs floor", measured=ratio(km["threads_cluster"], floor),
                    note=marg_note(m["kmeans_threads_cluster"])))
    rows.append(row("kmeans_persisted", "dclust KMeans, persisted (persist=True)", "persisted", km["persisted"],
                    target="<= 1.5x scikit-learn (aim 1.0)", measured=ratio(km["persisted"], sk), limit=T_PERSISTED,
                    note=marg_note(m["kmeans_persisted"])))
    rows.append(row("kmeans_processes_events", "dclust KMeans, event median", "processes", km_ev, vs_kmeans=1.0,
                    note="reference of the rows below (same measure, same path)"))

    def ev(rid, method, ref, ref_name, limit):
        v = m.get(rid) or {}
        x = _per_iter(v)
        note = f"{v['n_iter']} passes, size {v['n_clusters']}" if x is not None else ""
        return row(rid, method, "processes", x, vs_kmeans=ratio(x, km_ev), target=f"<= {limit:g}x {ref_name}",
                   measured=ratio(x, ref), limit=limit, note=note)

    rows.append(ev("dpmeans", "dclust DPMeans, event median", km_ev, "KMeans", T_DP))
    rows[-1]["note"] += f"; lam {res['lam']:.4g}"
    rows.append(ev("rdpmeans", f"dclust RDPMeans ({res['links']['n_links']:,} links), event median", dp, "DP-means",
                   T_RDP))
    rows.append(ev("bpmeans", "dclust BPMeans, event median", dp, "DP-means", T_BP))
    rows.append(ev("gmpr", "dclust GMPR diag (same links), event median", km_ev, "KMeans", T_GMPR))
    gm = rows[-1]["value"]
    if gm is not None and sk_gmm is not None:
        rows[-1]["note"] += (f"; scikit-learn GaussianMixture in memory is {fmt_ratio(ratio(sk_gmm, gm))} of it, "
                             f"{fmt_ratio(ratio(sk_gmm, sk))} of its own KMeans")
    e = m.get("daskml") or {}
    x = _per_iter(e)
    rows.append(row("daskml", "dask-ml KMeans (marginal)", "processes", x, vs_kmeans=ratio(x, km["processes"]),
                    target=">= 3x slower than dclust", measured=ratio(x, km["processes"]), limit=T_DASKML, ge=True,
                    note=marg_note(e) if x is not None else ""))
    a = m.get("anytime") or {}
    x = _per_iter(a)
    # the floor is the fastest plain-zarr read of the store: the table's (no cluster running) or the ones interleaved
    # with the fits (same store, the same load), whichever is lower
    floor_read = min((v for v in (read_none, a.get("read_seconds")) if v is not None), default=None)
    rows.append(row("anytime", "dclust AnytimeDPMeans, one read (whole fit)", "processes", x,
                    target="<= 4x one plain zarr read", measured=ratio(x, floor_read), limit=T_ANYTIME,
                    note=(f"{a['n_batches']} batches, K={a['n_clusters']}; vs plain read of the same store "
                          f"{fmt_s(floor_read)} (the lower of the table's read and the reads interleaved with the "
                          f"fits, {fmt_s(a['read_seconds'])}); {len(a['runs'])} fits; median fit / median "
                          f"interleaved read {a['median_ratio']:.2f}x; Dask read on (ii) "
                          f"{fmt_s(a['dask_read_seconds_path_ii'])}" if x is not None else "")))
    for est in ("kmeans", "dpmeans"):
        small, large = m[f"memory_{est}_N"], m[f"memory_{est}_mN"]
        for label, v in (("N", small), ("mN", large)):
            peak = v.get("peak")
            grow = ratio(large.get("peak"), small.get("peak")) if label == "mN" else None
            rows.append(row(f"memory_{est}_{label}", f"peak worker RSS, {est}, N={v['n']:,}" if "n" in v else
                            f"peak worker RSS, {est}", "processes", peak, unit="B",
                            target="flat in N: <= 1.2x the peak at N" if label == "mN" else None,
                            measured=grow, limit=T_MEMORY if label == "mN" else None,
                            note=f"start {fmt_bytes(v['baseline'])}; {v['method']}" if "baseline" in v else ""))
    assert [r["id"] for r in rows] == list(ROWS)
    return rows


def report(res: dict) -> str:
    cells = []
    for r in res["rows"]:
        value = fmt_bytes(r["value"]) if r["unit"] == "B" else fmt_s(r["value"])
        if r["value"] is None and r["note"].startswith(("skipped", "ERROR")):
            value = r["note"].split(":")[0].split()[0]
        met = "-" if r["met"] is None else ("MET" if r["met"] else "MISS")
        cells.append([r["method"], r["path"], value, fmt_ratio(r["vs_floor"]), fmt_ratio(r["vs_kmeans"]),
                      r["target"] or "", fmt_ratio(r["ratio"]), met, r["note"]])
    title = (f"\nN = {res['n']:,} x D = {res['d']}, K = {res['k']} (float32, {res['chunk_rows']:,}-row chunks); "
             f"s/iter unless noted; vs KMeans = same path")
    return print_table(cells, ["method", "path", "s/iter", "vs floor", "vs KMeans", "target", "ratio", "met?", "note"],
                       title=title)


# ------------------------------------------------------------------------------------------------ main


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    import dask

    dask.config.set({"logging.distributed": "warning"})  # no per-cluster INFO chatter in the report
    logging.getLogger("distributed").setLevel(logging.WARNING)
    info = machine_info()
    print(f"machine: {info.get('cpu_count')} cores; versions: {info['versions']}", flush=True)
    results: dict = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, "machine": info,
        "targets": {"floor": T_FLOOR, "persisted_vs_sklearn": T_PERSISTED, "dpmeans_vs_kmeans": T_DP,
                    "rdpmeans_vs_dpmeans": T_RDP, "bpmeans_vs_dpmeans": T_BP, "gmpr_vs_kmeans": T_GMPR,
                    "daskml_over_dclust": T_DASKML, "anytime_vs_read": T_ANYTIME, "memory_growth": T_MEMORY,
                    "crc32c": T_CRC},
        "definitions": {
            "floor": "plain zarr read of every chunk, 2 threads, best of --io-repeats + scikit-learn marginal lloyd "
                     "iteration (t(max_iter=hi) - t(max_iter=lo)) / (hi - lo), fastest of --marginal-repeats",
            "marginal": "(t(max_iter=hi) - t(max_iter=lo)) / (hi - lo), fastest of --marginal-repeats (scikit-learn, "
                        "dclust KMeans) or --repeats (faiss, dask-ml, GaussianMixture), fixed init, tol=0",
            "event median": "median of the progress-event seconds of the passes after the first, one fit with "
                            "max_iter=hi (fastest of --repeats)",
            "anytime": "wall seconds of AnytimeDPMeans.fit over the uncompressed store (one read, one chunk per "
                       "batch), fastest of --anytime-repeats, each after a plain-zarr read of that store "
                       "(read_seconds)",
        },
        "rows": ROWS, "configs": []}
    tmp = None
    data_dir = args.data_dir
    if data_dir is None:
        tmp = data_dir = Path(tempfile.mkdtemp(prefix="dclust-bench-engine-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    texts = []
    try:
        for n, d, k in args.configs:
            res = run_config(args, n, d, k, data_dir)
            res["rows"] = build_rows(res)
            texts.append(report(res))
            results["configs"].append(res)
            write_json(results, args.out)  # partial results survive a later failure
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    results.update(total_seconds=time.perf_counter() - t_start, report="\n".join(texts))
    print(f"\nwrote {write_json(results, args.out)} (total {results['total_seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
