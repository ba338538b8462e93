"""The terabyte case simulated: passes over arrays of 10^3 to 10^5 chunks whose rows are generated inside the tasks.

Used by ``bench_scale.py`` (section (e)). A store of many chunks costs disk and time to write; what grows with the
chunk count is scheduling, not arithmetic, so the rows here come from :class:`SyntheticRows`, an array-like whose
``__getitem__`` draws the requested rows from a counter-based generator keyed by the first row (the same rows for
the same index, whatever the chunking, on any worker). ``dask.array.from_array`` turns it into the same getter
tasks a Zarr store gives, so dclust's pass engine groups its chunks exactly as it groups a store's.

Measured on a real ``dask scheduler`` + ``dask worker`` processes on 127.0.0.1, for each chunk count:

- seconds of one plain Dask pass ``X.sum(0).compute()`` (one task per chunk plus Dask's tree reduction);
- seconds per KMeans iteration (marginal: ``t(max_iter=m2) - t(max_iter=m1)``, fixed init, ``tol=0``), the same model
  with and without task grouping (``dclust.pass-grouping``);
- bytes of the graph of one dclust pass and of the plain Dask pass (cloudpickle of the low-level graph), and whether
  the client warned about a large graph;
- passes of KMeans' initialisation (distinct dclust pass names in the scheduler's task stream before the first
  Lloyd pass), for ``init="k-means||"`` (the default);
- CPU seconds of the scheduler process per pass.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

K = 16
D = 8


class SyntheticRows:
    """An (n, d) float32 array-like whose rows are drawn on demand: K Gaussian blobs, deterministic per row.

    Row ``i`` depends on ``(seed, i)`` only: a slice ``[a:b]`` draws rows a..b-1 from a Philox generator whose
    counter starts at ``a`` (so two overlapping slices agree only when they start at the same row; dclust and Dask
    always read whole chunks, so every pass sees the same data).
    """

    def __init__(self, n: int, d: int = D, k: int = K, seed: int = 0):
        self.shape = (int(n), int(d))
        self.dtype = np.dtype(np.float32)
        self.ndim = 2
        self.seed = int(seed)
        self.centers = np.random.default_rng(seed).normal(scale=10.0, size=(k, d)).astype(np.float32)

    def __getitem__(self, index: Any) -> np.ndarray:
        rows = index[0] if isinstance(index, tuple) else index
        start, stop, step = rows.indices(self.shape[0])
        rng = np.random.Generator(np.random.Philox(key=self.seed, counter=start))
        m = max(0, stop - start)
        labels = rng.integers(0, len(self.centers), size=m)
        out = self.centers[labels] + rng.standard_normal((m, self.shape[1]), dtype=np.float32)
        cols = index[1] if isinstance(index, tuple) and len(index) > 1 else slice(None)
        return out[::step, cols]


def synthetic_array(n_chunks: int, chunk_rows: int, seed: int = 0):
    import dask.array as da

    src = SyntheticRows(n_chunks * chunk_rows, seed=seed)
    return da.from_array(src, chunks=(chunk_rows, D), asarray=True, lock=False, name=f"synthetic-{n_chunks}-{seed}")


def graph_bytes(collection) -> int:
    """Bytes of the cloudpickled low-level graph of a dask collection (what the client ships per pass)."""
    import cloudpickle

    import dask

    (optimized,) = dask.optimize(collection)  # what compute() ships: culled to the keys it needs
    return len(cloudpickle.dumps(dict(optimized.__dask_graph__())))


def dclust_pass_graph_bytes(X) -> int:
    """Bytes of the graph of one dclust KMeans pass over ``X`` (the pass engine's tasks and its tree reduction)."""
    from dclust._dask.init import _stats_partial
    from dclust._dask.passes import map_reduce
    from dclust.kernels.stats import ClusterStats

    return graph_bytes(map_reduce(_stats_partial, ClusterStats.merge_all, X, None, centers=np.zeros((K, D))))


def scheduler_cpu(client) -> float:
    """CPU seconds (user + system) of the scheduler process so far."""

    def cpu(dask_scheduler=None) -> float:
        import psutil

        t = psutil.Process().cpu_times()
        return float(t.user + t.system)

    return float(client.run_on_scheduler(cpu))


def count_pass_names(records) -> int:
    names = set()
    for rec in records:
        key = rec["key"]
        name = key[0] if isinstance(key, tuple) else str(key)
        if name.startswith("dclust-pass-") or name.startswith("dclust-partials-"):
            names.add(name)
    return len(names)


def kmeans_fit(X, init, max_iter: int) -> tuple[Any, float]:
    import dclust

    t0 = time.perf_counter()
    km = dclust.KMeans(n_clusters=K, init=init, max_iter=max_iter, tol=0.0, persist=False).fit(X)
    return km, time.perf_counter() - t0


def simulate(client, n_chunks_list, chunk_rows: int, *, sum_max_chunks: int, ungrouped_max_chunks: int,
             iters: tuple[int, int] = (2, 4), log=print) -> list[dict]:
    """One row per chunk count (see the module docstring)."""
    import dask
    from distributed import get_task_stream

    rows = []
    for n_chunks in n_chunks_list:
        X = synthetic_array(n_chunks, chunk_rows)
        init = np.asarray(X[: K * 7 : 7].compute(), dtype=np.float64)
        row: dict = {"n_chunks": n_chunks, "chunk_rows": chunk_rows, "n_rows": n_chunks * chunk_rows}
        # warm-up: numba kernels compiled on every worker
        kmeans_fit(X[: 4 * chunk_rows], init, 1)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cpu0 = scheduler_cpu(client)
            km1, t1 = kmeans_fit(X, init, iters[0])
            km2, t2 = kmeans_fit(X, init, iters[1])
            cpu1 = scheduler_cpu(client)
        assert km2.n_iter_ == iters[1], km2.n_iter_
        per_iter = (t2 - t1) / (iters[1] - iters[0])
        row["kmeans_s_per_iter"] = per_iter
        row["kmeans_per_chunk_ms"] = 1e3 * per_iter / n_chunks
        row["scheduler_cpu_s_per_pass"] = (cpu1 - cpu0) / (iters[0] + iters[1] + 2)  # + the inertia passes
        row["large_graph_warnings"] = sum("large graph" in str(w.message).lower() for w in caught)
        row["dclust_pass_graph_bytes"] = dclust_pass_graph_bytes(X)

        with dask.config.set({"dclust.pass-grouping": False}):
            if n_chunks <= ungrouped_max_chunks:
                km3, t3 = kmeans_fit(X, init, iters[0])
                km4, t4 = kmeans_fit(X, init, iters[1])
                row["ungrouped_kmeans_s_per_iter"] = (t4 - t3) / (iters[1] - iters[0])
                row["same_model_ungrouped"] = bool(np.allclose(km4.cluster_centers_, km2.cluster_centers_,
                                                               rtol=1e-10, atol=0))
            else:
                row["ungrouped_kmeans_s_per_iter"] = None
                row["same_model_ungrouped"] = None

        if n_chunks <= sum_max_chunks:
            row["dask_sum_graph_bytes"] = graph_bytes(X.sum(0))
            t = time.perf_counter()
            X.sum(0).compute()
            row["dask_sum_s"] = time.perf_counter() - t
            row["ratio_kmeans_to_sum"] = per_iter / row["dask_sum_s"]
        else:
            row["dask_sum_graph_bytes"] = None
            row["dask_sum_s"] = None
            row["ratio_kmeans_to_sum"] = None

        import dclust

        with get_task_stream(client) as ts:
            dclust.KMeans(n_clusters=K, max_iter=1, tol=0.0, persist=False, random_state=0).fit(X)
        # the fit's passes: init passes + 1 Lloyd pass + the inertia pass of the final centres
        row["init_passes_kmeans||"] = count_pass_names(ts.data) - 2
        rows.append(row)
        log(f"  {n_chunks:>7,} chunks: KMeans {per_iter:.3f} s/iter ({row['kmeans_per_chunk_ms']:.3f} ms/chunk), "
            f"X.sum {row['dask_sum_s'] if row['dask_sum_s'] is not None else float('nan'):.3f} s, "
            f"graph {row['dclust_pass_graph_bytes']:,} B, init {row['init_passes_kmeans||']} passes, "
            f"scheduler {row['scheduler_cpu_s_per_pass']:.3f} CPU s/pass")
    return rows
