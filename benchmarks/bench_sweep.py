"""Benchmark: the DP-means lam sweep (two passes) against one full DP-means fit per candidate lam, same data, same run.

Data: N x D float32 Gaussian blobs (K centres, unit standard deviation, centres uniform in [-20, 20]^D), written
once to Zarr with ``--chunk-rows`` rows per chunk. On a LocalCluster of 2 single-threaded worker processes
(``--threads``: Dask's threaded scheduler in this process, for toy runs):

(a) the read floor: one Dask pass that reads every chunk (``X.sum()``);
(b) ``dclust.model_selection.sweep_dpmeans``: a uniform sample (pass 1), DP-means on the sample for every candidate
    in memory, one scoring pass for all candidates (pass 2);
(c) the naive sweep: ``DPMeans(lam).fit(X)`` on the full data for every candidate of (b) (``--naive-every m``:
    every m-th candidate only, its time scaled up to all candidates);
(d) agreement: K of (b) against K of (c) for the same lam; the suggested K against the true K; the adjusted Rand
    index of a full refit at the suggested lam against the generating labels.

Run: ``.venv/bin/python benchmarks/bench_sweep.py`` (default N = 500,000, D = 8, K = 10, 12 candidates; a few
minutes on 2 cores). Writes ``benchmarks/results/bench_sweep.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, add_int_options, fmt_ratio, fmt_s, machine_info, print_table, write_json  # noqa: E402


def run(args) -> dict:
    import dclust
    from dclust.model_selection import sweep_dpmeans

    with tempfile.TemporaryDirectory() as tmp:
        blobs = dclust.make_blobs(args.n, args.d, args.k, cluster_std=1.0, center_box=(-20.0, 20.0),
                                  chunk_rows=args.chunk_rows, dtype="float32", random_state=args.seed)
        path = str(Path(tmp) / "x.zarr")
        t = time.perf_counter()
        dclust.write_array(blobs.X, path, codec="none")
        truth_path = str(Path(tmp) / "y.zarr")
        dclust.write_labels(blobs.labels, truth_path)
        write_seconds = time.perf_counter() - t
        X = dclust.open_array(path)
        truth = dclust.open_array(truth_path)

        floor = min(_timed(lambda: float(X.sum().compute()))[1] for _ in range(2))
        sweep, sweep_seconds = _timed(lambda: sweep_dpmeans(
            X, n_lams=args.n_lams, max_clusters=args.max_clusters, sample_size=args.sample_size,
            random_state=args.seed))
        naive = []
        for i, lam in enumerate(sweep.lam):
            if i % args.naive_every:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dp, seconds = _timed(lambda: dclust.DPMeans(lam=lam, random_state=args.seed).fit(X))
            naive.append({"lam": lam, "k_full": int(dp.n_clusters_), "k_sweep": sweep.n_clusters[i],
                          "passes": int(dp.n_iter_) + 1, "seconds": seconds, "converged": bool(dp.converged_)})
        naive_seconds = sum(r["seconds"] for r in naive) * len(sweep.lam) / len(naive)
        naive_passes = sum(r["passes"] for r in naive) * len(sweep.lam) / len(naive)
        ari = None
        if sweep.suggested_lam is not None:
            refit = dclust.DPMeans(lam=sweep.suggested_lam, random_state=args.seed).fit(X)
            ari = dclust.metrics.adjusted_rand_score(truth, refit.predict(X))

    rows = [
        ["read floor (one Dask pass)", 1, fmt_s(floor), fmt_ratio(1.0), "-"],
        [f"sweep_dpmeans ({len(sweep.lam)} lams)", sweep.n_passes, fmt_s(sweep_seconds),
         fmt_ratio(sweep_seconds / floor), fmt_ratio(1.0)],
        [f"DPMeans.fit per lam ({len(naive)} of {len(sweep.lam)} timed)", f"{naive_passes:.0f}",
         fmt_s(naive_seconds), fmt_ratio(naive_seconds / floor), fmt_ratio(naive_seconds / sweep_seconds)],
    ]
    print_table(rows, ["method", "passes", "seconds", "/ floor", "/ sweep"],
                title=f"DP-means lam sweep, {args.n:,} x {args.d} float32, {args.k} blobs, "
                      f"chunks of {args.chunk_rows:,} rows")
    print_table([[f"{r['lam']:.4g}", r["k_sweep"], r["k_full"], r["passes"], fmt_s(r["seconds"])] for r in naive],
                ["lam", "K (sweep)", "K (full fit)", "passes (full fit)", "seconds (full fit)"])
    agree = sum(r["k_sweep"] == r["k_full"] for r in naive)
    print(f"K agrees on {agree} of {len(naive)} lams; suggested lam {sweep.suggested_lam} -> K "
          f"{sweep.suggested_n_clusters} (true {args.k}); ARI of the refit at it: {ari}")
    print(f"sweep seconds: {sweep.seconds}")
    return {
        "benchmark": "bench_sweep", "machine": machine_info(), "params": vars(args),
        "write_seconds": write_seconds, "floor_seconds": floor,
        "sweep": {"seconds": sweep_seconds, "passes": sweep.n_passes, "breakdown": sweep.seconds,
                  "result": sweep.to_dict()},
        "naive": {"seconds_all_lams": naive_seconds, "passes_all_lams": naive_passes, "fits": naive},
        "ratios": {"sweep_over_floor": sweep_seconds / floor, "naive_over_sweep": naive_seconds / sweep_seconds},
        "agreement": {"k_equal": agree, "of": len(naive), "suggested_k": sweep.suggested_n_clusters,
                      "true_k": args.k, "refit_ari": ari},
    }


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_int_options(p, n=500_000, d=8, k=10, chunk_rows=100_000, n_lams=12, max_clusters=20, sample_size=5_000)
    p.add_argument("--naive-every", type=int, default=1, help="Time the full fit of every m-th candidate only.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", action="store_true", help="Dask's threaded scheduler instead of a LocalCluster.")
    p.add_argument("--out", default=str(HERE / "results" / "bench_sweep.json"))
    args = p.parse_args(argv)
    if args.threads:
        doc = run(args)
    else:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
                Client(cluster):
            doc = run(args)
    write_json(doc, args.out)
    print(f"wrote {args.out}")
    return doc


if __name__ == "__main__":
    main()
