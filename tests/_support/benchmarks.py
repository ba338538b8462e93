"""Running a script of benchmarks/ as the lead runs it: a subprocess with the plain environment, and its import as
a worker process re-imports it (``__mp_main__``)."""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(name: str, *args: Any, cwd: Any = None, timeout: float = 300, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/<name> args...`` (no DCLUST_SCHEDULER from the test environment; ``env`` added to it),
    output captured."""
    full = {**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})}
    full.pop("DCLUST_SCHEDULER", None)
    return subprocess.run([sys.executable, str(BENCHMARKS / name), *map(str, args)], capture_output=True, text=True,
                          env=full, timeout=timeout, cwd=cwd)


def import_as_worker(name: str, cwd: Path, monkeypatch: Any) -> dict[str, Any]:
    """The script's namespace when a worker process re-imports it as ``__mp_main__`` in ``cwd``; asserts that the
    import wrote nothing there (it must start no cluster and run no benchmark)."""
    monkeypatch.chdir(cwd)
    namespace = runpy.run_path(str(BENCHMARKS / name), run_name="__mp_main__")
    assert callable(namespace["main"])
    assert os.listdir(cwd) == []
    return namespace


def assert_refused_before_any_work(name: str, bad: list[str], cwd: Path) -> None:
    """The script given the ``bad`` arguments exits 2 with an argparse error and writes nothing into ``cwd``."""
    r = run_script(name, *bad, "--data-dir", cwd / "data", "--out", cwd / "out.json", cwd=cwd, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "error:" in r.stderr
    assert os.listdir(cwd) == []


#: distributed's record of a worker whose heartbeat met the scheduler closing at the end of a run (a race of its
#: shutdown, logged with a traceback; not an error of the script)
_SHUTDOWN_HEARTBEAT = re.compile(
    r"^\S+ \S+ - distributed\.worker - ERROR - Failed to communicate with scheduler during heartbeat\.\n"
    r"(?:(?!\d{4}-\d\d-\d\d ).*\n)*?.*CommClosedError: .*Stream is closed\n?", re.MULTILINE)


def assert_no_traceback(stderr: str) -> None:
    """No traceback in a script's ``stderr``, but for distributed's benign shutdown heartbeat record."""
    rest = _SHUTDOWN_HEARTBEAT.sub("", stderr)
    assert "Traceback" not in rest, stderr
