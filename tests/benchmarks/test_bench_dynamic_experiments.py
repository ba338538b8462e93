"""The [DM] experiments of benchmarks/ at toy size, end to end as the lead runs them: 8.1 moving Gaussians and the
any-time DP-means read (bench_dynamic.py), 8.5 video colour quantisation (bench_video.py) and the 8.6 point-cloud
protocol (bench_pointcloud.py). Their full-size figures are in docs/reproduction.md."""

from __future__ import annotations

import json

from _support.benchmarks import run_script


def test_bench_dynamic_toy_reports_both_processes_and_the_anytime_read(tmp_path):
    out = tmp_path / "dyn.json"
    r = run_script("bench_dynamic.py", "--steps", 10, "--n", 200_000, "--chunk-rows", 50_000, "--evals", 2,
                   "--data-dir", tmp_path / "data", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    rows = {row["process"]: row for row in res["moving_gaussians"]}
    assert set(rows) == {"paper-code", "per-axis"}
    for row in rows.values():
        for method in ("dmeans", "dpmeans_rerun_all", "dpmeans_per_step"):
            acc = row[method]
            assert 0.0 <= acc["tracking_accuracy"] <= acc["untracked_accuracy"] <= 1.0
        # D-Means keeps its clusters' identities where a memoryless re-run cannot ([DM] Fig. 1)
        assert row["dmeans"]["tracking_accuracy"] > row["dpmeans_rerun_all"]["tracking_accuracy"]
    anytime = res["anytime"]
    assert anytime["n_batches"] == 4 and anytime["n"] == 200_000
    # well-separated blobs: one read of any-time DP-means is batch DP-means' objective (docs/algorithms.md DM4)
    assert anytime["objective_gap_after_one_pass"] <= res["targets"]["objective_gap"]
    assert "objective after one pass vs batch DPMeans" in r.stdout


def test_bench_pointcloud_quick_runs_the_protocol_on_both_scenes(tmp_path):
    out = tmp_path / "pc.json"
    r = run_script("bench_pointcloud.py", "--quick", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["quick"] is True
    assert res["paper_table3"] == {"SD-Means": {"accuracy_pct": 86.8, "seconds": 816.7},
                                   "D-Means": {"accuracy_pct": 53.6, "seconds": 38.1}}
    for scene in ("sparse", "crowded"):
        for method in ("D-Means", "SD-Means"):
            got = res["protocol"][scene][method]
            assert 0.0 <= got["tracking_accuracy"] <= got["untracked_accuracy"] <= 1.0
            assert got["fps"] > 0
    assert res["speed"]["dmeans_30k"]["points_per_frame"] == 30_000


def test_bench_video_quick_compares_dmeans_with_the_per_frame_baselines(tmp_path):
    out = tmp_path / "video.json"
    r = run_script("bench_video.py", "--quick", "--no-sklearn", "--out", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    by_method = {row["method"]: row for row in res["results"]}
    for method in ("decode only (floor)", "dclust D-Means", "dclust D-Means (tau=0.01)", "dclust DP-means per frame"):
        assert method in by_method
    assert any(m.startswith("dclust k-means per frame") for m in by_method)
    for method in ("dclust D-Means", "dclust D-Means (tau=0.01)", "dclust DP-means per frame"):
        row = by_method[method]
        assert 20.0 < row["psnr"] < 60.0 and row["flicker_median"] >= 1.0
    # the firmer temporal prior flickers less than D-Means with the paper's parameters ([DM] 8.5)
    assert by_method["dclust D-Means (tau=0.01)"]["flicker_median"] <= by_method["dclust D-Means"]["flicker_median"]
    checks = next(iter(res["checks"].values()))
    assert set(checks) == {"dclust D-Means", "dclust D-Means (tau=0.01)"}
