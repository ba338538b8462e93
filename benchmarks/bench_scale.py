"""Benchmark: scaling out and staying up -- KMeans on real `dask scheduler` + `dask worker` processes.

The same fit everywhere: ``KMeans(n_clusters=16, init=<fixed 16 rows>, max_iter=--iters, tol=0, persist=False)`` on
an N x 8 float32 Zarr store of blobs (``--n``, default 20,000,000; 500,000-row chunks, uncompressed), so every
iteration is one streaming pass over the store. All clusters are separate OS processes on 127.0.0.1 (a scheduler
and ``dask worker --no-nanny`` processes), started and stopped by this script.

(a) Scaling: seconds per iteration (median of iterations 2..) with 1 worker process x 1 thread, 2 processes x 1
    thread, and 1 process x 2 threads; speedup and scaling efficiency (speedup / 2) against 1 x 1.
(b) Checkpoint overhead: the same fit with ``checkpoint=`` (state written atomically after every iteration), on
    the 2 x 1 cluster, interleaved with plain fits (best of 2 each); extra seconds per iteration and the fraction of
    an iteration (target <= 5%). ``null`` when this dclust's KMeans has no ``checkpoint`` parameter.
(c) Worker failure: on the 2 x 1 cluster one worker process is SIGKILLed after iteration 1; the fit completes on the
    survivor with bit-identical centres. Reported: extra seconds vs the undisturbed 2 x 1 fit, and the part of it
    not explained by running the remaining iterations on one worker (the recovery cost proper).
Every cluster first runs one iteration on a few chunks (numba compiles its kernels in each worker), untimed.

(d) Memory limits: a ``--n-large`` (default 40,000,000) x 8 float32 store (1.28 GB) fitted by 2 workers with
    ``--memory-limit 1GiB`` each: completes, peak worker RSS (kernel VmHWM, see ``_common.WorkerPeakMemory``),
    and the count of memory warnings (spill / pause / "memory use is high") in the worker logs.

(e) The terabyte case simulated (``_scale_sim.py``): arrays of ``--sim-chunks`` chunks of ``--sim-chunk-rows`` rows
    generated inside the tasks (no disk) on a real ``dask scheduler`` + 2 ``dask worker`` processes: KMeans seconds
    per iteration and per chunk against a plain ``X.sum(0).compute()`` over the same chunks (target <= 0.5 x), the
    same model with and without task grouping, graph bytes per pass, "large graph" warnings, initialisation cost in
    passes and scheduler CPU per pass. ``--only simulate`` runs (e) alone and updates the JSON in place.

Results: ``benchmarks/results/bench_scale.json``. Full size: ``.venv/bin/python
benchmarks/bench_scale.py``; validation run (< 1 min of fitting): ``--quick``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HERE, WorkerPeakMemory, fmt_bytes, machine_info, print_table, write_json  # noqa: E402
from bench_kmeans import ensure_store  # noqa: E402

BIN = Path(sys.executable).parent
K = 16
CHUNK_ROWS = 500_000
T_CHECKPOINT = 0.05
MEMORY_WARNINGS = re.compile(r"spill|paus|memory use is high|exceed|unmanaged memory", re.IGNORECASE)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000_000, help="rows of the scaling store")
    p.add_argument("--n-large", type=int, default=40_000_000, help="rows of the memory-limit store")
    p.add_argument("--iters", type=int, default=5, help="fixed Lloyd iterations per fit")
    p.add_argument("--repeats", type=int, default=1, help="fits per configuration (the fastest counts)")
    p.add_argument("--quick", action="store_true", help="2M / 4M rows, 4 iterations, 1 repeat")
    p.add_argument("--data-dir", type=Path, default=HERE / "data", help="where stores are written/reused")
    p.add_argument("--out", type=Path, default=HERE / "results" / "bench_scale.json")
    p.add_argument("--only", choices=("all", "cluster", "simulate"), default="all",
                   help="sections (a)-(d) ('cluster'), (e) ('simulate') or both")
    p.add_argument("--sim-chunks", type=int, nargs="+", default=[1_000, 4_000, 32_000, 100_000],
                   help="chunk counts of the simulated arrays")
    p.add_argument("--sim-chunk-rows", type=int, default=200, help="rows per simulated chunk")
    p.add_argument("--sim-sum-max", type=int, default=32_000,
                   help="largest chunk count for the (one task per chunk) X.sum comparison")
    p.add_argument("--sim-ungrouped-max", type=int, default=4_000,
                   help="largest chunk count for the KMeans fits without task grouping (one task per chunk)")
    a = p.parse_args(argv)
    if a.quick:
        a.n, a.n_large, a.iters, a.repeats = 2_000_000, 4_000_000, 4, 1
        a.sim_chunks, a.sim_sum_max, a.sim_ungrouped_max = [500, 2_000], 2_000, 2_000
        if a.out == HERE / "results" / "bench_scale.json":  # a validation run does not replace the results
            a.out = Path(tempfile.gettempdir()) / "bench_scale.quick.json"
    return a


# --------------------------------------------------------------------------------------------- clusters


class ProcessCluster:
    """A `dask scheduler` and ``n_workers`` `dask worker --no-nanny` processes on 127.0.0.1; always stopped."""

    def __init__(self, n_workers: int, nthreads: int, memory_limit: str, work: Path):
        self.n_workers, self.nthreads, self.memory_limit = n_workers, nthreads, memory_limit
        self.work = Path(tempfile.mkdtemp(prefix=f"cluster-{n_workers}x{nthreads}-", dir=work))
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen:
        # workers import _common (WorkerPeakMemory runs a function of it on them)
        path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False", PYTHONPATH=path)
        self.logs.append(log)
        with open(log, "w") as f:
            return subprocess.Popen(args, cwd=self.work, env=env, stdout=subprocess.DEVNULL, stderr=f)

    def __enter__(self) -> "ProcessCluster":
        from distributed import Client

        sched_file = self.work / "scheduler.json"
        try:
            self.procs.append(self._spawn(
                [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                 "--scheduler-file", str(sched_file)], self.work / "scheduler.log"))
            deadline = time.monotonic() + 120
            while not sched_file.exists():
                if self.procs[0].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the scheduler did not start; see " + str(self.work / "scheduler.log"))
                time.sleep(0.1)
            for i in range(self.n_workers):
                self.procs.append(self._spawn(
                    [str(BIN / "dask"), "worker", "--scheduler-file", str(sched_file), "--nthreads",
                     str(self.nthreads), "--no-nanny", "--memory-limit", self.memory_limit, "--host", "127.0.0.1",
                     "--no-dashboard", "--name", f"w{i}", "--local-directory", str(self.work / f"w{i}")],
                    self.work / f"w{i}.log"))
            self.address = json.loads(sched_file.read_text())["address"]
            self.client = Client(self.address, timeout=60, set_as_default=True)
            self.client.wait_for_workers(self.n_workers, timeout=180)
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def workers(self) -> list[subprocess.Popen]:
        return self.procs[1:]

    def memory_warnings(self) -> list[str]:
        lines = []
        for log in self.logs[1:]:
            lines += [ln.strip() for ln in log.read_text(errors="replace").splitlines() if MEMORY_WARNINGS.search(ln)]
        return lines

    def __exit__(self, *exc) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ------------------------------------------------------------------------------------------------- fits


def fixed_init(path: str) -> np.ndarray:
    """The same 16 starting centres for every fit: rows 0, 1000, 2000, ... of the first chunk."""
    import zarr

    z = zarr.open_array(path, mode="r")
    return np.asarray(z[: K * 1000 : 1000], dtype=np.float64)


def fit(path: str, init: np.ndarray, iters: int, *, checkpoint: str | None = None, on_iter=None) -> dict:
    """One KMeans fit; per-iteration wall seconds from the progress events."""
    import dclust

    kw = {"checkpoint": checkpoint} if checkpoint is not None else {}
    stamps: list[float] = []

    def listen(event) -> None:
        if event.phase == "iter":
            stamps.append(time.perf_counter())
            if on_iter is not None:
                on_iter(event)

    X = dclust.open_array(path)
    t0 = time.perf_counter()
    with dclust.on_progress(listen):
        km = dclust.KMeans(n_clusters=K, init=init, max_iter=iters, tol=0.0, persist=False, **kw).fit(X)
    total = time.perf_counter() - t0
    per_iter = np.diff([t0] + stamps).tolist()
    return {"total_s": total, "per_iter_s": per_iter, "n_iter": int(km.n_iter_),
            "s_per_iter": float(np.median(per_iter[1:] if len(per_iter) > 1 else per_iter)),
            "centers": km.cluster_centers_, "inertia": float(km.inertia_)}


def warm_up(path: str, init: np.ndarray, n_workers: int) -> None:
    """One iteration on the first ``2 * n_workers`` chunks: compiles the numba kernels in every worker first."""
    import dclust

    X = dclust.open_array(path)[: 2 * n_workers * CHUNK_ROWS]
    dclust.KMeans(n_clusters=K, init=init, max_iter=1, tol=0.0, persist=False).fit(X)


def best(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["s_per_iter"])


def has_checkpoint() -> bool:
    import dclust

    return "checkpoint" in dclust.KMeans().get_params()


def strip(run: dict) -> dict:
    return {k: v for k, v in run.items() if k != "centers"}


# ------------------------------------------------------------------------------------------------- main


def main(argv=None) -> dict:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="dclust-bench-scale-"))
    try:
        return run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> dict:
    if args.only == "simulate":
        result = json.loads(args.out.read_text()) if args.out.exists() else {"benchmark": "bench_scale"}
        result["machine"] = machine_info()
        sim = simulation(args, work)
        new = {r["n_chunks"] for r in sim["rows"]}  # rows of other chunk counts from an earlier run are kept
        kept = [r for r in result.get("simulation", {}).get("rows", []) if r["n_chunks"] not in new]
        sim["rows"] = sorted(kept + sim["rows"], key=lambda r: r["n_chunks"])
        result["simulation"] = sim
        write_json(result, args.out)
        print(f"wrote {args.out}")
        return result
    result = run_cluster(args, work)
    if args.only == "all":
        result["simulation"] = simulation(args, work)
        write_json(result, args.out)
    return result


def simulation(args: argparse.Namespace, work: Path) -> dict:
    """Section (e): the terabyte case simulated on a real scheduler + 2 single-threaded workers."""
    from _scale_sim import simulate

    print(f"(e) simulated arrays of {args.sim_chunks} chunks x {args.sim_chunk_rows} rows", flush=True)
    with ProcessCluster(2, 1, "4GiB", work) as cluster:
        rows = simulate(cluster.client, args.sim_chunks, args.sim_chunk_rows, sum_max_chunks=args.sim_sum_max,
                        ungrouped_max_chunks=args.sim_ungrouped_max,
                        log=lambda m: print(m, flush=True))
    table = [[f"{r['n_chunks']:,}", f"{r['kmeans_s_per_iter']:.3f}", f"{r['kmeans_per_chunk_ms']:.3f}",
              "-" if r["dask_sum_s"] is None else f"{r['dask_sum_s']:.3f}",
              "-" if r["ratio_kmeans_to_sum"] is None else f"{r['ratio_kmeans_to_sum']:.2f}",
              "-" if r["ungrouped_kmeans_s_per_iter"] is None else f"{r['ungrouped_kmeans_s_per_iter']:.3f}",
              f"{r['dclust_pass_graph_bytes']:,}",
              "-" if r["dask_sum_graph_bytes"] is None else f"{r['dask_sum_graph_bytes']:,}",
              str(r["large_graph_warnings"]), str(r["init_passes_kmeans||"]), f"{r['scheduler_cpu_s_per_pass']:.3f}"]
             for r in rows]
    print_table(table, ["chunks", "KMeans s/iter", "ms/chunk", "X.sum s", "KMeans/X.sum (<= 0.5)",
                        "ungrouped s/iter", "dclust graph B", "X.sum graph B", "large-graph warnings",
                        "init passes", "scheduler CPU s/pass"],
                title=f"(e) simulated arrays, {args.sim_chunk_rows}-row chunks, 2 worker processes x 1 thread")
    return {"chunk_rows": args.sim_chunk_rows, "target_ratio_to_sum": 0.5, "rows": rows,
            "cluster": "dask scheduler + 2 dask worker --nthreads 1 --no-nanny on 127.0.0.1"}


def run_cluster(args: argparse.Namespace, work: Path) -> dict:
    store = ensure_store(args.n, 8, K, CHUNK_ROWS, 0, "none", args.data_dir)
    init = fixed_init(store["path"])
    print(f"store {Path(store['path']).name}: {fmt_bytes(store['bytes'])}; {args.iters} iterations per fit", flush=True)
    result: dict = {"benchmark": "bench_scale", "machine": machine_info(), "args": vars(args), "store": store,
                    "fit": {"estimator": "KMeans", "n_clusters": K, "init": "fixed 16 rows", "max_iter": args.iters,
                            "tol": 0.0, "persist": False}}

    # (a) scaling, (b) checkpoints, (c) worker kill
    scaling: dict = {}
    reference = None
    for name, n_workers, nthreads in (("1x1", 1, 1), ("2x1", 2, 1), ("1x2", 1, 2)):
        with ProcessCluster(n_workers, nthreads, "4GiB", work) as cluster:
            warm_up(store["path"], init, n_workers)
            runs = [fit(store["path"], init, args.iters) for _ in range(args.repeats)]
            run = best(runs)
            if reference is None:
                reference = run["centers"]
            run["identical_to_1x1"] = bool(np.array_equal(run["centers"], reference))
            scaling[name] = strip(run)
            print(f"  {name}: {run['s_per_iter']:.3f} s/iteration", flush=True)
            if name != "2x1":
                continue
            if has_checkpoint():
                ck_runs = []
                for i in range(max(2, args.repeats)):  # interleaved with plain fits: load on the machine drifts
                    ck_runs.append(fit(store["path"], init, args.iters, checkpoint=str(work / f"ck-{i}")))
                    runs.append(fit(store["path"], init, args.iters))
                run = best(runs)
                run["identical_to_1x1"] = bool(np.array_equal(run["centers"], reference))
                scaling[name] = strip(run)
                ck_run = best(ck_runs)
                extra = ck_run["s_per_iter"] - run["s_per_iter"]
                result["checkpoint"] = {"s_per_iter": ck_run["s_per_iter"], "extra_s_per_iter": extra,
                                        "overhead_fraction": extra / run["s_per_iter"], "target": T_CHECKPOINT,
                                        "identical": bool(np.array_equal(ck_run["centers"], run["centers"])),
                                        "runs": [strip(r) for r in ck_runs]}
                print(f"  checkpoint: +{extra:.3f} s/iteration ({extra / run['s_per_iter']:.1%})", flush=True)
            else:
                result["checkpoint"] = None
                print("  checkpoint: KMeans has no checkpoint= parameter here (null)", flush=True)
            victim = cluster.workers[-1]
            killed: list[float] = []

            def kill(event) -> None:
                if event.iteration == 1 and not killed:
                    os.kill(victim.pid, signal.SIGKILL)
                    victim.wait(timeout=60)
                    killed.append(time.perf_counter())

            disturbed = fit(store["path"], init, args.iters, on_iter=kill)
            result["worker_kill"] = {"undisturbed": strip(run), "disturbed": strip(disturbed),
                                     "identical": bool(np.array_equal(disturbed["centers"], run["centers"])),
                                     "killed": bool(killed)}
    scaling["speedup_2x1"] = scaling["1x1"]["s_per_iter"] / scaling["2x1"]["s_per_iter"]
    scaling["efficiency_2x1"] = scaling["speedup_2x1"] / 2
    scaling["speedup_1x2"] = scaling["1x1"]["s_per_iter"] / scaling["1x2"]["s_per_iter"]
    scaling["efficiency_1x2"] = scaling["speedup_1x2"] / 2
    result["scaling"] = scaling
    wk = result["worker_kill"]
    wk["extra_s"] = wk["disturbed"]["total_s"] - wk["undisturbed"]["total_s"]
    # iterations after the kill run on one worker anyway: what 1x1 would have cost for them beyond 2x1
    expected = (args.iters - 1) * (scaling["1x1"]["s_per_iter"] - scaling["2x1"]["s_per_iter"])
    wk["one_worker_slowdown_s"] = expected
    wk["recovery_s"] = wk["extra_s"] - expected
    per_iter = wk["disturbed"]["per_iter_s"]
    wk["iteration_with_kill_s"] = per_iter[1] if len(per_iter) > 1 else None  # iteration 2: lost chunks recomputed
    wk["later_iterations_s"] = float(np.median(per_iter[2:])) if len(per_iter) > 2 else None  # on one worker

    # (d) memory limits
    big = ensure_store(args.n_large, 8, K, CHUNK_ROWS, 0, "none", args.data_dir)
    with ProcessCluster(2, 1, "1GiB", work) as cluster:
        warm_up(big["path"], fixed_init(big["path"]), 2)
        with WorkerPeakMemory(cluster.client) as mem:
            run = fit(big["path"], fixed_init(big["path"]), max(2, args.iters // 2))
        warnings_ = cluster.memory_warnings()
    result["memory_limit"] = {"store": big, "memory_limit": "1GiB", "workers": 2, "fit": strip(run),
                              "peak_worker_rss": mem.peak, "memory": mem.as_dict(),
                              "memory_warnings_in_worker_logs": warnings_, "completed": True}

    rows = [[name, f"{scaling[name]['s_per_iter']:.3f}",
             f"{scaling['1x1']['s_per_iter'] / scaling[name]['s_per_iter']:.2f}",
             f"{scaling['1x1']['s_per_iter'] / scaling[name]['s_per_iter'] / (1 if name == '1x1' else 2):.0%}"]
            for name in ("1x1", "2x1", "1x2")]
    print_table(rows, ["workers x threads", "s/iteration", "speedup", "efficiency"],
                title=f"KMeans, {args.n:,} x 8 float32, {args.iters} iterations")
    ck = result["checkpoint"]
    print("checkpoint overhead: " + ("null (no checkpoint= in KMeans)" if ck is None else
                                      f"{ck['extra_s_per_iter']:+.3f} s/iteration = {ck['overhead_fraction']:.1%}"
                                      f" (target <= {T_CHECKPOINT:.0%})"))
    print(f"worker killed after iteration 1: {wk['extra_s']:+.2f} s total ({wk['recovery_s']:+.2f} s beyond running "
          f"the rest on one worker); iteration 2 (with the kill) {wk['iteration_with_kill_s']:.2f} s, later ones "
          f"{wk['later_iterations_s']:.2f} s; identical centres: {wk['identical']}")
    ml = result["memory_limit"]
    print(f"{args.n_large:,} x 8 ({fmt_bytes(big['bytes'])}) on 2 x 1GiB workers: completed, peak worker RSS "
          f"{fmt_bytes(ml['peak_worker_rss'])}, {len(warnings_)} memory warnings in the worker logs")
    write_json(result, args.out)
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
