"""Track moving, dying and newborn Gaussian clusters with D-Means ([DM] 8.1; docs/algorithms.md 10.2).

Prints, every few steps, the tracking accuracy so far (persistent ids matched consistently over time) and the
cluster-count error |K_learned - K_true|, for the chosen generator process.

    python examples/moving_gaussians.py --steps 100 --process paper-code
    python examples/moving_gaussians.py --steps 100 --process per-axis --clusters 5
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dclust.datasets import moving_gaussians
from dclust.metrics import tracking_accuracy
from dclust.stream import DynamicMeans


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, received {text}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=positive_int, default=100)
    p.add_argument("--clusters", type=positive_int, default=5, help="live clusters (per-axis process)")
    p.add_argument("--points", type=positive_int, default=15, help="points per cluster per step")
    p.add_argument("--process", choices=["paper-code", "per-axis"], default="paper-code")
    p.add_argument("--lam", type=float, default=0.04)
    p.add_argument("--T-Q", dest="T_Q", type=float, default=6.8)
    p.add_argument("--k-tau", dest="k_tau", type=float, default=1.01)
    p.add_argument("--restarts", type=positive_int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--every", type=positive_int, default=10, help="print a line every this many steps")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    data = moving_gaussians(args.steps, args.clusters, args.points, process=args.process, random_state=args.seed)
    dm = DynamicMeans(lam=args.lam, T_Q=args.T_Q, k_tau=args.k_tau, n_restarts=args.restarts,
                      random_state=args.seed)
    preds, count_err = [], []
    t0 = time.perf_counter()
    print(f"{'step':>5} {'K true':>6} {'K':>4} {'births':>6} {'deaths':>6} {'revived':>7} {'tracking acc':>12}")
    for t, X in enumerate(data.batches):
        preds.append(dm.partial_fit(X).labels_)
        k_true = len(np.unique(data.labels[t]))
        count_err.append(abs(dm.history_["n_clusters"][-1] - k_true))
        if (t + 1) % args.every == 0 or t + 1 == args.steps:
            acc = tracking_accuracy(zip(data.labels[: t + 1], preds))
            h = dm.history_
            print(f"{t + 1:>5} {k_true:>6} {h['n_clusters'][-1]:>4} {sum(h['births']):>6} {sum(h['deaths']):>6} "
                  f"{sum(h['revivals']):>7} {acc:>12.3f}")
    seconds = time.perf_counter() - t0
    out = {
        "tracking_accuracy": tracking_accuracy(zip(data.labels, preds)),
        "untracked_accuracy": tracking_accuracy(zip(data.labels, preds), tracked=False),
        "mean_cluster_count_error": float(np.mean(count_err)),
        "seconds_per_step": seconds / args.steps,
    }
    print(f"tracking accuracy {out['tracking_accuracy']:.3f} (untracked {out['untracked_accuracy']:.3f}); "
          f"mean |K - K_true| {out['mean_cluster_count_error']:.2f}; {1e3 * out['seconds_per_step']:.2f} ms/step")
    return out


def main(argv=None) -> dict:
    return run(parse_args(argv))


if __name__ == "__main__":
    main()
