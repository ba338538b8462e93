"""GM-PR's diagonal E-step block kernel against KMeans' block kernel on the same block (one thread; issue 14).

The kernels alone, without Dask, reads or graphs: one float32 block of ``--n`` rows of the ``bench_engine.py``
data (``dclust.make_blobs(centers=16, cluster_std=3)``, default 250,000 x 64), GM-PR parameters from a short
diagonal fit with links (``--fit-rows`` rows, ``--fit-iters`` EM steps, 1 % links as ``bench_engine.py``: the
state a benchmark iteration sees), then, interleaved ``--repeats`` times,

- ``kmeans``: ``dclust.kernels.distances.block_stats(X, C)`` (the kernel of a KMeans pass) with the ``K`` GM-PR
  means as centres,
- ``gmpr``: ``dclust.kernels.gmpr.unlinked_partial(X, params)`` (the kernel of a GM-PR E-step on unlinked rows;
  at 8-D its components overlap and these float32 rows take the float32 E-step),
- ``gmpr_f64``: the same on the block's values as float64 rows (the float64 E-step),

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
from _common import HERE, interleaved, machine_info, print_interleaved, write_json  # noqa: E402
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
    X64 = X.astype(np.float64)
    fns = {"kmeans": (lambda _: distances.block_stats(X, C), lambda: None),
           "gmpr": (lambda _: unlinked_partial(X, params), lambda: None),
           "gmpr_f64": (lambda _: unlinked_partial(X64, params), lambda: None)}
    return interleaved(fns, args.repeats, args.n, ("gmpr", "kmeans"))


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    print(f"GM-PR diag E-step kernel vs KMeans kernel: one block of {args.n:,} x {args.d} float32, K = {args.k}, "
          f"{args.repeats} interleaved rounds (one thread)")
    res = run(args)
    print_interleaved(res, ("kmeans", "gmpr", "gmpr_f64"), "GM-PR / KMeans")
    res["cpu_ratio_f64"] = res["best_cpu"]["gmpr_f64"] / res["best_cpu"]["kmeans"]
    print(f"GM-PR on float64 rows / KMeans: {res['cpu_ratio_f64']:.2f}x CPU")
    out = {"args": vars(args), "machine": machine_info(), **res,
           "method": "one block, both kernels on one thread (BLAS limited to one by the kernels), interleaved "
                     "rounds; per kernel the minimum over the rounds of thread CPU and of wall seconds; "
                     "ratio = GM-PR / KMeans (cpu_ratio_f64: GM-PR on float64 rows / KMeans)",
           "total_seconds": time.perf_counter() - t0}
    print(f"\nwrote {write_json(out, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
