"""Per-iteration cost of the OCC estimators relative to DP-means: RDP-means / DP-means and BP-means / DP-means.

Issue 14's targets: RDP-means <= 1.5 x DP-means and BP-means <= 2 x DP-means per iteration, on the same path
(the store read every pass, ``persist=False``). For every configuration ``N x D`` (default ``2,000,000 x 8`` and
``400,000 x 64``) on overlapping float32 Gaussian blobs (16 centres, ``cluster_std=3``) written without
compression in ``--chunk-rows``-row chunks, one run fits, interleaved (DP, RDP, BP, DP, RDP, BP, ...),
``--repeats`` times each:

- ``DPMeans(lam)``, lam from the furthest-first heuristic of ``DPMeans(n_clusters=16)`` on a 200k-row sample;
- ``RDPMeans(lam, xi0=1, xi_rate=2)`` with ``--link-fraction * N`` links (90 % inside a true cluster, as in
  ``bench_engine.py``);
- ``BPMeans(lam, n_init=1)``;

each with ``max_iter=--iters``, ``persist=False``, ``random_state=0``. An estimator's seconds per iteration are the
median of the per-pass seconds of its progress events after the first pass; the figure kept is the minimum over
the repeats. The path is a ``LocalCluster`` of 2 single-threaded worker processes (``--path processes``, the path
of ``bench_engine.py``'s estimator rows) or Dask's default threaded scheduler (``--path default``).

Run: ``python benchmarks/bench_occ_ratio.py`` (a few minutes on 2 cores); ``--quick`` for a smoke run.
Writes ``benchmarks/results/bench_occ_ratio.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, fmt_ratio, fmt_s, machine_info, median, print_table, write_json  # noqa: E402
from bench_constraints import make_links  # noqa: E402
from bench_kmeans import choose_lam  # noqa: E402

T_RDP, T_BP = 1.5, 2.0  # issue 14


def _config(text: str) -> tuple[int, int]:
    try:
        n, d = (int(v.replace("_", "")) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NxD (e.g. 2000000x8), got {text!r}") from None
    if min(n, d) < 1:
        raise argparse.ArgumentTypeError(f"N and D must be >= 1, got {text!r}")
    return n, d


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=_config, nargs="+", default=[(2_000_000, 8), (400_000, 64)], metavar="NxD",
                   help="data sizes (default 2000000x8 400000x64)")
    p.add_argument("--chunk-rows", type=int, default=250_000, help="rows per Zarr chunk (default 250,000)")
    p.add_argument("--centers", type=int, default=16, help="blobs in the data (default 16)")
    p.add_argument("--cluster-std", type=float, default=3.0, help="blob standard deviation (default 3: overlapping)")
    p.add_argument("--link-fraction", type=float, default=0.005, help="links per row for RDP-means (default 0.005)")
    p.add_argument("--iters", type=int, default=6, help="max_iter of every fit (default 6)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved fits of each estimator (default 3)")
    p.add_argument("--path", choices=["processes", "default"], default="processes",
                   help="LocalCluster of 2 worker processes (default) or Dask's threaded scheduler")
    p.add_argument("--only", nargs="*", choices=["dpmeans", "rdpmeans", "bpmeans"], default=None,
                   help="fit only these estimators (DP-means is always fitted: it is the reference)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_occ_ratio.json")
    p.add_argument("--quick", action="store_true", help="200000x8 and 50000x64, 2 repeats, 4 iterations")
    args = p.parse_args(argv)
    if args.quick:
        args.configs, args.chunk_rows, args.repeats, args.iters = [(200_000, 8), (50_000, 64)], 50_000, 2, 4
    if args.iters < 2 or args.repeats < 1 or args.chunk_rows < 1:
        p.error("--iters must be >= 2, --repeats and --chunk-rows >= 1")
    return args


def make_data(args, n: int, d: int, data_dir: Path):
    """The store (no compression), its lam and the links."""
    import zarr

    import dclust

    b = dclust.make_blobs(n, d, centers=args.centers, cluster_std=args.cluster_std, chunk_rows=args.chunk_rows,
                          dtype="float32", random_state=args.seed)
    path = data_dir / f"occ_{n}x{d}.zarr"
    dst = zarr.create_array(store=str(path), shape=b.X.shape, chunks=(args.chunk_rows, d), dtype="float32",
                            compressors=None)
    b.X.store(dst, lock=False)
    y = np.asarray(b.labels.compute())
    X_mem = np.asarray(zarr.open_array(str(path), mode="r")[...])
    lam = choose_lam(X_mem, args.centers, args.seed)["lam"]
    del X_mem
    X = dclust.open_array(str(path))
    a, c, must = make_links(y, int(round(args.link_fraction * n)), 0.9, np.random.default_rng(args.seed))
    graph = dclust.ConstraintGraph.from_pairs(a, c, must, n_samples=n, chunks=X.chunks[0], check_feasible=False)
    return X, lam, graph


def estimators(lam: float, iters: int, seed: int, graph):
    import dclust

    common = {"max_iter": iters, "persist": False, "random_state": seed}
    return {
        "dpmeans": (lambda: dclust.DPMeans(lam=lam, **common), {}),
        "rdpmeans": (lambda: dclust.RDPMeans(lam=lam, xi0=1.0, xi_rate=2.0, **common), {"constraints": graph}),
        "bpmeans": (lambda: dclust.BPMeans(lam=lam, n_init=1, **common), {}),
    }


def fit_events(make, X, fit_kw) -> dict:
    """One fit; the per-pass event seconds and the median of those after the first pass."""
    import dclust

    events: list = []
    gc.collect()
    with dclust.on_progress(events.append), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter is expected
        t0 = time.perf_counter()
        model = make().fit(X, **fit_kw)
        wall = time.perf_counter() - t0
    secs = [e.seconds for e in events if e.phase == "iter"]
    size = next(int(getattr(model, a)) for a in ("n_clusters_", "n_latent_features_") if hasattr(model, a))
    return {"wall": wall, "iter_seconds": secs, "per_iter": median(secs[1:] if len(secs) > 1 else secs),
            "n_iter": int(model.n_iter_), "size": size}


def run_config(args, n: int, d: int, data_dir: Path) -> dict:
    import dask.array as da

    import dclust

    print(f"\n=== N = {n:,}, D = {d} ({args.chunk_rows:,}-row chunks, path {args.path}) ===", flush=True)
    X, lam, graph = make_data(args, n, d, data_dir)
    ests = estimators(lam, args.iters, args.seed, graph)
    names = ["dpmeans"] + [k for k in ("rdpmeans", "bpmeans") if args.only is None or k in args.only]
    # warm-up on an in-memory copy of the first rows (kernels compiled/loaded in every worker)
    n_warm = min(n, 20_000)
    warm = da.from_array(X[:n_warm].compute(), chunks=(-(-n_warm // 2), d))
    wgraph = dclust.ConstraintGraph.from_pairs([0, 2], [1, 3], [True, False], n_samples=n_warm,
                                               chunks=warm.chunks[0], check_feasible=False)
    for name in names:
        make, kw = ests[name]
        fit_events(lambda: make().set_params(max_iter=2), warm, {"constraints": wgraph} if kw else {})
    runs: dict = {k: [] for k in names}
    for r in range(args.repeats):
        for name in names:
            make, kw = ests[name]
            runs[name].append(fit_events(make, X, kw))
            v = runs[name][-1]
            print(f"  repeat {r + 1}: {name:>8} {fmt_s(v['per_iter'])}/iter ({v['n_iter']} passes, size "
                  f"{v['size']})", flush=True)
    best = {k: min(v["per_iter"] for v in runs[k]) for k in names}
    res = {"n": n, "d": d, "lam": lam, "n_links": graph.n_links, "per_iter": best, "runs": runs}
    res["rdp_over_dp"] = best["rdpmeans"] / best["dpmeans"] if "rdpmeans" in best else None
    res["bp_over_dp"] = best["bpmeans"] / best["dpmeans"] if "bpmeans" in best else None
    return res


def report(results: list[dict]) -> str:
    rows = []
    for r in results:
        for name, limit, key in (("dpmeans", None, None), ("rdpmeans", T_RDP, "rdp_over_dp"),
                                 ("bpmeans", T_BP, "bp_over_dp")):
            if name not in r["per_iter"]:
                continue
            ratio = r[key] if key else None
            met = "-" if ratio is None else ("MET" if ratio <= limit else "MISS")
            rows.append([f"{r['n']:,} x {r['d']}", name, fmt_s(r["per_iter"][name]), fmt_ratio(ratio),
                         f"<= {limit:g}x" if limit else "", met])
    return print_table(rows, ["data", "estimator", "s/iter (min of repeats)", "vs DP-means", "target", "met?"],
                       title="\nper-iteration seconds (median of the passes after the first; min over repeats)")


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import dask

    dask.config.set({"logging.distributed": "warning"})
    logging.getLogger("distributed").setLevel(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="dclust-bench-occ-"))
    out = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "machine": machine_info(), "targets": {"rdp_over_dp": T_RDP, "bp_over_dp": T_BP}, "configs": []}
    try:
        if args.path == "processes":
            from distributed import Client, LocalCluster

            ctx = contextlib.ExitStack()
            cluster = ctx.enter_context(LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                                     host="127.0.0.1", dashboard_address=":0"))
            ctx.enter_context(Client(cluster))
        else:
            ctx = contextlib.nullcontext()
        with ctx:
            for n, d in args.configs:
                out["configs"].append(run_config(args, n, d, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["report"] = report(out["configs"])
    print(f"wrote {write_json(out, args.out)}")
    return out


if __name__ == "__main__":
    main()
