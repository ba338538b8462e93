"""benchmarks/bench_rings.py ([DM] 8.2) runs end to end at toy size and writes its table, contour and plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_rings.py"


def run(*args, cwd):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)


def test_toy_run_writes_table_contour_and_plot(tmp_path):
    out, png = tmp_path / "rings.json", tmp_path / "rings.png"
    r = run("--steps", 3, "--trials", 1, "--grid", 2, "--grid-steps", 2, "--out", out, "--plot", png, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    methods = {(row["noise"], row["method"]) for row in res["table"]}
    assert methods == {(n, m) for n in (0.01, 0.03) for m in ("sdmeans[mst-rss]", "sdmeans[mst]", "dmeans")}
    for row in res["table"]:
        assert 0.0 <= row["accuracy"] <= row["untracked_accuracy"] + 1e-9 <= 100.0 + 1e-9
    assert len(res["contour"]["accuracy"]) == 2 and len(res["contour"]["accuracy"][0]) == 2
    assert "75.1" in res["report"] and "18.7" in res["report"]
    assert png.stat().st_size > 1000


def test_bad_arguments_are_refused(tmp_path):
    r = run("--trials", 0, "--out", tmp_path / "x.json", cwd=tmp_path)
    assert r.returncode == 2 and "error:" in r.stderr and not (tmp_path / "x.json").exists()
