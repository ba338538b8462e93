"""benchmarks/bench_pass_floor.py runs end to end at toy size, as a subprocess (as the lead runs it), and its JSON
holds every figure of its table."""

from __future__ import annotations

import json

import pytest

from _support.benchmarks import assert_no_traceback, assert_refused_before_any_work, import_as_worker, run_script

SCRIPT = "bench_pass_floor.py"


def run_bench(*args, cwd=None, timeout=300):
    return run_script(SCRIPT, *args, cwd=cwd, timeout=timeout)


def test_importing_runs_nothing(tmp_path, monkeypatch):
    """Worker processes re-import the script as ``__mp_main__``: that must start no cluster and write nothing."""
    import_as_worker(SCRIPT, tmp_path, monkeypatch)


@pytest.mark.parametrize("bad", [["--iter-lo", "5", "--iter-hi", "5"], ["--chunk-rows", "0"], ["--k", "9", "--n", "8"]])
def test_bad_arguments_are_refused_before_any_work(bad, tmp_path):
    assert_refused_before_any_work(SCRIPT, bad, tmp_path)


def test_toy_run_writes_every_figure(tmp_path):
    out = tmp_path / "out.json"
    r = run_bench("--n", 24_000, "--d", 3, "--k", 4, "--centers", 4, "--chunk-rows", 6_000, "--iter-hi", 3,
                  "--iter-lo", 2, "--repeats", 1, "--data-dir", tmp_path / "data", "--out", out)
    assert r.returncode == 0, f"STDOUT:\n{r.stdout}\nSTDERR:\n{r.stderr}"
    assert_no_traceback(r.stderr)
    res = json.loads(out.read_text())["result"]
    assert (res["n"], res["d"], res["k"], res["chunk_rows"]) == (24_000, 3, 4, 6_000)
    paths = {"read", "sklearn", "threads", "processes", "persisted"}
    assert set(res["per_iter"]) == paths and set(res["cpu_per_iter"]) == paths
    assert res["per_iter"]["read"] > 0 and res["chunk_cpu"]["dclust_block_stats"] > 0
    for name in ("sklearn", "threads", "processes", "persisted"):  # every fit ran hi and lo iterations once
        assert sorted(res["times"][name]) == ["2", "3"] and all(len(v) == 1 for v in res["times"][name].values())
    for name, value in res["ratios"].items():  # a ratio only from positive figures (toy marginals may dip)
        assert value is None or value > 0, (name, value)
    assert "floor = read + scikit-learn" in r.stdout and "CPU seconds per iteration" in r.stdout
