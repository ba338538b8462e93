"""One KMeans iteration of dclust against the machine's read + compute floor, interleaved in one run.

On float32 Gaussian blobs (``dclust.make_blobs``, default ``10,000,000 x 8``, ``K = 16``) written by
``dclust.write_array`` as it writes floating-point data (no compression, a CRC-32C checksum per chunk;
``--chunk-rows`` rows per chunk), every repeat measures, one after the other (A, B, C, ... A, B, C, ...):

- ``read``: a plain Zarr read of every chunk of the store with 2 threads (``zarr.open_array(path)[a:b]`` in a
  ``ThreadPoolExecutor``; no Dask);
- ``sklearn``: scikit-learn's ``KMeans(algorithm="lloyd", init=C0, n_init=1, tol=0)`` on the data in memory;
- dclust ``KMeans(init=C0, n_init=1, tol=0)`` over the store, reading it every pass (``persist=False``) on
  Dask's threaded scheduler (``threads``) and on a ``LocalCluster`` of 2 single-threaded worker processes
  (``processes``), and with the data persisted in the workers' memory of that cluster (``persisted``).

A fit's cost per iteration is marginal: ``(t(max_iter=hi) - t(max_iter=lo)) / (hi - lo)`` with the fastest of
``--repeats`` runs of each (``n_iter_`` is checked to equal ``max_iter``; the init ``C0`` is chosen so that Lloyd
does not converge first), so start-up, seeding, persisting and the final inertia pass cancel out. The floor is
``read + sklearn``: on a 2-core machine both use both cores, so their sum is the CPU floor of a pass that reads
every chunk. The ratios are ``threads / floor``, ``processes / floor`` (targets <= 1.3) and
``persisted / sklearn`` (target <= 1.5). Besides, the CPU time (``time.thread_time``, immune to other load) of
dclust's kernel (``block_stats``) and of scikit-learn's single-threaded Lloyd iteration
(``lloyd_iter_chunked_dense``) on the same one chunk of rows, and the CPU seconds per iteration of every row
above (marginal in the same way; user + system time of this process and all its descendants, so the worker
processes count): on a machine shared with other work these ratios hold where wall-clock ratios do not (a pass
whose threads wait on each other shows only in the wall-clock figures).

Run: ``python benchmarks/bench_pass_floor.py`` (a few minutes on 2 cores; ``--quick``: 1,000,000 rows in
125,000-row chunks). Writes ``benchmarks/results/bench_pass_floor.json``; the load average of the machine at the
start and end is recorded with the figures (ratios from a loaded machine are noisy).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    HERE, add_int_options, fmt_ratio, fmt_s, machine_info, median, print_table, timed, write_json, zarr_read,
)
from bench_kmeans import _warm_worker, choose_init, sklearn_fit  # noqa: E402

TARGETS = {"threads": 1.3, "processes": 1.3, "persisted": 1.5}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_int_options(p, n=10_000_000, d=8, k=16, chunk_rows=500_000)
    p.add_argument("--centers", type=int, default=16, help="blobs in the data")
    p.add_argument("--cluster-std", type=float, default=3.0)
    p.add_argument("--iter-hi", type=int, default=7)
    p.add_argument("--iter-lo", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="keep (and reuse) the store here instead of a temp dir")
    p.add_argument("--out", default=str(HERE / "results" / "bench_pass_floor.json"))
    p.add_argument("--quick", action="store_true", help="1,000,000 rows in 125,000-row chunks")
    args = p.parse_args(argv)
    if args.quick:
        args.n, args.chunk_rows = 1_000_000, 125_000
    if min(args.n, args.d, args.k, args.chunk_rows, args.centers, args.repeats, args.iter_lo) < 1:
        p.error("--n, --d, --k, --chunk-rows, --centers, --repeats and --iter-lo must be positive")
    if args.iter_hi <= args.iter_lo:
        p.error(f"--iter-hi ({args.iter_hi}) must exceed --iter-lo ({args.iter_lo})")
    if args.k > args.n:
        p.error(f"--k ({args.k}) must not exceed --n ({args.n})")
    return args


def ensure_store(args, data_dir: Path) -> str:
    """The blobs as ``dclust.write_array`` writes float data (no compression + crc32c); reused if present."""
    import dclust

    path = data_dir / f"pass_floor_n{args.n}_d{args.d}_c{args.centers}_r{args.chunk_rows}_s{args.seed}.zarr"
    if not path.exists():
        b = dclust.make_blobs(args.n, args.d, centers=args.centers, cluster_std=args.cluster_std,
                              chunk_rows=args.chunk_rows, dtype="float32", random_state=args.seed)
        dclust.write_array(b.X, path, codec="auto")
    return str(path)



def kmeans_fit(X, k: int, C0: np.ndarray, m: int, persist: bool) -> tuple[int, list[float]]:
    """dclust KMeans from ``C0``, ``max_iter=m``, ``tol=0``: ``(n_iter_, per-pass event seconds)``."""
    import dclust

    events: list = []
    km = dclust.KMeans(n_clusters=k, init=C0, n_init=1, max_iter=m, tol=0.0, persist=persist)
    with dclust.on_progress(events.append):
        km.fit(X)
    return km.n_iter_, [e.seconds for e in events if e.phase == "iter"]


def chunk_cpu(X_chunk: np.ndarray, C0: np.ndarray, repeats: int = 15) -> dict:
    """CPU seconds of one Lloyd iteration over one chunk: dclust's kernel and scikit-learn's (1 thread),
    interleaved, fastest of ``repeats``."""
    from dclust.kernels.distances import block_stats

    fns = {"dclust_block_stats": lambda: block_stats(X_chunk, C0)}
    try:
        from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense
    except ImportError:  # a scikit-learn without this private function: the kernel figure alone
        lloyd_iter_chunked_dense = None
    if lloyd_iter_chunked_dense is not None:
        k = C0.shape[0]
        C32 = C0.astype(X_chunk.dtype)
        w = np.ones(X_chunk.shape[0], X_chunk.dtype)
        new, wic = np.empty_like(C32), np.zeros(k, X_chunk.dtype)
        labels, shift = np.empty(X_chunk.shape[0], np.int32), np.empty(k, X_chunk.dtype)
        fns["sklearn_lloyd_1_thread"] = lambda: lloyd_iter_chunked_dense(X_chunk, w, C32, new, wic, labels, shift, 1,
                                                                         True)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats + 1):
        for name, fn in fns.items():
            t = time.thread_time()
            fn()
            if r:  # the first round warms up
                times[name].append(time.thread_time() - t)
    return {"rows": int(X_chunk.shape[0]), **{name: min(v) for name, v in times.items()}}


def run(args, path: str) -> dict:
    import dask
    import zarr
    from distributed import Client, LocalCluster

    import dclust

    X_mem = zarr.open_array(path, mode="r")[...]
    C0, init_info = choose_init(X_mem, args.k, args.seed)
    hi, lo = args.iter_hi, args.iter_lo
    X = dclust.open_array(path)
    res: dict = {"init": init_info, "chunk_cpu": chunk_cpu(X_mem[: args.chunk_rows], C0)}
    times: dict[str, dict[int, list[float]]] = {}
    cpu: dict[str, dict[int, list[float]]] = {}
    events: dict[str, list[float]] = {}

    def record(name: str, m: int, fn) -> None:
        gc.collect()
        c0 = cpu_seconds()
        (n_iter, ev), t = timed(fn)
        cpu.setdefault(name, {}).setdefault(m, []).append(cpu_seconds() - c0)
        if n_iter != m:
            raise RuntimeError(f"{name}: {n_iter} iterations for max_iter={m} (the init converged early)")
        times.setdefault(name, {}).setdefault(m, []).append(t)
        if ev and m == hi:
            events.setdefault(name, []).extend(ev[1:])

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        client.run(_warm_worker)
        zarr_read(path)  # page cache warm
        for name, persist, sched in (("threads", False, "threads"), ("processes", False, None),
                                     ("persisted", True, None)):  # warm-up: jit caches, imports
            with dask.config.set(scheduler=sched) if sched else _nothing():
                kmeans_fit(X, args.k, C0, lo, persist)
        for r in range(args.repeats):
            record("read", 1, lambda: (1 if zarr_read(path) == args.n else 0, []))
            for m in (hi, lo):
                record("sklearn", m, lambda: (sklearn_fit(X_mem, args.k, C0, m).n_iter_, []))
            for m in (hi, lo):
                with dask.config.set(scheduler="threads"):
                    record("threads", m, lambda: kmeans_fit(X, args.k, C0, m, False))
            for m in (hi, lo):
                record("processes", m, lambda: kmeans_fit(X, args.k, C0, m, False))
            for m in (hi, lo):
                record("persisted", m, lambda: kmeans_fit(X, args.k, C0, m, True))
            print(f"repeat {r + 1}/{args.repeats} done", flush=True)
    per_iter, cpu_iter = {"read": min(times["read"][1])}, {"read": min(cpu["read"][1])}
    for name in ("sklearn", "threads", "processes", "persisted"):
        per_iter[name] = (min(times[name][hi]) - min(times[name][lo])) / (hi - lo)
        cpu_iter[name] = (min(cpu[name][hi]) - min(cpu[name][lo])) / (hi - lo)
    floor, cpu_floor = per_iter["read"] + per_iter["sklearn"], cpu_iter["read"] + cpu_iter["sklearn"]
    res.update(per_iter=per_iter, floor=floor, times={k: {str(m): v for m, v in d.items()} for k, d in times.items()},
               event_median={k: median(v) for k, v in events.items()},
               ratios={"threads": ratio(per_iter["threads"], floor), "processes": ratio(per_iter["processes"], floor),
                       "persisted": ratio(per_iter["persisted"], per_iter["sklearn"])},
               cpu_per_iter=cpu_iter, cpu_floor=cpu_floor,
               cpu={k: {str(m): v for m, v in d.items()} for k, d in cpu.items()},
               cpu_ratios={"threads": ratio(cpu_iter["threads"], cpu_floor),
                           "processes": ratio(cpu_iter["processes"], cpu_floor),
                           "persisted": ratio(cpu_iter["persisted"], cpu_iter["sklearn"])})
    return res


def ratio(a: float, b: float) -> float | None:
    """``a / b``; None when either is not positive (a marginal cost that a loaded machine or a toy size pushed to
    or below zero has no ratio, and no verdict)."""
    return a / b if a > 0 and b > 0 else None


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and all its descendants (the cluster's nannies
    and workers): immune to other load on the machine, unlike wall time."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for p in [me] + me.children(recursive=True):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # a process that just ended
            pass
    return total


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def report(res: dict) -> str:
    p, r, cc = res["per_iter"], res["ratios"], res["chunk_cpu"]
    ev = res["event_median"]

    def verdict(name):
        return "-" if r[name] is None else ("PASS" if r[name] <= TARGETS[name] else "MISS")

    rows = [
        ["plain zarr read, 2 threads", fmt_s(p["read"]), "", "", "", ""],
        ["scikit-learn lloyd iteration (memory)", fmt_s(p["sklearn"]), "", "", "", ""],
        ["floor = read + scikit-learn", fmt_s(res["floor"]), "1.00x", "", "", ""],
        ["dclust KMeans, threaded scheduler", fmt_s(p["threads"]), fmt_ratio(r["threads"]), fmt_s(ev.get("threads")),
         "<= 1.3x floor", verdict("threads")],
        ["dclust KMeans, LocalCluster 2 procs", fmt_s(p["processes"]), fmt_ratio(r["processes"]),
         fmt_s(ev.get("processes")), "<= 1.3x floor", verdict("processes")],
        ["dclust KMeans, persisted (2 procs)", fmt_s(p["persisted"]), fmt_ratio(r["persisted"]) + " of sklearn",
         fmt_s(ev.get("persisted")), "<= 1.5x sklearn", verdict("persisted")],
    ]
    text = print_table(rows, ["per iteration", "seconds", "ratio", "event median", "target", ""],
                       title=f"{res['n']:,} x {res['d']} float32, K = {res['k']}, chunks of {res['chunk_rows']:,} "
                             f"rows (load average {res['load_start']:.1f} -> {res['load_end']:.1f})")
    pc, rc = res["cpu_per_iter"], res["cpu_ratios"]
    text += "\n" + print_table(
        [["plain zarr read + scikit-learn iteration", fmt_s(res["cpu_floor"]), "1.00x"],
         ["dclust KMeans, threaded scheduler", fmt_s(pc["threads"]), fmt_ratio(rc["threads"])],
         ["dclust KMeans, LocalCluster 2 procs", fmt_s(pc["processes"]), fmt_ratio(rc["processes"])],
         ["dclust KMeans, persisted (2 procs)", fmt_s(pc["persisted"]), fmt_ratio(rc["persisted"]) + " of sklearn"]],
        ["CPU seconds per iteration (all processes)", "seconds", "ratio"])
    cpu_rows = [["dclust block_stats (one chunk)", fmt_s(cc["dclust_block_stats"]), ""]]
    if "sklearn_lloyd_1_thread" in cc:
        cpu_rows.append(["scikit-learn lloyd_iter_chunked_dense, 1 thread", fmt_s(cc["sklearn_lloyd_1_thread"]),
                         fmt_ratio(ratio(cc["dclust_block_stats"], cc["sklearn_lloyd_1_thread"]))])
    text += "\n" + print_table(cpu_rows, ["CPU time of one chunk", "seconds", "dclust / sklearn"])
    return text


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.getLogger("distributed").setLevel(logging.ERROR)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="dclust-pass-floor-") as tmp:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp)
        data_dir.mkdir(parents=True, exist_ok=True)
        path = ensure_store(args, data_dir)
        res = {"n": args.n, "d": args.d, "k": args.k, "chunk_rows": args.chunk_rows, "load_start": load_start}
        res.update(run(args, path))
    res["load_end"] = os.getloadavg()[0]
    res["text"] = report(res)
    write_json({"args": vars(args), "machine": machine_info(), "targets": TARGETS, "result": res}, args.out)
    return res


if __name__ == "__main__":
    main()
