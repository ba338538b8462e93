"""benchmarks/bench_gp.py ([DM] 8.3, kernel of eq. 52) at toy size, and the kernel's own properties."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gp.py"


def test_eq52_kernel_is_a_probability_and_prefers_the_same_function():
    ns = runpy.run_path(str(SCRIPT), run_name="bench_gp")
    X, y = ns["generate"](40, np.random.default_rng(0))
    G = ns["gp_kernel"](X, X)
    assert G.shape == (40, 40) and np.allclose(G, G.T, atol=1e-9) and ((G >= 0) & (G <= 1)).all()
    same = y[:, None] == y[None, :]
    off = ~np.eye(40, dtype=bool)
    assert G[same & off].mean() > G[~same].mean() + 0.2
    means = ns["gp_means"](X[:2])
    assert means.shape == (2, 51)


def test_toy_run(tmp_path):
    out, png = tmp_path / "gp.json", tmp_path / "gp.png"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--n", "40", "--batch", "20", "--trials", "1", "--out",
                        str(out), "--plot", str(png)], capture_output=True, text=True, env=env, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["summary"]) == {"sdmeans", "dmeans"}
    for s in res["summary"].values():
        assert 0.0 <= s["accuracy"] <= 100.0 and s["mean_clusters"] >= 1
    assert png.stat().st_size > 1000
