"""Where a pass's time goes on a ``LocalCluster`` of 2 single-threaded worker processes (issue 14): per pass of a
KMeans fit and of a GM-PR fit (diagonal, the links of ``bench_engine.py``) over the same store, read every pass,
the tasks and busy seconds of each worker, the pass's span and the gap before it (driver and scheduler).

A pass whose busy seconds differ between the workers ends when the busier one does: KMeans' tasks depend on
nothing and are queued, so each worker takes the next when it is free; GM-PR's E-step tasks go where their share
of the links is (``dclust._dask.passes.persist_aligned``). ``--persist-first`` fits a persisted KMeans in the same
cluster first, as ``bench_engine.py``'s rows do.

Data: the ``bench_engine.py`` store (blobs, no compression; made once in ``--data-dir``). Run:
``python benchmarks/bench_pass_timeline.py`` (10M x 8, K=16, about two minutes; ``--n 2000000 --d 64 --k 64``
for the other configuration); JSON to ``benchmarks/results/bench_pass_timeline.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, add_int_options, machine_info, pass_timeline, print_table, write_json  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_int_options(p, n=10_000_000, d=8, k=16, centers=16, chunk_rows=500_000, iters=8, seed=0)
    p.add_argument("--cluster-std", type=float, default=3.0)
    p.add_argument("--link-fraction", type=float, default=0.01, help="links per row (as bench_engine.py)")
    p.add_argument("--persist-first", action="store_true", help="fit a persisted KMeans first in the same cluster")
    p.add_argument("--data-dir", default=str(HERE / "data"))
    p.add_argument("--out", default=str(HERE / "results" / "bench_pass_timeline.json"))
    args = p.parse_args(argv)
    if min(args.n, args.d, args.k, args.chunk_rows) < 1 or args.iters < 2 or args.k > args.n:
        p.error("--n, --d, --k and --chunk-rows must be >= 1, --iters >= 2 and --k <= --n")
    return args


def run(args) -> dict:
    import zarr
    from distributed import Client, LocalCluster, get_task_stream

    import dclust
    from bench_constraints import _warm_gmpr_kernels, make_links
    from bench_engine import ensure_data

    data = ensure_data(args, args.n, args.d, Path(args.data_dir))
    X = dclust.open_array(data["path"])
    y = np.asarray(zarr.open_array(data["labels"], mode="r")[...])
    a, b, must = make_links(y, max(1, int(round(args.link_fraction * args.n))), 0.9, np.random.default_rng(args.seed))
    graph = dclust.ConstraintGraph.from_pairs(a, b, must, n_samples=args.n, chunks=X.chunks[0], check_feasible=False)
    fits = {
        "kmeans": (lambda: dclust.KMeans(n_clusters=args.k, max_iter=args.iters, tol=0.0, persist=False,
                                         random_state=args.seed), {}),
        "gmpr": (lambda: dclust.GMPR(n_classes=args.k, covariance_type="diag", max_iter=args.iters, tol=0.0,
                                     persist=False, random_state=args.seed), {"constraints": graph}),
    }
    out: dict = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter is expected
        client.run(_warm_gmpr_kernels)
        if args.persist_first:
            dclust.KMeans(n_clusters=args.k, max_iter=2, tol=0.0, persist=True, random_state=args.seed).fit(X)
        for name, (make, kw) in fits.items():
            events: list = []
            with get_task_stream(client) as stream, dclust.on_progress(events.append):
                make().fit(X, **kw)
            iters = [e.seconds for e in events if e.phase == "iter"]
            out[name] = {"iteration_s": iters, "median_iteration_s": float(np.median(iters[1:] or iters)),
                         "passes": pass_timeline(stream.data)}
    return out


def report(res: dict) -> None:
    rows = []
    for name, r in res.items():
        for i, p in enumerate(r["passes"]):
            workers = sorted(p["busy_s"])
            rows.append([name, i, " / ".join(str(p["tasks"][w]) for w in workers),
                         " / ".join(f"{1000 * p['busy_s'][w]:.0f}" for w in workers), f"{1000 * p['span_s']:.0f}",
                         "-" if p["gap_s"] is None else f"{1000 * p['gap_s']:.0f}"])
    print_table(rows, ["fit", "pass", "tasks per worker", "busy ms per worker", "span ms", "gap ms"],
                title="per pass, LocalCluster 2 procs x 1 thread")
    for name, r in res.items():
        print(f"{name}: median iteration {1000 * r['median_iteration_s']:.0f} ms")


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    res = run(args)
    report(res)
    out = {"args": vars(args), "machine": machine_info(), "fits": res, "total_seconds": time.perf_counter() - t0}
    print(f"\nwrote {write_json(out, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
