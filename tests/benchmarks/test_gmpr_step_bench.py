"""benchmarks/bench_gmpr_step.py (GM-PR step vs KMeans iteration) at toy size: it runs and writes every figure."""

from __future__ import annotations

import json

from _support.benchmarks import run_script


def test_toy_run(tmp_path):
    out = tmp_path / "gmpr_step.json"
    r = run_script("bench_gmpr_step.py", "--n", 6000, "--chunk-rows", 2000, "--k", 4, "--iters", 3, "--repeats", 2,
                   "--scheduler", "threads", "--out", out, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["n_links"] == 60
    for key in ("best_per_iter", "ratio_to_kmeans", "best_cpu_per_iter", "cpu_ratio_to_kmeans"):
        assert set(res[key]) == {"kmeans", "gmpr", "gmpr_links"}
        assert all(v > 0 for v in res[key].values())
    assert res["ratio_to_kmeans"]["kmeans"] == 1.0
    for runs in res["runs"].values():
        assert len(runs) == 2 and all(len(one["iter_seconds"]) == 3 for one in runs)
    assert "GMPR diag, 60 links" in r.stdout
