"""benchmarks/bench_gmpr_kernel.py (GM-PR E-step block kernel vs KMeans block kernel) at toy size: it runs and
writes every figure."""

from __future__ import annotations

import json

from _support.benchmarks import run_script


def test_toy_run(tmp_path):
    out = tmp_path / "gmpr_kernel.json"
    r = run_script("bench_gmpr_kernel.py", "--n", 3000, "--d", 8, "--k", 4, "--fit-rows", 2000, "--fit-iters", 2,
                   "--repeats", 2, "--out", out, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    for key in ("best_cpu", "best_wall", "ns_per_row_cpu"):
        assert set(res[key]) == {"kmeans", "gmpr", "gmpr_f64"} and all(v > 0 for v in res[key].values())
    assert res["cpu_ratio"] == res["best_cpu"]["gmpr"] / res["best_cpu"]["kmeans"]
    assert res["cpu_ratio_f64"] == res["best_cpu"]["gmpr_f64"] / res["best_cpu"]["kmeans"]
    assert all(len(v) == 2 for v in res["runs"]["cpu"].values()) and len(res["runs"]["cpu"]) == 3
    assert "GM-PR / KMeans:" in r.stdout
