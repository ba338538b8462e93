"""The dclust demo (``make demo``): DP-means and k-means on 2,000,000 points, out of core, on a local Dask cluster.

1. generates N x D float32 points from K Gaussian blobs into a Zarr store (plus the true blob of every point),
2. starts a ``distributed.LocalCluster`` with one single-threaded worker process per core,
3. fits ``DPMeans(n_clusters=K)`` (lam from the furthest-first heuristic) and ``KMeans(n_clusters=K)`` on the store,
4. writes both labelings to Zarr, scores them against the truth (adjusted Rand index, streamed),
5. saves ``demo.png``: the first two coordinates of ~50k points coloured by cluster, and the objective per
   iteration of both models,
6. prints a summary table.

Usage::

    python examples/demo.py --out demo-output            # the full demo (2,000,000 x 8, K = 16)
    python examples/demo.py --out demo-quick --n 20000    # a quick run

Every output under ``--out`` is replaced on each run. The ``if __name__ == "__main__":`` guard is required: the
cluster's worker processes re-import this file.
"""

from __future__ import annotations

import argparse
import os
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default="demo-output", help="Directory for the stores and the PNG (default: %(default)s).")
    p.add_argument("--n", type=int, default=2_000_000, help="Number of points (default: %(default)s).")
    p.add_argument("--d", type=int, default=8, help="Number of features (default: %(default)s).")
    p.add_argument("--k", type=int, default=16, help="Number of blobs and target clusters (default: %(default)s).")
    p.add_argument("--chunk-rows", type=int, default=250_000, help="Rows per Zarr chunk (default: %(default)s).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the data and of both fits (default: %(default)s).")
    p.add_argument("--workers", type=int, default=None, help="Worker processes (default: one per core).")
    p.add_argument("--plot-points", type=int, default=50_000,
                   help="Points in the scatter plots (default: %(default)s).")
    args = p.parse_args(argv)
    for name in ("n", "d", "k", "chunk_rows", "plot_points"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.k > args.n:
        p.error("--k must be <= --n")
    return args


def subsample(X, labels: dict, m: int):
    """Every ``step``-th row of ``X`` and of each labeling (about ``m`` rows), computed together in one pass."""
    import dask

    step = max(1, X.shape[0] // m)
    return dask.compute(X[::step, :2], {name: y[::step] for name, y in labels.items()})


def plot(path: str, xy, labels: dict, histories: dict, k: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    fig, axes = plt.subplots(1, len(labels) + 1, figsize=(6 * (len(labels) + 1), 5.2))
    cmap = plt.get_cmap("tab20")
    for ax, (name, y) in zip(axes, labels.items()):
        n_found = int(np.unique(y).size)
        ax.scatter(xy[:, 0], xy[:, 1], c=cmap(np.asarray(y) % 20), s=1.5, alpha=0.7, linewidths=0, rasterized=True)
        ax.set_title(f"{name}: {n_found} clusters ({xy.shape[0]:,} of the points)")
        ax.set_xlabel("x[0]")
        ax.set_ylabel("x[1]")
    ax = axes[-1]
    for name, history in histories.items():
        it = np.arange(1, len(history) + 1)
        ax.plot(it, history, marker="o", label=name)
    ax.set_title("objective per iteration")
    ax.set_xlabel("iteration")
    ax.set_ylabel("objective (SSE, + lam*K for DP-means)")
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.suptitle(f"dclust demo: K = {k} blobs")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    from distributed import Client, LocalCluster
    from rich.console import Console
    from rich.table import Table

    import dclust

    console = Console(highlight=False, soft_wrap=True)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    paths = {name: os.path.join(out, f"{name}.zarr")
             for name in ("points", "truth", "labels-dpmeans", "labels-kmeans", "model-dpmeans", "model-kmeans")}
    png = os.path.join(out, "demo.png")
    t_start = time.perf_counter()

    workers = args.workers or os.cpu_count() or 1
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True) as cluster, Client(cluster) as client:
        console.print(f"local Dask cluster: {workers} worker(s) x 1 thread; dashboard: {client.dashboard_link}")

        # 1. data: generated chunk by chunk on the workers, streamed into Zarr
        t = time.perf_counter()
        blobs = dclust.make_blobs(args.n, args.d, args.k, chunk_rows=args.chunk_rows, random_state=args.seed)
        dclust.write_array(blobs.X, paths["points"], overwrite=True)
        dclust.write_labels(blobs.labels, paths["truth"], overwrite=True)
        console.print(f"generated {args.n:,} x {args.d} float32 points from {args.k} blobs into {paths['points']} "
                      f"in {time.perf_counter() - t:.1f}s")

        X = dclust.open_array(paths["points"])
        truth = dclust.open_array(paths["truth"])

        # 2. fit both models on the store
        models = {
            "DPMeans": dclust.DPMeans(n_clusters=args.k, random_state=args.seed),
            "KMeans": dclust.KMeans(n_clusters=args.k, random_state=args.seed),
        }
        rows, labels, histories = [], {}, {}
        for name, model in models.items():
            key = name.lower()
            t = time.perf_counter()

            with console.status(f"{name}: initialising") as status:

                def show(event, name=name, status=status):
                    if event.phase == "iter":
                        status.update(f"{name}: iteration {event.iteration}, objective {event.objective:.6g}, "
                                      f"K {event.n_clusters}, {event.seconds:.2f}s/iter")

                with dclust.on_progress(show):
                    model.fit(X)
            fit_seconds = time.perf_counter() - t
            dclust.write_labels(model.predict(X), paths[f"labels-{key}"], overwrite=True)
            dclust.save(model, paths[f"model-{key}"], overwrite=True)
            y = dclust.open_array(paths[f"labels-{key}"])
            ari = dclust.metrics.adjusted_rand_score(truth, y)
            k_found = int(model.cluster_centers_.shape[0])
            extra = f", lam = {model.lam_:.4g}" if hasattr(model, "lam_") else ""
            console.print(f"{name}: K = {k_found}{extra}, {model.n_iter_} iterations, fit in {fit_seconds:.1f}s; "
                          f"labels in {paths[f'labels-{key}']}")
            rows.append((name, k_found, float(model.objective_history_[-1]), ari, int(model.n_iter_), fit_seconds))
            labels[name] = y
            histories[name] = list(model.objective_history_)

        # 3. picture: a strided subsample of ~plot_points rows
        t = time.perf_counter()
        xy, sub = subsample(X, labels, args.plot_points)
        plot(png, xy, sub, histories, args.k)
        console.print(f"saved {png} in {time.perf_counter() - t:.1f}s")

    table = Table(title=f"dclust demo: {args.n:,} x {args.d} points, {args.k} blobs, {workers} worker(s)")
    for col in ("model", "K", "objective", "ARI vs truth", "iterations", "seconds"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for name, k_found, objective, ari, n_iter, seconds in rows:
        table.add_row(name, str(k_found), f"{objective:.6g}", f"{ari:.4f}", str(n_iter), f"{seconds:.1f}")
    console.print(table)
    console.print(f"outputs in {out}; total {time.perf_counter() - t_start:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
