"""``dclust pointcloud track`` on real .ply / .npy frames in tmp_path: outputs, progress, one-line errors."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

from dclust.apps._scenes import moving_objects_scene
from dclust.apps.pointcloud import tracking_scores
from dclust.io._pointcloud import write_ply

from _support.cli import one_line_error, run, sh

PARAMS = ["--lam", 4, "--T-Q", 10, "--k-tau", 1.1]


@pytest.fixture(scope="module")
def seq(tmp_path_factory):
    d = tmp_path_factory.mktemp("pc") / "frames"
    os.makedirs(d)
    frames = list(moving_objects_scene(n_frames=5, n_points=1_500, n_objects=3, replace_prob=0.0, random_state=2))
    for i, f in enumerate(frames):
        write_ply(d / f"frame_{i:02d}.ply", f.xyz, f.rgb, f.normals)
    return d, frames


def test_track_json_outputs(tmp_path, seq):
    d, frames = seq
    out, tracks, png = tmp_path / "o.zarr", tmp_path / "t.csv", tmp_path / "p.png"
    r = run(["pointcloud", "track", d, out, *PARAMS, "--features", "xyz,normals", "--feature-weights", "1,0.1",
             "--tracks", tracks, "--plot", png, "--plot-frames", "1,3", "--json", "--quiet"])
    assert r.exit_code == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["command"] == "pointcloud track" and res["estimator"] == "DynamicMeans"
    assert res["n_frames"] == 5 and res["n_points"] == 7_500 and res["features"] == ["xyz", "normals"]
    assert res["segments_per_frame"] == [3] * 5 and res["births"] == 3 and res["frames_per_second"] > 0
    labels = zarr.open_group(str(out), mode="r")["labels"][...]
    assert labels.shape == (5, 1_500)
    assert tracking_scores([(f.ids, labels[t]) for t, f in enumerate(frames)])["tracking_accuracy"] == 1.0
    assert tracks.read_text().splitlines()[0] == "id,frame,n_points,x,y,z,birth,death"
    assert len(tracks.read_text().splitlines()) == 1 + 15
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_usage_errors(tmp_path, seq):
    d, _ = seq
    r = run(["pointcloud", "track", d, tmp_path / "o.zarr", *PARAMS, "--spectral"])
    assert r.exit_code == 2 and "--bandwidth" in r.stderr
    r = run(["pointcloud", "track", d, tmp_path / "o.zarr", "--lam", 4, "--T-Q", 0.5, "--k-tau", 1.1])
    assert r.exit_code == 2 and "--T-Q" in r.stderr
    r = run(["pointcloud", "track", d, tmp_path / "o.zarr", *PARAMS, "--features", "xyz,colour"])
    assert r.exit_code == 2 and "features" in r.stderr
    assert os.listdir(tmp_path) == []


def test_data_errors_are_one_line_and_leave_nothing(tmp_path, seq):
    d, _ = seq
    out = tmp_path / "o.zarr"
    bad = tmp_path / "bad"
    os.makedirs(bad)
    np.save(bad / "a.npy", np.zeros((5, 2)))
    r = run(["pointcloud", "track", bad, out, *PARAMS])
    assert r.exit_code == 1
    line = one_line_error(r.stderr)
    assert "frame 0 (a.npy)" in line and "(5, 2)" in line
    assert not out.exists()

    os.makedirs(out)  # an existing output
    (out / "keep.txt").write_text("mine")
    r = run(["pointcloud", "track", d, out, *PARAMS])
    assert r.exit_code == 1 and "--overwrite" in one_line_error(r.stderr)
    assert os.listdir(out) == ["keep.txt"]
    assert sorted(os.listdir(tmp_path)) == ["bad", "o.zarr"]


def test_subprocess_progress_then_unreadable_frame(tmp_path, seq):
    d, _ = seq
    r = sh(["pointcloud", "track", d, tmp_path / "o.zarr", *PARAMS], env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "frames/s" in r.stderr and "frame 5/5" in r.stderr  # the rich progress line
    assert "DynamicMeans" in r.stdout and "frames / s" in r.stdout

    bad = tmp_path / "bad"
    os.makedirs(bad)
    (bad / "x.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 10\nproperty float x\n"
                                b"property float y\nproperty float z\nend_header\n" + b"\0" * 7)
    r = run(["pointcloud", "track", bad, tmp_path / "o2.zarr", *PARAMS])
    assert r.exit_code == 1
    assert "frame 0 (x.ply)" in one_line_error(r.stderr)
    assert sorted(os.listdir(tmp_path)) == ["bad", "o.zarr"]
