"""Benchmark: the [TV] UCI side-information protocol (ALGORITHMS.md 10.3), every method with links.

Runs ``examples/uci_side_information.py``'s grid (iris, wine, breast cancer; r in {0.01, 0.03, 0.05}; p in {1,
0.95, 0.9, 0.8}; 10 seeds; RDP-means, DP-means, GM-PR, COP-style k-means, TVClust; standardised features, lam by
the k-th furthest-first heuristic with the true k) and writes every cell (mean and std over the seeds of pairwise F,
ARI, NMI, and the seconds) to ``benchmarks/results/bench_uci.json`` with the summary table.

Targets (issue 5): RDP-means at r = 0.05, p = 1 matches or beats the paper's RDP-means figures (iris .86/.80/.80,
wine .81/.73/.72, [TV] Table 1); RDP-means beats DP-means without links on every dataset.

Run: ``.venv/bin/python benchmarks/bench_uci.py`` (full grid); ``--quick``: iris and wine, r = 0.05, p in {1, 0.8},
2 seeds (under a minute).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
from _common import machine_info, write_json  # noqa: E402
from uci_side_information import METHODS, PAPER_RDP, TARGET, run_grid, summarise, table  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="iris and wine, r=0.05, p in {1, 0.8}, 2 seeds")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--tv-sweeps", type=int, default=50)
    p.add_argument("--raw", action="store_true", help="raw features instead of z-scores")
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_uci.json")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.quick:
        grid = dict(datasets=["iris", "wine"], rs=[0.05], ps=[1.0, 0.8], seeds=range(2), tv_sweeps=20)
    else:
        grid = dict(datasets=["iris", "wine", "breast_cancer"], rs=[0.01, 0.03, 0.05], ps=[1.0, 0.95, 0.9, 0.8],
                    seeds=range(args.seeds), tv_sweeps=args.tv_sweeps)
    t0 = time.perf_counter()
    rows = run_grid(grid["datasets"], grid["rs"], grid["ps"], grid["seeds"], METHODS, args.raw, grid["tv_sweeps"],
                    log=lambda s: print(s, flush=True))
    summary = summarise(rows)
    text = table(rows, summary)
    print(text)
    res = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "grid": {k: (list(v) if isinstance(v, range) else v) for k, v in grid.items()},
        "features": "raw" if args.raw else "standardised (z-scores)",
        "lam": "k-th furthest-first heuristic with the true k (the paper's rule); DP-means uses the same lam",
        "target_cell": list(TARGET), "paper_rdp_means": PAPER_RDP, "methods": list(METHODS),
        "machine": machine_info(), "rows": rows, "summary": summary, "report": text,
        "total_seconds": time.perf_counter() - t0,
    }
    path = write_json(res, args.out)
    print(f"\nwrote {path} (total {res['total_seconds']:.0f} s)")
    return res


if __name__ == "__main__":
    main()
