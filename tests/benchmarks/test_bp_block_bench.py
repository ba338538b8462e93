"""benchmarks/bench_bp_block.py (BP-means block kernel vs DP-means block kernel, in a fit's state) at its smallest
size, one block: it runs and writes every figure."""

from __future__ import annotations

import json

from _support.benchmarks import run_script


def test_one_block_run(tmp_path):
    out = tmp_path / "bp_block.json"
    r = run_script("bench_bp_block.py", "--n", 500_000, "--fit-iters", 2, "--repeats", 2, "--out", out, cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    for key in ("best_cpu", "best_wall", "ns_per_row_cpu"):
        assert set(res[key]) == {"dp", "bp"} and all(v > 0 for v in res[key].values())
    assert res["cpu_ratio"] == res["best_cpu"]["bp"] / res["best_cpu"]["dp"]
    assert all(len(v) == 2 for v in res["runs"]["cpu"].values())
    assert res["n_features"] >= 1 and res["proposals"] >= 0 and 0 <= res["rows_changed"] <= 500_000
    assert "BP / DP:" in r.stdout
