"""benchmarks/bench_rings.py ([DM] 8.2) runs end to end at toy size and writes its table, contour and plot."""

from __future__ import annotations

import json

from _support.benchmarks import run_script

METHODS = ("sdmeans[mst-rss]", "sdmeans[mst]", "sdmeans[mst-rss,kernel-support]", "dmeans")


def test_toy_run_writes_table_contour_and_plot(tmp_path):
    out, png = tmp_path / "rings.json", tmp_path / "rings.png"
    r = run_script("bench_rings.py", "--steps", 3, "--trials", 1, "--noises", 0.01, "--grid", 2, "--grid-steps", 2,
                   "--out", out, "--plot", png, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    rows = {(row["process"], row["noise"], row["method"]) for row in res["table"]}
    assert rows == {(p, n, m) for p in ("paper-code", "per-axis") for n in (0.01,) for m in METHODS}
    for row in res["table"]:
        assert 0.0 <= row["accuracy"] <= row["untracked_accuracy"] + 1e-9 <= 100.0 + 1e-9
    c = res["contour"]
    assert (c["process"], c["noise"]) == ("paper-code", 0.01)
    assert len(c["accuracy"]) == 2 and len(c["accuracy"][0]) == 2
    assert "75.1" in res["report"] and "18.7" in res["report"] and "paper-code" in res["report"]
    assert png.stat().st_size > 1000


def test_bad_arguments_are_refused(tmp_path):
    for bad in (["--trials", 0], ["--processes", "uniform"], ["--grid", 1]):
        r = run_script("bench_rings.py", *bad, "--out", tmp_path / "x.json", cwd=tmp_path, timeout=60)
        assert r.returncode == 2 and "error:" in r.stderr and not (tmp_path / "x.json").exists()
