"""benchmarks/bench_gp.py ([DM] 8.3, kernel of eq. 52) at toy size, and the kernel's own properties."""

from __future__ import annotations

import json
import runpy

import numpy as np

from _support.benchmarks import BENCHMARKS, run_script

SCRIPT = BENCHMARKS / "bench_gp.py"


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
    r = run_script("bench_gp.py", "--n", 40, "--batch", 20, "--trials", 1, "--out", out, "--plot", png, cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert set(res["summary"]) == {"sdmeans", "dmeans"}
    for s in res["summary"].values():
        assert 0.0 <= s["accuracy"] <= 100.0 and s["mean_clusters"] >= 1
    assert png.stat().st_size > 1000
