"""BP-means' block kernel against DP-means' block kernel on the same block, in the state of a fit (one thread;
issue 14).

The kernels alone, without Dask, reads or graphs, on the ``bench_engine.py`` data (``dclust.make_blobs(--n, 8,
centers=16, cluster_std=3, chunk_rows=500,000, float32)``, default 10,000,000 x 8, ``lam = 662.1``): BPMeans and
DPMeans are first fitted on all of it for ``--fit-iters`` passes (in this process, Dask's threads), so that the
timed block sees what a pass of the benchmark sees: the fitted features ``A`` (K = 11 at the default size) and the
block's bits ``Z`` as the next pass gets them (with their pattern keys, as the OCC engine passes them on), and
DP-means' fitted centres. Then, interleaved ``--repeats`` times, on block ``--block`` (500,000 rows):

- ``dp``: ``dclust.kernels.distances.epoch_stats`` over the whole key range (the kernel of a DP-means pass),
- ``bp``: ``dclust.kernels.bpmeans.bp_block`` over the whole key range (the kernel of a BP-means pass; a fresh
  copy of ``Z`` each round, made outside the timing, swept in place as the engine does),

each timed in thread CPU seconds and wall seconds, the minimum over the rounds kept; the ratio is BP's over DP's.
The block's bits changed, proposals and the fitted K are printed (a pass of the benchmark changes about 8 % of the
bits at the default size).

Run: ``python benchmarks/bench_bp_block.py`` (about two minutes on 2 cores, 0.5 GB); JSON to
``benchmarks/results/bench_bp_block.json``. To compare two versions, run each checkout's copy of the script
(``_common.py`` puts its own checkout first on ``sys.path``).
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

_CHUNK = 500_000


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000_000, help="rows of the fitted data (default 10,000,000)")
    p.add_argument("--lam", type=float, default=662.1, help="penalty of both fits (default 662.1, bench_engine's)")
    p.add_argument("--fit-iters", type=int, default=7, help="passes of both fits before the timing (default 7)")
    p.add_argument("--block", type=int, default=0, help="index of the timed 500,000-row block (default 0)")
    p.add_argument("--repeats", type=int, default=9, help="interleaved rounds, the fastest kept (default 9)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(HERE / "results" / "bench_bp_block.json"))
    return p.parse_args(argv)


def setup(args):
    """The timed block (float32, C order), BP-means' features and the block's bits, DP-means' centres."""
    import dask

    import dclust

    b = dclust.make_blobs(args.n, 8, centers=16, cluster_std=3.0, chunk_rows=_CHUNK, dtype="float32",
                          random_state=args.seed)
    with dask.config.set(scheduler="threads"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning at max_iter is expected
        X = b.X.persist()
        bp = dclust.BPMeans(lam=args.lam, n_init=1, max_iter=args.fit_iters, persist=False,
                            random_state=args.seed).fit(X)
        dp = dclust.DPMeans(lam=args.lam, max_iter=args.fit_iters, persist=False, random_state=args.seed).fit(X)
        rows = slice(args.block * _CHUNK, (args.block + 1) * _CHUNK)
        Xb = np.ascontiguousarray(X[rows].compute())
        Z = np.ascontiguousarray(bp.allocation_[rows].compute(), dtype=np.uint8)
    return Xb, np.asarray(bp.features_), Z, np.asarray(dp.cluster_centers_)


def run(args) -> dict:
    from dclust.kernels.bpmeans import _row_keys, bp_block
    from dclust.kernels.distances import epoch_stats, seed_mix

    Xb, A, Z, C = setup(args)
    whole = {"offset": args.block * _CHUNK, "mix": seed_mix(args.seed), "lo": 0, "hi": 2**64 - 1}
    keys = _row_keys(Z) if A.shape[0] <= 16 else None
    state = {}

    def bp(Zc):
        state["bp"] = bp_block(Xb, Zc, features=A, lam=args.lam, copy=False, keys=keys, **whole)

    def dp(_):
        epoch_stats(Xb, C, args.lam, None, block_index=args.block, **whole)

    out = interleaved({"dp": (dp, lambda: None), "bp": (bp, Z.copy)}, args.repeats, Xb.shape[0], ("bp", "dp"))
    res = state["bp"]
    return {"n_features": int(A.shape[0]), "n_centers": int(C.shape[0]), "bits_changed": res.flips,
            "rows_changed": int((res.Z != Z).any(axis=1).sum()), "proposals": int(res.local.size), **out}


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    print(f"BP-means block kernel vs DP-means block kernel: {args.n:,} x 8 float32 fitted {args.fit_iters} passes, "
          f"block {args.block} ({_CHUNK:,} rows), {args.repeats} interleaved rounds (one thread)")
    res = run(args)
    print(f"K = {res['n_features']} features, {res['n_centers']} centres; the block's pass changes "
          f"{res['bits_changed']:,} bits in {res['rows_changed']:,} rows, {res['proposals']} proposals")
    print_interleaved(res, ("dp", "bp"), "BP / DP")
    out = {"args": vars(args), "machine": machine_info(), **res,
           "method": "one block in the state of a fit, both kernels on one thread (BLAS limited to one by the "
                     "kernels), interleaved rounds; per kernel the minimum over the rounds of thread CPU and of wall "
                     "seconds; ratio = BP / DP", "total_seconds": time.perf_counter() - t0}
    print(f"\nwrote {write_json(out, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
