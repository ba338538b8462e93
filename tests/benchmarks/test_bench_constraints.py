"""benchmarks/bench_constraints.py runs end to end at toy size, as a subprocess (as the lead runs it): smaller than
its 200,000-row warm-up fit too."""

from __future__ import annotations

import json

from _support.benchmarks import assert_no_traceback, import_as_worker, run_script

SCRIPT = "bench_constraints.py"


def test_importing_runs_nothing(tmp_path, monkeypatch):
    import_as_worker(SCRIPT, tmp_path, monkeypatch)


def test_toy_run_times_every_method(tmp_path):
    out = tmp_path / "out.json"
    r = run_script(SCRIPT, "--n", 20_000, "--chunk-rows", 5_000, "--iters", 2, "--rounds", 1,
                   "--data-dir", tmp_path / "data", "--out", out)
    assert r.returncode == 0, f"STDOUT:\n{r.stdout}\nSTDERR:\n{r.stderr}"
    assert_no_traceback(r.stderr)
    res = json.loads(out.read_text())
    names = [run["name"] for run in res["runs"]]
    assert any(n.startswith("RDPMeans") for n in names) and "GMPR (diag)" in names
    assert all(run["seconds_per_iteration"] > 0 for run in res["runs"])
