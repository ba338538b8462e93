"""benchmarks/bench_pass_timeline.py runs end to end at toy size, as a subprocess (as the lead runs it), and
``_common.pass_timeline`` cuts a task stream into passes."""

from __future__ import annotations

import json
import sys

import pytest

from _support.benchmarks import (
    BENCHMARKS, assert_no_traceback, assert_refused_before_any_work, import_as_worker, run_script,
)

SCRIPT = "bench_pass_timeline.py"


def test_importing_runs_nothing(tmp_path, monkeypatch):
    import_as_worker(SCRIPT, tmp_path, monkeypatch)


@pytest.mark.parametrize("bad", [["--iters", "1"], ["--n", "3", "--k", "4"], ["--chunk-rows", "0"]])
def test_bad_arguments_are_refused_before_any_work(bad, tmp_path):
    assert_refused_before_any_work(SCRIPT, bad, tmp_path)


def test_a_task_stream_is_cut_into_passes_per_worker():
    sys.path.insert(0, str(BENCHMARKS))
    from _common import pass_timeline

    def rec(key, worker, start, stop):
        return {"key": key, "worker": worker, "startstops": [{"action": "compute", "start": start, "stop": stop}]}

    records = [rec("dclust-pass-1", "a", 0.0, 0.10), rec("dclust-pass-1", "b", 0.0, 0.20),
               rec("dclust-tree-reduce", "a", 0.20, 0.21), rec("dclust-pass-2", "a", 0.30, 0.35),
               rec("dclust-pass-2", "a", 0.35, 0.40), rec("dclust-pass-2", "b", 0.30, 0.38)]
    first, second = pass_timeline(records)
    assert first["tasks"] == {"a": 1, "b": 1} and first["span_s"] == pytest.approx(0.2) and first["gap_s"] is None
    assert second["tasks"] == {"a": 2, "b": 1} and second["busy_s"]["a"] == pytest.approx(0.1)
    assert second["gap_s"] == pytest.approx(0.1) and second["span_s"] == pytest.approx(0.1)


def test_toy_run_times_every_pass(tmp_path):
    out = tmp_path / "out.json"
    r = run_script(SCRIPT, "--n", 40_000, "--d", 3, "--k", 4, "--centers", 4, "--chunk-rows", 10_000, "--iters", 3,
                   "--persist-first", "--data-dir", tmp_path / "data", "--out", out)
    assert r.returncode == 0, f"STDOUT:\n{r.stdout}\nSTDERR:\n{r.stderr}"
    assert_no_traceback(r.stderr)
    fits = json.loads(out.read_text())["fits"]
    assert set(fits) == {"kmeans", "gmpr"}
    for fit in fits.values():
        assert len(fit["passes"]) >= 3 and fit["median_iteration_s"] > 0
        assert all(sum(p["tasks"].values()) >= 1 and p["span_s"] >= 0 for p in fit["passes"])
        assert all(p["gap_s"] > 0 for p in fit["passes"][1:])
