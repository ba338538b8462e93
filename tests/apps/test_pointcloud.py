"""Point-cloud tracking (issue 7): real .ply / .las / .laz / .npy files and Zarr stores written in tmp_path."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import zarr

import dclust
from dclust.apps._scenes import moving_objects_scene
from dclust.apps.pointcloud import PointCloudTracker, track, tracking_scores
from dclust.errors import InvalidDataError, InvalidParameterError, StorageError
from dclust.io._pointcloud import scan_frames, write_las, write_npy, write_ply

DM = dict(lam=4.0, T_Q=10, k_tau=1.1)


@pytest.fixture(scope="module")
def scene():
    """Six frames of 4 moving objects whose sizes differ per frame (so the label store needs padding)."""
    frames = list(moving_objects_scene(n_frames=6, n_points=2_400, n_objects=4, replace_prob=0.0, random_state=3))
    rng = np.random.default_rng(0)
    out = []
    for f in frames:  # drop a different number of points per frame
        keep = np.sort(rng.permutation(len(f))[: len(f) - int(rng.integers(0, 400))])
        out.append(type(f)(f.xyz[keep], f.rgb[keep], f.normals[keep], f.ids[keep]))
    return out


def _write_seq(d, frames, kind):
    os.makedirs(d, exist_ok=True)
    for i, f in enumerate(frames):
        p = os.path.join(d, f"scan_{i}.{kind}")
        if kind == "ply":
            write_ply(p, f.xyz, f.rgb, f.normals)
        elif kind in ("las", "laz"):
            write_las(p, f.xyz, f.rgb)
        else:
            write_npy(p, f.xyz, f.rgb, f.normals)
    return d


def _listing(d):
    return sorted(os.listdir(d))


# ------------------------------------------------------------------------------------------------------ readers


@pytest.mark.parametrize("kind", ["ply", "las", "laz", "npy"])
def test_files_round_trip(tmp_path, scene, kind):
    d = _write_seq(tmp_path / "seq", scene[:3], kind)
    src = scan_frames(str(d))
    assert len(src) == 3 and src.counts.tolist() == [len(f) for f in scene[:3]]
    assert src.max_points == max(len(f) for f in scene[:3])
    has = {"ply": {"rgb", "normals"}, "las": {"rgb"}, "laz": {"rgb"}, "npy": {"rgb", "normals"}}[kind]
    assert src.common_attributes() == has
    for t in range(3):
        fr = src.read(t)
        np.testing.assert_allclose(fr.xyz, scene[t].xyz, atol=1e-4 if kind in ("las", "laz") else 1e-5)
        np.testing.assert_allclose(fr.rgb, scene[t].rgb, atol=1 / 255 if kind == "ply" else 1e-4)
        if "normals" in has:
            np.testing.assert_allclose(fr.normals, scene[t].normals, atol=1e-6)
        else:
            assert fr.normals is None
    if kind == "laz":  # really compressed, not plain LAS under another name
        assert os.path.getsize(d / "scan_0.laz") < 0.6 * (len(scene[0]) * 36)


def test_glob_natural_order_and_zarr_layouts(tmp_path, scene):
    d = tmp_path / "g"
    os.makedirs(d)
    for i in (10, 2, 1):  # natural order: 1, 2, 10 (not 1, 10, 2)
        write_npy(d / f"f{i}.npy", scene[i % 6].xyz)
    src = scan_frames(str(d / "f*.npy"))
    assert [f.name for f in src.frames] == ["f1.npy", "f2.npy", "f10.npy"]
    np.testing.assert_allclose(src.read(2).xyz, scene[4].xyz, atol=1e-5)

    T, P = 3, max(len(f) for f in scene[:3])
    padded = np.full((T, P, 6), np.nan, np.float32)
    for t, f in enumerate(scene[:3]):
        padded[t, : len(f)] = np.concatenate([f.xyz, f.rgb], axis=1)
    zarr.create_array(store=str(tmp_path / "a.zarr"), data=padded)
    src = scan_frames(str(tmp_path / "a.zarr"))
    assert src.counts.tolist() == [len(f) for f in scene[:3]] and src.common_attributes() == {"rgb"}
    np.testing.assert_allclose(src.read(1).rgb, scene[1].rgb, atol=1e-6)

    g = zarr.create_group(store=str(tmp_path / "g.zarr"))
    g.create_array("points", data=np.nan_to_num(padded[..., :3]))
    g.create_array("counts", data=np.array([len(f) for f in scene[:3]]))
    src = scan_frames(str(tmp_path / "g.zarr"))
    assert src.counts.tolist() == [len(f) for f in scene[:3]]
    np.testing.assert_allclose(src.read(2).xyz, scene[2].xyz, atol=1e-5)

    h = zarr.create_group(store=str(tmp_path / "h.zarr"))
    for t in (1, 0):
        h.create_array(str(t), data=scene[t].xyz)
    src = scan_frames(str(tmp_path / "h.zarr"))
    assert src.counts.tolist() == [len(scene[0]), len(scene[1])]
    np.testing.assert_array_equal(src.read(1).xyz, scene[1].xyz)


# ------------------------------------------------------------------------------------------------------ the job


def test_track_ply_sequence_persistent_ids_tracks_and_plot(tmp_path, scene):
    d = _write_seq(tmp_path / "seq", scene, "ply")
    out, tracks, png = tmp_path / "out.zarr", tmp_path / "tracks.parquet", tmp_path / "seg.png"
    events = []
    with dclust.on_progress(events.append):
        r = track(str(d), str(out), **DM, features="xyz,rgb", feature_weights="1,0.5", tracks=str(tracks),
                  plot=str(png), plot_frames="0,-1")
    frames_events = [e for e in events if e.estimator == "PointCloudTracker"]
    assert [e.iteration for e in frames_events] == list(range(1, 7))
    assert all(e.extra["n_points"] == len(f) for e, f in zip(frames_events, scene))

    g = zarr.open_group(str(out), mode="r")
    labels, counts = g["labels"][...], g["counts"][...]
    assert labels.dtype == np.int32 and labels.shape == (6, max(len(f) for f in scene))
    assert counts.tolist() == [len(f) for f in scene]
    steps = []
    for t, f in enumerate(scene):
        assert (labels[t, len(f):] == -1).all() and (labels[t, : len(f)] >= 0).all()
        steps.append((f.ids, labels[t, : len(f)]))
    scores = tracking_scores(steps)
    assert scores["tracking_accuracy"] > 0.99 and scores["id_consistency"] == 1.0
    assert g.attrs["complete"] is True and g.attrs["features"] == ["xyz", "rgb"]
    assert r.n_frames == 6 and r.frames_per_second > 0

    import pyarrow.parquet as pq

    tab = pq.read_table(str(tracks)).to_pandas()
    assert list(tab.columns) == ["id", "frame", "n_points", "x", "y", "z", "birth", "death"]
    for _, row in tab.iterrows():  # centroid = mean of that segment's points in that frame
        f, lab = scene[int(row.frame)], labels[int(row.frame), : len(scene[int(row.frame)])]
        pts = f.xyz[lab == row.id]
        assert len(pts) == row.n_points
        np.testing.assert_allclose([row.x, row.y, row.z], pts.mean(axis=0), atol=1e-4)
    per_id = tab.groupby("id").frame.agg(["min", "max"])
    assert (per_id["min"].values == tab.groupby("id").birth.first().values).all()
    assert (per_id["max"].values == tab.groupby("id").death.first().values).all()

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.shape[1] > 1.5 * img.shape[0] and img[..., :3].std() > 0.05  # two panels, not blank
    assert _listing(tmp_path) == ["out.zarr", "seg.png", "seq", "tracks.parquet"]


def test_track_is_deterministic_and_csv_tracks(tmp_path, scene):
    d = _write_seq(tmp_path / "seq", scene[:3], "npy")
    a = track(str(d), str(tmp_path / "a.zarr"), **DM, fit_sample=1_000, tracks=str(tmp_path / "t.csv"))
    b = track(str(d), str(tmp_path / "b.zarr"), **DM, fit_sample=1_000)
    la, lb = (zarr.open_group(p.out, mode="r")["labels"][...] for p in (a, b))
    np.testing.assert_array_equal(la, lb)
    import csv

    with open(tmp_path / "t.csv") as f:
        rows = list(csv.DictReader(f))
    assert {int(r["frame"]) for r in rows} == {0, 1, 2}
    assert sum(int(r["n_points"]) for r in rows) == sum(len(f) for f in scene[:3])


def test_spectral_tracking_on_las(tmp_path):
    frames = list(moving_objects_scene(n_frames=4, n_points=1_200, n_objects=3, replace_prob=0.0, random_state=5))
    d = _write_seq(tmp_path / "seq", frames, "las")
    r = track(str(d), str(tmp_path / "o.zarr"), lam=20.0, T_Q=10, k_tau=1.1, spectral=True, kernel="mst",
              bandwidth=0.4, fit_sample=300)
    assert r.estimator == "SpectralDynamicMeans"
    labels = zarr.open_group(r.out, mode="r")["labels"][...]
    scores = tracking_scores([(f.ids, labels[t, : len(f)]) for t, f in enumerate(frames)])
    assert scores["mean_frame_accuracy"] > 0.9 and scores["id_consistency"] > 0.9


def test_tracker_sample_fit_assigns_every_point():
    frames = list(moving_objects_scene(n_frames=3, n_points=6_000, n_objects=4, replace_prob=0.0, random_state=1))
    tr = PointCloudTracker(**DM, fit_sample=800)
    steps = [(f.ids, tr.step(f)) for f in frames]
    assert all(s[1].shape == (6_000,) for s in steps)
    assert tr.history_["n_samples"] == [800, 800, 800]
    assert tracking_scores(steps)["tracking_accuracy"] > 0.99


def test_tracking_scores_counts_id_switches():
    y = np.array([0, 0, 1, 1])
    steps = [(y, np.array([5, 5, 6, 6])), (y, np.array([5, 5, 6, 6])), (y, np.array([7, 7, 6, 6]))]
    s = tracking_scores(steps)
    assert s["untracked_accuracy"] == 1.0 and s["tracking_accuracy"] == pytest.approx(10 / 12)
    assert s["id_consistency"] == pytest.approx(3 / 4) and s["objects_without_switch"] == 0.5


# ------------------------------------------------------------------------------------------------------ bad input


def test_wrong_point_dimensions(tmp_path):
    d = tmp_path / "seq"
    os.makedirs(d)
    np.save(d / "a.npy", np.zeros((10, 3)))
    np.save(d / "b.npy", np.zeros((10, 4)))
    with pytest.raises(InvalidDataError, match=r"frame 1 \(b.npy\).*shape \(10, 4\)"):
        track(str(d), str(tmp_path / "o.zarr"), **DM)
    with pytest.raises(InvalidDataError, match="3 dimensions"):
        zarr.create_array(store=str(tmp_path / "z.zarr"), data=np.zeros((4, 3)))
        scan_frames(str(tmp_path / "z.zarr"))
    assert _listing(tmp_path) == ["seq", "z.zarr"]


def test_missing_attribute_and_bad_parameters(tmp_path, scene):
    d = _write_seq(tmp_path / "seq", scene[:2], "las")
    with pytest.raises(InvalidDataError, match="'normals'"):
        track(str(d), str(tmp_path / "o.zarr"), **DM, features="xyz,normals")
    with pytest.raises(InvalidParameterError, match="feature_weights"):
        track(str(d), str(tmp_path / "o.zarr"), **DM, features="xyz,rgb", feature_weights="1")
    with pytest.raises(InvalidParameterError, match="T_Q"):
        track(str(d), str(tmp_path / "o.zarr"), lam=1.0, T_Q=0.5, k_tau=1.1)
    with pytest.raises(InvalidParameterError, match="plot_frames"):
        track(str(d), str(tmp_path / "o.zarr"), **DM, plot=str(tmp_path / "p.png"), plot_frames="7")
    assert _listing(tmp_path) == ["seq"]


def test_missing_optional_dependency(tmp_path, scene, monkeypatch):
    d = _write_seq(tmp_path / "seq", scene[:1], "ply")
    las = write_las(tmp_path / "x.laz", scene[0].xyz)
    monkeypatch.setitem(sys.modules, "plyfile", None)  # what Python does when the package is absent
    with pytest.raises(ImportError, match=r"plyfile.*pip install 'dclust\[pointcloud\]'"):
        track(str(d), str(tmp_path / "o.zarr"), **DM)
    monkeypatch.setitem(sys.modules, "laspy", None)
    with pytest.raises(ImportError, match=r"laspy.*dclust\[pointcloud\]"):
        track(las, str(tmp_path / "o.zarr"), **DM)
    assert _listing(tmp_path) == ["seq", "x.laz"]


def test_empty_and_unreadable_frames_leave_no_output(tmp_path, scene):
    d = _write_seq(tmp_path / "seq", scene[:2], "ply")
    write_ply(d / "scan_2.ply", np.zeros((0, 3)))
    with pytest.raises(InvalidDataError, match=r"frame 2 \(scan_2.ply\).*empty frame"):
        track(str(d), str(tmp_path / "o.zarr"), **DM)
    (d / "scan_2.ply").write_bytes(b"this is not a point cloud")
    with pytest.raises(InvalidDataError, match=r"frame 2 \(scan_2.ply\).*readable"):
        track(str(d), str(tmp_path / "o.zarr"), **DM)
    # a valid header whose body is truncated: found only when the frame is read, after frames 0 and 1 were done
    good = (d / "scan_1.ply").read_bytes()
    (d / "scan_2.ply").write_bytes(good[: len(good) // 2])
    with pytest.raises(InvalidDataError, match=r"frame 2 \(scan_2.ply\)"):
        track(str(d), str(tmp_path / "o.zarr"), **DM, tracks=str(tmp_path / "t.csv"), plot=str(tmp_path / "p.png"))
    assert _listing(tmp_path) == ["seq"]  # no store, no table, no plot, no temporary names
    assert _listing(d) == ["scan_0.ply", "scan_1.ply", "scan_2.ply"]


def test_existing_outputs_need_overwrite(tmp_path, scene):
    d = _write_seq(tmp_path / "seq", scene[:2], "npy")
    first = track(str(d), str(tmp_path / "o.zarr"), **DM, tracks=str(tmp_path / "t.csv"))
    before = zarr.open_group(first.out, mode="r")["labels"][...]
    with pytest.raises(StorageError, match="already exists"):
        track(str(d), str(tmp_path / "o.zarr"), **DM)
    with pytest.raises(StorageError, match="existing file"):
        track(str(d), str(tmp_path / "o2.zarr"), **DM, tracks=str(tmp_path / "t.csv"))
    np.testing.assert_array_equal(zarr.open_group(first.out, mode="r")["labels"][...], before)
    assert _listing(tmp_path) == ["o.zarr", "seq", "t.csv"]
    track(str(d), str(tmp_path / "o.zarr"), lam=0.5, T_Q=10, k_tau=1.1, tracks=str(tmp_path / "t.csv"),
          overwrite=True)
    assert zarr.open_group(first.out, mode="r").attrs["lam"] == 0.5
