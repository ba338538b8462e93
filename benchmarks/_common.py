"""Shared helpers of the benchmark scripts: timing, worker peak memory, task-stream summaries, tables, JSON.

Nothing here starts a cluster; the scripts do that under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

__all__ = [
    "HERE",
    "REPO",
    "best_of",
    "timed",
    "WorkerPeakMemory",
    "LogCapture",
    "task_stream_summary",
    "pass_timeline",
    "machine_info",
    "print_table",
    "write_json",
    "fmt_s",
    "fmt_bytes",
    "fmt_ratio",
    "jsonable",
]


# --------------------------------------------------------------------------------------------------- timing


def add_int_options(parser: Any, **defaults: int) -> None:
    """``--name`` (underscores as dashes) taking an int, for every ``name=default``: the sizes of a benchmark."""
    for name, default in defaults.items():
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), wall seconds)``."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[Any, float, list[float]]:
    """Run ``fn`` ``repeats`` times; return the last result, the fastest wall time and all times."""
    times, out = [], None
    for _ in range(max(1, repeats)):
        out, t = timed(fn)
        times.append(t)
    return out, min(times), times



def interleaved(fns: dict[str, tuple[Callable[[Any], Any], Callable[[], Any]]], repeats: int, n_rows: int,
                ratio: tuple[str, str]) -> dict:
    """Time kernels on one thread in interleaved rounds (A, B, A, B, ...): ``fns`` maps a name to ``(fn, fresh)``,
    each round calls ``fn(fresh())`` and times the call alone (``fresh`` makes a new input, untimed). Each ``fn``
    runs once first (numba caches loaded). Returns per name the minimum over the rounds of thread CPU and of wall
    seconds, ``ratio[0]`` over ``ratio[1]`` of both, ns per row and every round's times."""
    for fn, fresh in fns.values():
        fn(fresh())
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    wall: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(repeats):
        for name, (fn, fresh) in fns.items():
            arg = fresh()
            t0, c0 = time.perf_counter(), time.thread_time()
            fn(arg)
            cpu[name].append(time.thread_time() - c0)
            wall[name].append(time.perf_counter() - t0)
        print(f"  round {r + 1}/{repeats}: " + ", ".join(
            f"{name} {cpu[name][-1] * 1e3:.1f} ms CPU" for name in fns), flush=True)
    best_cpu = {name: min(v) for name, v in cpu.items()}
    best_wall = {name: min(v) for name, v in wall.items()}
    a, b = ratio
    return {"best_cpu": best_cpu, "best_wall": best_wall,
            "cpu_ratio": best_cpu[a] / best_cpu[b], "wall_ratio": best_wall[a] / best_wall[b],
            "ns_per_row_cpu": {name: v / n_rows * 1e9 for name, v in best_cpu.items()},
            "runs": {"cpu": cpu, "wall": wall}}


def print_interleaved(res: dict, names: Sequence[str], label: str) -> None:
    """The table of :func:`interleaved`'s result: per kernel the fastest CPU and wall time and ns per row, then the
    ratio line ``label: <cpu>x CPU, <wall>x wall``."""
    print(f"\n{'kernel':8s} {'CPU (min)':>10s} {'wall (min)':>11s} {'ns/row':>7s}")
    for name in names:
        print(f"{name:8s} {res['best_cpu'][name] * 1e3:8.1f} ms {res['best_wall'][name] * 1e3:8.1f} ms "
              f"{res['ns_per_row_cpu'][name]:7.1f}")
    print(f"{label}: {res['cpu_ratio']:.2f}x CPU, {res['wall_ratio']:.2f}x wall")

# ---------------------------------------------------------------------------------------------- memory


def _read_status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                key, val = line.split(":", 1)
                out[key] = int(val.split()[0]) * 1024
    return out


def _reset_hwm(pid: int) -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM) of ``pid`` (Linux >= 4.0, same user)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _worker_pid() -> int:
    return os.getpid()


class WorkerPeakMemory:
    """Peak resident memory of every worker process of a *local* cluster while the ``with`` block runs.

    Two independent measurements: the kernel's own high-water mark ``VmHWM`` (reset on entry through
    ``/proc/<pid>/clear_refs``, so it is exact) and a psutil-free sampler thread reading ``VmRSS`` every
    ``interval`` seconds (a cross-check, and the fallback where the reset is not permitted).

    After the block: ``peak`` (max over workers, bytes), ``per_worker`` {address: dict}, ``baseline`` (max RSS at
    entry), ``method``.
    """

    def __init__(self, client, interval: float = 0.02):
        self.client = client
        self.interval = interval
        self.per_worker: dict[str, dict[str, int]] = {}
        self.peak = 0
        self.baseline = 0
        self.method = ""

    def __enter__(self) -> "WorkerPeakMemory":
        self.pids = self.client.run(_worker_pid)
        self.hwm_ok = all(_reset_hwm(pid) for pid in self.pids.values())
        self._start = {a: _read_status(p)["VmRSS"] for a, p in self.pids.items()}
        self._sampled = dict(self._start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            for a, p in self.pids.items():
                try:
                    rss = _read_status(p)["VmRSS"]
                except (OSError, KeyError):
                    continue
                if rss > self._sampled[a]:
                    self._sampled[a] = rss
            self._stop.wait(self.interval)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for a, p in self.pids.items():
            st = _read_status(p)
            self.per_worker[a] = {
                "start_rss": self._start[a],
                "sampled_peak_rss": self._sampled[a],
                "hwm": st["VmHWM"] if self.hwm_ok else None,
                "end_rss": st["VmRSS"],
            }
        if self.hwm_ok:
            self.method = "VmHWM (kernel peak RSS, reset at start)"
            self.peak = max(v["hwm"] for v in self.per_worker.values())
        else:
            self.method = f"VmRSS sampled every {self.interval * 1000:.0f} ms"
            self.peak = max(v["sampled_peak_rss"] for v in self.per_worker.values())
        self.baseline = max(self._start.values())

    def as_dict(self) -> dict:
        return {"peak": self.peak, "baseline": self.baseline, "method": self.method, "per_worker": self.per_worker}


# ------------------------------------------------------------------------------------------------ logging


class LogCapture(logging.Handler):
    """Collect the messages of one logger (at INFO and above) inside a ``with`` block."""

    def __init__(self, name: str = "dclust", level: int = logging.INFO):
        super().__init__(level)
        self.logger = logging.getLogger(name)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())

    def __enter__(self) -> "LogCapture":
        self._old_level = self.logger.level
        if self.logger.getEffectiveLevel() > self.level:
            self.logger.setLevel(self.level)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self._old_level)

    def matching(self, text: str) -> list[str]:
        return [r for r in self.records if text in r]


# ------------------------------------------------------------------------------------------ task streams


def _prefix(key: Any) -> str:
    from dask.utils import key_split

    return key_split(key)


def task_stream_summary(records: Sequence[dict], wall: float, n_threads: int) -> dict:
    """Aggregate ``client.get_task_stream()`` records: per task prefix, count and seconds spent computing,
    transferring, (de)serialising and on disk; plus how busy the worker threads were over ``wall`` seconds."""
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    busy = 0.0
    for rec in records:
        p = _prefix(rec["key"])
        per[p]["count"] += 1
        for s in rec.get("startstops", ()):
            d = float(s["stop"] - s["start"])
            per[p][s["action"]] += d
            if s["action"] == "compute":
                busy += d
    prefixes = {p: dict(v) for p, v in sorted(per.items(), key=lambda kv: -kv[1].get("compute", 0.0))}
    return {
        "wall_s": wall,
        "compute_s_total": busy,
        "thread_busy_fraction": busy / max(wall * n_threads, 1e-12),
        "by_prefix": prefixes,
    }


def pass_timeline(records: Sequence[dict], *, marker: str = "dclust-pass", gap: float = 0.03) -> list[dict]:
    """The passes in ``client.get_task_stream()`` records: the compute intervals of the tasks whose key holds
    ``marker``, cut into passes wherever no such task runs for ``gap`` seconds. Per pass: its tasks and busy
    seconds per worker, its span (first start to last stop) and the gap before it (the driver and the scheduler
    between two passes; None for the first)."""
    rows = sorted((float(s["start"]), float(s["stop"]), str(rec["worker"]))
                  for rec in records if marker in str(rec["key"])
                  for s in rec.get("startstops", ()) if s["action"] == "compute")
    passes: list[list[tuple[float, float, str]]] = []
    for row in rows:
        if passes and row[0] - max(r[1] for r in passes[-1]) <= gap:
            passes[-1].append(row)
        else:
            passes.append([row])
    out = []
    for i, p in enumerate(passes):
        tasks: dict[str, int] = defaultdict(int)
        busy: dict[str, float] = defaultdict(float)
        for start, stop, worker in p:
            tasks[worker] += 1
            busy[worker] += stop - start
        out.append({"tasks": dict(tasks), "busy_s": dict(busy), "span_s": max(r[1] for r in p) - p[0][0],
                    "gap_s": None if i == 0 else p[0][0] - max(r[1] for r in passes[i - 1])})
    return out


# ------------------------------------------------------------------------------------------- machine info


def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(mod)
    except Exception:  # noqa: BLE001 - absent package
        return None


def machine_info() -> dict:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "versions": {
            m: _version(m)
            for m in ("numpy", "dask", "distributed", "zarr", "numcodecs", "scikit-learn", "dask-ml", "numba",
                      "psutil", "scipy", "threadpoolctl")
        },
    }
    try:
        import psutil

        info["memory_total"] = psutil.virtual_memory().total
        info["physical_cores"] = psutil.cpu_count(logical=False)
    except ImportError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        info["git"] = rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [{k: d.get(k) for k in ("internal_api", "num_threads", "version")} for d in threadpool_info()]
    except Exception:  # noqa: BLE001
        pass
    try:
        import dclust

        info["versions"]["dclust"] = dclust.__version__
    except Exception:  # noqa: BLE001
        pass
    return info


# ------------------------------------------------------------------------------------------- formatting


def fmt_s(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x >= 100:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.1f} ms"
    return f"{x * 1e6:.0f} us"


def fmt_bytes(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= f:
            return f"{x / f:.2f} {unit}" if unit == "GiB" else f"{x / f:.0f} {unit}"
    return f"{x:.0f} B"


def fmt_ratio(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.2f}x"


def print_table(rows: Iterable[Sequence[Any]], header: Sequence[str], title: str | None = None,
                file=None) -> str:
    """Plain-text table (also returned as a string). Cells are str()-ed; long cells are not wrapped."""
    rows = [[("" if c is None else str(c)) for c in r] for r in rows]
    header = [str(h) for h in header]
    widths = [len(h) for h in header]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    out = []
    if title:
        out.append(title)
    out += [sep, line(header), sep.replace("-", "=")]
    out += [line(r) for r in rows]
    out.append(sep)
    text = "\n".join(out)
    print(text, file=file or sys.stdout, flush=True)
    return text


# ------------------------------------------------------------------------------------------------ JSON


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _relative_paths(obj: Any) -> Any:
    """Paths under the project (or the temp dir) are stored relative, so results carry no machine paths."""
    import tempfile

    roots = [(str(HERE.parent) + os.sep, ""), (tempfile.gettempdir() + os.sep, "$TMPDIR/")]
    if isinstance(obj, str):
        for root, repl in roots:
            obj = obj.replace(root, repl)
        return obj
    if isinstance(obj, dict):
        return {k: _relative_paths(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_relative_paths(v) for v in obj]
    return obj


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_relative_paths(jsonable(obj)), indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


@contextmanager
def quiet_warnings(*categories):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        for c in categories or (Warning,):
            warnings.simplefilter("always", c)
        yield caught


def zarr_read(path: str) -> int:
    """The floor read: every chunk of the store at ``path`` read once with plain zarr in 2 threads (no Dask);
    returns the rows read."""
    from concurrent.futures import ThreadPoolExecutor

    import zarr

    z = zarr.open_array(path, mode="r")
    rows = z.chunks[0]
    with ThreadPoolExecutor(2) as pool:
        return sum(pool.map(lambda a: z[a: a + rows].shape[0], range(0, z.shape[0], rows)))
