"""GM-PR's diagonal E-step kernel against KMeans' Lloyd kernel on the same block: one thread, no Dask (issue 14).

One block of the benchmark data (``dclust.make_blobs(cluster_std=3)``, float32, default 500,000 x 8 and 16
overlapping blobs, as one chunk of ``bench_engine.py``) and the diagonal GM-PR parameters reached after
``--fit-iters`` EM iterations on other rows of the same data. Timed interleaved ``--repeats`` times, each the
thread's CPU seconds (``time.thread_time``: on a shared machine the time spent waiting for a core does not count),
the minimum kept:

- ``dclust.kernels.distances.block_stats(X, C)``: KMeans' pass on one block, ``C`` the GM-PR means;
- ``dclust.kernels.gmpr.unlinked_partial(X, params)``: GM-PR's E-step of the block's rows (no links).

The ratio GM-PR / KMeans is what an iteration's per-block kernel costs; a whole iteration adds the read and the
graph to both. Run: ``python benchmarks/bench_gmpr_kernel.py`` (about a minute); the JSON goes to
``benchmarks/results/bench_gmpr_kernel.json``. The script imports dclust from the checkout it lives in: to compare
two versions, run each checkout's copy.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, machine_info, print_table, write_json  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-rows", type=int, default=500_000, help="rows of the block (default 500,000)")
    p.add_argument("--d", type=int, default=8, help="features (default 8)")
    p.add_argument("--k", type=int, default=16, help="GM-PR classes and KMeans clusters (default 16)")
    p.add_argument("--fit-iters", type=int, default=3, help="EM iterations before the timing (default 3)")
    p.add_argument("--repeats", type=int, default=15, help="interleaved rounds, the fastest kept (default 15)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "bench_gmpr_kernel.json"))
    return p.parse_args(argv)


def block_and_params(args):
    """The timed block and GM-PR's parameters after ``fit_iters`` iterations on the next rows."""
    import dclust
    from dclust.kernels.gmpr import MixtureParams

    n = args.n_rows
    b = dclust.make_blobs(n + max(n // 2, 1000), args.d, centers=16, cluster_std=3.0, chunk_rows=n,
                          dtype="float32", random_state=args.seed)
    X = np.ascontiguousarray(b.X[:n].compute())
    est = dclust.GMPR(n_classes=args.k, covariance_type="diag", max_iter=args.fit_iters, tol=0,
                      random_state=args.seed, persist=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged after a few iterations, by design
        est.fit(b.X[n:])
    return X, MixtureParams.build(est.weights_, est.sub_weights_, est.means_, est.covariances_)


def main(argv=None) -> dict:
    args = parse_args(argv)
    from dclust.kernels.distances import block_stats
    from dclust.kernels.gmpr import unlinked_partial

    X, params = block_and_params(args)
    C = params.means.reshape(-1, X.shape[1])
    runs = {"kmeans": lambda: block_stats(X, C), "gmpr": lambda: unlinked_partial(X, params)}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for fn in runs.values():
        fn()  # compiled or loaded from numba's cache before any timing
    for _ in range(args.repeats):
        for name, fn in runs.items():
            t = time.thread_time()
            fn()
            seconds[name].append(time.thread_time() - t)
    best = {name: min(v) for name, v in seconds.items()}
    ratio = best["gmpr"] / best["kmeans"]
    print_table([["KMeans block_stats", f"{best['kmeans'] * 1e3:.1f} ms", "1.00x"],
                 ["GM-PR unlinked_partial (diag)", f"{best['gmpr'] * 1e3:.1f} ms", f"{ratio:.2f}x"]],
                ["kernel", "thread CPU (min)", "x KMeans"],
                title=f"one {X.shape[0]:,} x {X.shape[1]} float32 block, K = {args.k}, {args.repeats} interleaved rounds")
    res = {"args": vars(args), "machine": machine_info(), "best_seconds": best, "ratio_gmpr_to_kmeans": ratio,
           "seconds": seconds}
    write_json(res, args.out)
    print(f"wrote {args.out}")
    return res


if __name__ == "__main__":
    main()
