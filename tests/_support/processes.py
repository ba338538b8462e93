"""A real Dask cluster as OS processes: ``dask scheduler`` and single-threaded ``dask worker`` processes on
127.0.0.1 (random free ports, 1 GiB each, no nanny so that killing a worker really loses it), always stopped."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

BIN = Path(sys.executable).parent


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() or path.stat().st_size == 0:  # the scheduler creates the file, then writes it
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:2]} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.1)


@contextlib.contextmanager
def dask_processes(work: Path, n_workers: int, *, scheduler_args: Sequence[str] = (),
                   worker_args: Sequence[str] = (), security=None) -> Iterator[tuple[str, list]]:
    """Yield ``(address, procs)``; ``procs[1:]`` are the workers (a test that replaces one writes it back)."""
    from distributed import Client

    sched_file = work / "scheduler.json"
    env = dict(os.environ, DASK_DISTRIBUTED__WORKER__DAEMON="False")
    quiet = dict(cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs = [subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
         "--scheduler-file", str(sched_file), *scheduler_args], **quiet)]
    try:
        wait_for_file(sched_file, procs[0])
        for i in range(n_workers):
            procs.append(subprocess.Popen(
                [str(BIN / "dask"), "worker", "--scheduler-file", str(sched_file), "--nthreads", "1", "--no-nanny",
                 "--memory-limit", "1GiB", "--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}",
                 "--local-directory", str(work / f"w{i}"), *worker_args], **quiet))
        address = json.loads(sched_file.read_text())["address"]
        with Client(address, security=security, timeout=30) as c:
            c.wait_for_workers(n_workers, timeout=90)
        yield address, procs
    finally:
        stop(procs)


def stop(procs: Sequence[subprocess.Popen], grace: float = 3.0) -> None:
    """SIGTERM every process still running (the workers first), then SIGKILL those not gone within ``grace``
    seconds in all: a TLS worker can spend 20 s trying to say goodbye to a scheduler that is stopping too, and
    nothing of a test cluster needs a clean exit (its files are in a temporary directory)."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
