"""benchmarks/bench_gmpr_kernel.py (GM-PR's diagonal E-step kernel vs KMeans' on one block) at toy size: it runs
and writes every figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gmpr_kernel.py"


def test_toy_run(tmp_path):
    out = tmp_path / "gmpr_kernel.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--n-rows", "3000", "--d", "3", "--k", "4", "--fit-iters", "2",
                        "--repeats", "2", "--out", str(out)], capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["best_seconds"]) == {"kmeans", "gmpr"} and all(v > 0 for v in res["best_seconds"].values())
    assert all(len(v) == 2 for v in res["seconds"].values())
    assert res["ratio_gmpr_to_kmeans"] == res["best_seconds"]["gmpr"] / res["best_seconds"]["kmeans"]
    assert "GM-PR unlinked_partial (diag)" in r.stdout
