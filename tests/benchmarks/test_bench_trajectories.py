"""benchmarks/bench_trajectories.py ([DM] 8.4 on the OpenSky sample of the 'traffic' package) at toy size."""

from __future__ import annotations

import importlib.util
import json

import pytest

from _support.benchmarks import run_script

SCRIPT = "bench_trajectories.py"


@pytest.mark.skipif(importlib.util.find_spec("traffic") is None, reason="needs `pip install --no-deps traffic`")
def test_toy_run_reports_the_three_methods(tmp_path):
    out = tmp_path / "traj.json"
    r = run_script(SCRIPT, "--max-flights", 120, "--sweeps", 2, "--restarts", 1, "--out", out, cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["data"]["n_flights"] == 120 and res["data"]["n_features"] == 400
    assert set(res["methods"]) == {"dmeans", "dpmeans", "gibbs"}
    for m in res["methods"].values():
        assert 0.0 < m["accuracy"] <= 100.0 and m["n_clusters"] >= 1
    assert "55.9" in res["report"]


def test_bad_arguments_are_refused(tmp_path):
    r = run_script(SCRIPT, "--sweeps", 0, "--out", tmp_path / "x.json", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "error:" in r.stderr
