"""k-means on a Zarr store, out of core: store -> dclust.KMeans -> labels in Zarr -> metrics.

The points never have to fit in memory: every pass of the fit reads the store chunk by chunk, the labels are
streamed back to a new Zarr store, and the scores are tree-reduced from the label stores.

Usage::

    python examples/kmeans_zarr.py --out kmeans-example                 # 1,000,000 x 8, K = 16
    python examples/kmeans_zarr.py --out kmeans-example --n 20000       # toy size
    python examples/kmeans_zarr.py --out k-example --scheduler tcp://host:8786  # on a running Dask cluster
    python examples/kmeans_zarr.py --out k-example --scheduler local            # on a new local cluster

Without ``--scheduler`` dclust computes on Dask's default (threaded) scheduler. The outputs under ``--out``
(points.zarr, truth.zarr, labels.zarr, model.zarr) are replaced on every run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="kmeans-example", help="Output directory (default: %(default)s).")
    p.add_argument("--n", type=int, default=1_000_000, help="Number of points (default: %(default)s).")
    p.add_argument("--d", type=int, default=8, help="Number of features (default: %(default)s).")
    p.add_argument("--k", type=int, default=16, help="Number of blobs and of clusters (default: %(default)s).")
    p.add_argument("--chunk-rows", type=int, default=250_000, help="Rows per Zarr chunk (default: %(default)s).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the data and of the fit (default: %(default)s).")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="A running Dask scheduler (tcp://host:8786), or 'local' to start a LocalCluster. "
                        "Default: Dask's threaded scheduler.")
    args = p.parse_args(argv)
    for name in ("n", "d", "k", "chunk_rows"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.k > args.n:
        p.error("--k must be <= --n")
    return args


@contextlib.contextmanager
def dask_client(scheduler: str | None):
    """A distributed Client for the block (``None``: no client, Dask's default scheduler)."""
    if scheduler is None:
        yield None
        return
    from distributed import Client, LocalCluster

    if scheduler == "local":
        with LocalCluster(threads_per_worker=1, processes=True) as cluster, Client(cluster) as client:
            yield client
    else:
        with Client(scheduler) as client:
            yield client


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import dclust

    os.makedirs(args.out, exist_ok=True)
    points, truth, labels, model = (os.path.join(args.out, f"{name}.zarr")
                                    for name in ("points", "truth", "labels", "model"))

    with dask_client(args.scheduler) as client:
        if client is not None:
            print(f"Dask cluster: {client.scheduler.address}; dashboard: {client.dashboard_link}")

        # A Zarr store to cluster: Gaussian blobs generated chunk by chunk, with the true blob of every point.
        blobs = dclust.make_blobs(args.n, args.d, args.k, chunk_rows=args.chunk_rows, random_state=args.seed)
        dclust.write_array(blobs.X, points, overwrite=True)
        dclust.write_labels(blobs.labels, truth, overwrite=True)

        # Store -> KMeans: open_array reads metadata only; fit streams the chunks on every pass.
        X = dclust.open_array(points)
        print(f"X: {X.shape[0]:,} x {X.shape[1]} {X.dtype}, {X.numblocks[0]} row chunks, from {points}")
        t = time.perf_counter()
        km = dclust.KMeans(n_clusters=args.k, random_state=args.seed).fit(X)
        fit_seconds = time.perf_counter() - t

        # Labels -> Zarr: predict is lazy; write_labels streams it chunk by chunk (atomically).
        dclust.write_labels(km.predict(X), labels, overwrite=True)
        dclust.save(km, model, overwrite=True)

        # Metrics: computed from the two label stores with a tree reduction (never N labels on the driver).
        y_true, y_pred = dclust.open_array(truth), dclust.open_array(labels)
        ari = dclust.metrics.adjusted_rand_score(y_true, y_pred)
        nmi = dclust.metrics.normalized_mutual_info_score(y_true, y_pred)
        acc = dclust.metrics.matched_accuracy(y_true, y_pred)

    print(f"KMeans(n_clusters={args.k}): {km.n_iter_} iterations in {fit_seconds:.2f}s, inertia {km.inertia_:.6g}")
    print(f"objective per iteration: {', '.join(f'{v:.6g}' for v in km.objective_history_)}")
    print(f"labels: {labels}   model: {model}")
    print(f"adjusted Rand index {ari:.4f}   NMI {nmi:.4f}   matched accuracy {acc:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
