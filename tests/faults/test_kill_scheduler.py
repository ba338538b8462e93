"""A scheduler SIGKILLed in the middle of ``dclust fit``: the CLI exits with code 1 after one ``dclust: error:``
line (distributed's log and tracebacks go to the log file), writes no output, and does not hang.

The cluster is real ``dask scheduler`` / ``dask worker`` processes (``tests/_support/processes.py``); the driver is
the CLI in a child process, which kills the scheduler itself after its second iteration (a progress callback in a
small launcher), so the kill lands mid-fit without timing races. A killed *worker* is in
``tests/deploy/test_real_cluster.py`` (the model does not change).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import dask.array as da
import numpy as np

import dclust

from _support.processes import dask_processes

LAUNCHER = textwrap.dedent('''
    import os, signal, sys

    import dclust
    from dclust._cli.main import app

    victim, argv = int(sys.argv[1]), sys.argv[2:]

    def on_event(event):
        if event.phase == "iter" and event.iteration == 2:
            os.kill(victim, signal.SIGKILL)

    with dclust.on_progress(on_event):
        app(argv, prog_name="dclust")
''')


def test_a_scheduler_killed_mid_fit_is_one_line_and_no_output(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20000, 2)) + rng.integers(0, 4, (20000, 1))  # overlapping: many Lloyd iterations
    store = tmp_path / "x.zarr"
    dclust.write_array(da.from_array(X, chunks=(2000, 2)), store)
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    log = tmp_path / "dask.log"
    with dask_processes(tmp_path, 1) as (address, procs):
        cmd = [sys.executable, str(launcher), str(procs[0].pid), "fit", "kmeans", str(store), "--k", "12",
               "--seed", "0", "--labels", str(tmp_path / "l.zarr"), "--model", str(tmp_path / "m.zarr"),
               "--scheduler", address, "--quiet"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=180,  # no hang
                           env={**os.environ, "DCLUST_LOG_FILE": str(log)})
        assert procs[0].wait(timeout=30) == -signal.SIGKILL  # the scheduler was killed by the driver
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"dclust: error: lost the connection to the Dask scheduler at {address} during the run")
    assert f"details in Dask's log: {log}" in r.stderr
    assert r.stdout == "" and not (tmp_path / "l.zarr").exists() and not (tmp_path / "m.zarr").exists()


def test_library_logs_go_to_a_file_for_a_command_unless_verbose(tmp_path, monkeypatch):
    import logging

    import distributed  # noqa: F401 - attaches its console handlers

    from dclust._cli._quiet import library_logs

    def consoles(name):
        return [h for h in logging.getLogger(name).handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]

    # distributed attaches a stderr handler to its loggers at import unless the root logger has handlers (as under
    # pytest): attach one as it does in the CLI
    console = logging.StreamHandler(sys.stderr)
    logging.getLogger("distributed.client").addHandler(console)
    try:
        names = ("distributed", "distributed.client", "tornado")
        before = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
        monkeypatch.setenv("DCLUST_LOG_FILE", str(tmp_path / "d.log"))
        with library_logs(verbose=False) as path:
            assert path == str(tmp_path / "d.log") and not any(consoles(n) for n in names)
            logging.getLogger("distributed.client").error("routed to the file")
        assert "distributed.client ERROR routed to the file" in (tmp_path / "d.log").read_text()
        after = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
        assert after == before  # restored after the command
        with library_logs(verbose=True) as path:
            assert path is None and consoles("distributed.client") == [console]
    finally:
        logging.getLogger("distributed.client").removeHandler(console)
