"""Project one KMeans pass over 1 TB and 10 TB on 16, 64 and 256 workers from this machine's measured costs.

Inputs (measured, in ``benchmarks/results/``):

- ``bench_scale.json`` section (e): KMeans seconds per iteration over simulated arrays of many small chunks on a
  real scheduler and 2 single-threaded worker processes. Their rows are generated in the tasks, so the pass's time
  beyond arithmetic is overhead: a fit of ``t = a + b * n_chunks / 2`` over the chunk counts gives the fixed cost
  of a pass ``a`` (graph, scheduling, reduction, driver) and the cost of one chunk in a task ``b`` (the getter call
  and the kernel's per-block setup; the 200 rows' arithmetic is included and negligible).
- ``bench_engine.json``: dclust KMeans on data persisted in worker memory (path iv), the arithmetic rate of a
  worker thread in bytes of float32 rows per second (``D = 8, K = 16``).

Stated, not measured here: the read bandwidth of one worker (``--bandwidth``, default 200 MB/s, a typical object
store stream per worker process; local NVMe gives GB/s). One worker = one thread of arithmetic.

Model of one pass over ``B`` bytes in chunks of ``c`` bytes on ``W`` workers:
``T = a + (B / W) * (1 / bandwidth + 1 / rate) + (B / c / W) * b`` -- reads and arithmetic of a worker run one
after the other (a task reads its chunk, then folds it), chunks are spread evenly, and the pass's task count
(a few per worker thread) does not grow with the chunk count, so scheduling stays in ``a``. The scheduler's CPU per
pass is fitted as ``per task * tasks + per chunk * chunks`` (the simulation's tasks are fixed, its chunks vary).

Run: ``python benchmarks/project_scale.py [--bandwidth 2e8]``; prints the table that ``docs/scaling.md`` holds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TB = 1e12


def fit_overheads(sim: dict) -> tuple[float, float, float]:
    """``(a seconds per pass, b seconds per chunk per worker, scheduler CPU seconds per task)`` from section (e)."""
    rows = sim["rows"]
    n = np.array([r["n_chunks"] for r in rows], dtype=float) / 2.0  # chunks per worker
    t = np.array([r["kmeans_s_per_iter"] for r in rows])
    b, a = np.polyfit(n, t, 1)
    tasks = 4 * 2  # TASKS_PER_THREAD x threads of the simulation's cluster
    cpu = np.array([r["scheduler_cpu_s_per_pass"] for r in rows])
    per_chunk, fixed = np.polyfit(n * 2.0, cpu, 1)  # scheduler CPU = per task * tasks + per chunk * chunks
    return max(float(a), 0.0), max(float(b), 0.0), (max(float(fixed), 0.0) / tasks, max(float(per_chunk), 0.0))


def arithmetic_rate(engine: dict) -> tuple[float, str]:
    """Bytes per second of one worker thread folding float32 rows (D=8, K=16), from the persisted KMeans pass."""
    cfg = next(c for c in engine["configs"] if c["d"] == 8)
    per_iter = cfg["m"]["kmeans_persisted"]["per_iter"]
    nbytes = cfg["n"] * cfg["d"] * 4
    threads = 2
    return nbytes / per_iter / threads, f"{cfg['n']:,} x {cfg['d']} persisted, {per_iter:.3f} s per pass on 2 workers"


def project(a: float, b: float, rate: float, bandwidth: float, data_bytes: float, workers: int, chunk: float) -> float:
    return a + data_bytes / workers * (1 / bandwidth + 1 / rate) + data_bytes / chunk / workers * b


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bandwidth", type=float, default=2e8, help="read bytes per second of one worker")
    p.add_argument("--scale", type=Path, default=HERE / "results" / "bench_scale.json")
    p.add_argument("--engine", type=Path, default=HERE / "results" / "bench_engine.json")
    args = p.parse_args(argv)
    a, b, sched = fit_overheads(json.loads(args.scale.read_text())["simulation"])
    rate, how = arithmetic_rate(json.loads(args.engine.read_text()))
    print(f"measured: fixed cost per pass a = {a * 1e3:.1f} ms; per chunk per worker b = {b * 1e3:.3f} ms; "
          f"scheduler CPU {sched[0] * 1e3:.2f} ms per task + {sched[1] * 1e6:.1f} us per chunk; arithmetic "
          f"{rate / 1e6:.0f} MB/s per worker ({how})")
    print(f"stated: read bandwidth {args.bandwidth / 1e6:.0f} MB/s per worker\n")
    table = []
    print("| data | workers | chunk | chunks | pass (s) | of which per-chunk overhead | scheduler CPU / pass |")
    print("|---|---|---|---|---|---|---|")
    for data in (1 * TB, 10 * TB):
        for workers in (16, 64, 256):
            for chunk in (16e6, 64e6, 256e6):
                t = project(a, b, rate, args.bandwidth, data, workers, chunk)
                over = data / chunk / workers * b
                cpu = sched[0] * 4 * workers + sched[1] * data / chunk
                row = {"data_TB": data / TB, "workers": workers, "chunk_MB": chunk / 1e6,
                       "chunks": int(data / chunk), "pass_s": t, "chunk_overhead_s": over, "scheduler_cpu_s": cpu}
                table.append(row)
                print(f"| {data / TB:g} TB | {workers} | {chunk / 1e6:g} MB | {int(data / chunk):,} | {t:,.0f} | "
                      f"{over:,.1f} s ({over / t:.1%}) | {cpu:.2f} s |")
    return {"a": a, "b": b, "scheduler_cpu_per_task": sched, "rate": rate, "bandwidth": args.bandwidth,
            "rows": table}


if __name__ == "__main__":
    main()
