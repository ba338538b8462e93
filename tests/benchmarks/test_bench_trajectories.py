"""benchmarks/bench_trajectories.py ([DM] 8.4 on the OpenSky sample of the 'traffic' package) at toy size."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_trajectories.py"


@pytest.mark.skipif(importlib.util.find_spec("traffic") is None, reason="needs `pip install --no-deps traffic`")
def test_toy_run_reports_the_three_methods(tmp_path):
    out = tmp_path / "traj.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--max-flights", "120", "--sweeps", "2", "--restarts", "1",
                        "--out", str(out)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["data"]["n_flights"] == 120 and res["data"]["n_features"] == 400
    assert set(res["methods"]) == {"dmeans", "dpmeans", "gibbs"}
    for m in res["methods"].values():
        assert 0.0 < m["accuracy"] <= 100.0 and m["n_clusters"] >= 1
    assert "55.9" in res["report"]


def test_bad_arguments_are_refused(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--sweeps", "0", "--out", str(tmp_path / "x.json")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and "error:" in r.stderr
