"""GM-PR's diagonal E-step block kernel against KMeans' block kernel on the same block (one thread; issue 14).

The kernels alone, without Dask, reads or graphs: one float32 block of ``--n`` rows of the ``bench_engine.py``
data (``dclust.make_blobs(centers=16, cluster_std=3)``, default 250,000 x 64), GM-PR parameters from a short
diagonal fit with links (``--fit-rows`` rows, ``--fit-iters`` EM steps, 1 % links as ``bench_engine.py``: the
state a benchmark iteration sees), then, interleaved ``--repeats`` times,

- ``kmeans``: ``dclust.kernels.distances.block_stats(X, C)`` (the kernel of a KMeans pass) with the ``K`` GM-PR
  means as centres,
- ``gmpr``: ``dclust.kernels.gmpr.unlinked_partial(X, params)`` (the kernel of a GM-PR E-step on unlinked rows),

each timed in thread CPU seconds and wall seconds, the minimum over the repeats kept; the ratio is GM-PR's over
KMeans'. At 64-D every tile is sparse (a row's few components within 60 nats of its best), the screened path.

Run: ``python benchmarks/bench_gmpr_kernel.py`` (about a minute on 2 cores; ``--d 8 --k 16`` for the 8-D case);
JSON to ``benchmarks/results/bench_gmpr_kernel.json``. To compare two versions, run each checkout's copy of the
script (``_common.py`` puts its own checkout first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, machine_info, write_json  # noqa: E402
from bench_constraints import make_links  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=250_000, help="rows of the timed block (default 250,000)")
    p.add_argument("--d", type=int, default=64, help="features (default 64)")
    p.add_argument("--k", type=int, default=64, help="GM-PR classes and KMeans centres (default 64)")
    p.add_argument("--fit-rows", type=int, default=200_000, help="rows of the parameter fit (default 200,000)")
    p.add_argument("--fit-iters", type=int, default=5, help="EM steps of the parameter fit (default 5)")
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds, the fastest kept (default 7)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "bench_gmpr_kernel.json"))
    return p.parse_args(argv)


def setup(args):
    """The timed block (float32, C order), the fitted GM-PR parameters and the KMeans centres."""
    import dask

    import dclust
    from dclust.kernels.gmpr import MixtureParams

    n = max(args.n, args.fit_rows)
    chunk = max(1, args.fit_rows // 2)
    b = dclust.make_blobs(n, args.d, centers=16, cluster_std=3.0, chunk_rows=chunk, dtype="float32",
                          random_state=args.seed)
    with dask.config.set(scheduler="threads"):
        X = np.ascontiguousarray(b.X.compute())
        y = np.asarray(b.labels.compute())
    fit_X = X[: args.fit_rows]
    a, c, must = make_links(y[: args.fit_rows], max(2, args.fit_rows // 100), 0.9, np.random.default_rng(args.seed))
    import dask.array as da

    Xd = da.from_array(fit_X, chunks=(chunk, args.d))
    graph = dclust.ConstraintGraph.from_pairs(a, c, must, n_samples=args.fit_rows, chunks=Xd.chunks[0],
                                              check_feasible=False)
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter is expected
        gm = dclust.GMPR(n_classes=args.k, covariance_type="diag", max_iter=args.fit_iters, tol=0.0, persist=False,
                         random_state=args.seed).fit(Xd, constraints=graph)
    params = MixtureParams.build(gm.weights_, gm.sub_weights_, gm.means_, gm.covariances_)
    return np.ascontiguousarray(X[: args.n]), params, np.ascontiguousarray(gm.means_.reshape(-1, args.d))


def run(args) -> dict:
    from dclust.kernels import distances
    from dclust.kernels.gmpr import unlinked_partial

    X, params, C = setup(args)
    fns = {"kmeans": lambda: distances.block_stats(X, C), "gmpr": lambda: unlinked_partial(X, params)}
    for fn in fns.values():  # numba caches loaded
        fn()
    cpu = {name: [] for name in fns}
    wall = {name: [] for name in fns}
    for r in range(args.repeats):
        for name, fn in fns.items():  # interleaved: A, B, A, B, ...
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            cpu[name].append(time.thread_time() - c0)
            wall[name].append(time.perf_counter() - t0)
        print(f"  round {r + 1}/{args.repeats}: " + ", ".join(
            f"{name} {cpu[name][-1] * 1e3:.1f} ms CPU" for name in fns), flush=True)
    best_cpu = {name: min(v) for name, v in cpu.items()}
    best_wall = {name: min(v) for name, v in wall.items()}
    return {"best_cpu": best_cpu, "best_wall": best_wall,
            "cpu_ratio": best_cpu["gmpr"] / best_cpu["kmeans"], "wall_ratio": best_wall["gmpr"] / best_wall["kmeans"],
            "ns_per_row_cpu": {name: v / args.n * 1e9 for name, v in best_cpu.items()},
            "runs": {"cpu": cpu, "wall": wall}}


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    print(f"GM-PR diag E-step kernel vs KMeans kernel: one block of {args.n:,} x {args.d} float32, K = {args.k}, "
          f"{args.repeats} interleaved rounds (one thread)")
    res = run(args)
    print(f"\n{'kernel':8s} {'CPU (min)':>10s} {'wall (min)':>11s} {'ns/row':>7s}")
    for name in ("kmeans", "gmpr"):
        print(f"{name:8s} {res['best_cpu'][name] * 1e3:8.1f} ms {res['best_wall'][name] * 1e3:8.1f} ms "
              f"{res['ns_per_row_cpu'][name]:7.1f}")
    print(f"GM-PR / KMeans: {res['cpu_ratio']:.2f}x CPU, {res['wall_ratio']:.2f}x wall")
    out = {"args": vars(args), "machine": machine_info(), **res,
           "method": "one block, both kernels on one thread (BLAS limited to one by the kernels), interleaved "
                     "rounds; per kernel the minimum over the rounds of thread CPU and of wall seconds; "
                     "ratio = GM-PR / KMeans", "total_seconds": time.perf_counter() - t0}
    print(f"\nwrote {write_json(out, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
