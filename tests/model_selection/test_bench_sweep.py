"""benchmarks/bench_sweep.py at toy size (threaded scheduler): it runs, prints its tables and writes its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_sweep.py")


def test_bench_sweep_toy_run(tmp_path):
    out = tmp_path / "bench_sweep.json"
    r = subprocess.run(
        [sys.executable, SCRIPT, "--n", "2000", "--d", "3", "--k", "3", "--chunk-rows", "1000", "--n-lams", "4",
         "--sample-size", "400", "--naive-every", "4", "--threads", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert r.returncode == 0, r.stderr
    assert "sweep_dpmeans (4 lams)" in r.stdout and "DPMeans.fit per lam (1 of 4 timed)" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["sweep"]["passes"] == 2 and len(doc["naive"]["fits"]) == 1
    assert doc["agreement"]["true_k"] == 3 and doc["floor_seconds"] > 0
