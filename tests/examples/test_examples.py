"""The scripts in examples/ run end to end, at toy size, as subprocesses (as a user runs them)."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import dclust

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ["demo.py", "kmeans_zarr.py", "dpmeans_xarray.py", "pointcloud_track.py", "video_quantize.py"]


def run_example(script, *args, timeout=300):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "160"}
    env.pop("DCLUST_SCHEDULER", None)
    r = subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=timeout)
    assert r.returncode == 0, f"{script} failed:\nSTDOUT:\n{r.stdout}\nSTDERR:\n{r.stderr}"
    assert "Traceback" not in r.stderr, r.stderr
    return r


def table_row(stdout, name):
    """The cells of the summary-table row that starts with ``name`` (box characters stripped)."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│|┃]", line) if c.strip()]
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name!r} in:\n{stdout}")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_and_bad_sizes(script, tmp_path):
    r = subprocess.run([sys.executable, str(EXAMPLES / script), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--n" in r.stdout
    r = subprocess.run([sys.executable, str(EXAMPLES / script), "--n", "0"], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 2 and "--n" in r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_importing_runs_nothing(script, tmp_path, monkeypatch):
    """The ``__main__`` guard: worker processes re-import the script, which must not start any work."""
    monkeypatch.chdir(tmp_path)
    namespace = runpy.run_path(str(EXAMPLES / script), run_name="__mp_main__")
    assert callable(namespace["main"])
    assert os.listdir(tmp_path) == []


def test_demo(tmp_path):
    out = tmp_path / "demo-output"
    # A previous run's outputs are replaced: leave a stale store of another shape where the points go.
    dclust.write_array(np.zeros((10, 2), np.float32), out / "points.zarr")
    n, k = 20_000, 16
    r = run_example("demo.py", "--out", out, "--n", n, "--chunk-rows", 5_000, "--workers", 1, "--plot-points", 5_000)

    assert zarr.open_array(str(out / "points.zarr"), mode="r").shape == (n, 8)
    truth = zarr.open_array(str(out / "truth.zarr"), mode="r")[...]
    for name in ("dpmeans", "kmeans"):
        labels = zarr.open_array(str(out / f"labels-{name}.zarr"), mode="r")[...]
        assert labels.shape == (n,) and labels.min() >= 0
        assert dclust.metrics.adjusted_rand_score(truth, labels) > 0.9
    assert isinstance(dclust.load(out / "model-dpmeans.zarr"), dclust.DPMeans)
    km = dclust.load(out / "model-kmeans.zarr")
    assert isinstance(km, dclust.KMeans) and km.cluster_centers_.shape == (k, 8)

    png = out / "demo.png"
    assert png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.ndim == 3 and img.shape[1] > img.shape[0] > 200  # a wide figure: scatter plots + objectives
    assert img[..., :3].std() > 0.05  # not blank

    assert "local Dask cluster: 1 worker(s)" in r.stdout
    header = table_row(r.stdout, "model")
    assert header == ["model", "K", "objective", "ARI vs truth", "iterations", "seconds"]
    for name in ("DPMeans", "KMeans"):
        _, k_found, objective, ari, iterations, seconds = table_row(r.stdout, name)
        assert int(k_found) >= 1 and float(objective) > 0 and int(iterations) >= 1 and float(seconds) >= 0
        assert float(ari) > 0.9
    assert int(table_row(r.stdout, "KMeans")[1]) == k
    assert sorted(p.name for p in out.iterdir()) == [
        "demo.png", "labels-dpmeans.zarr", "labels-kmeans.zarr", "model-dpmeans.zarr", "model-kmeans.zarr",
        "points.zarr", "truth.zarr",
    ]


def test_kmeans_zarr(tmp_path):
    out = tmp_path / "km"
    n, d, k = 20_000, 3, 4
    r = run_example("kmeans_zarr.py", "--out", out, "--n", n, "--d", d, "--k", k, "--chunk-rows", 5_000)
    assert zarr.open_array(str(out / "points.zarr"), mode="r").shape == (n, d)
    labels = zarr.open_array(str(out / "labels.zarr"), mode="r")
    assert labels.shape == (n,) and labels.chunks == (5_000,)
    km = dclust.load(out / "model.zarr")
    assert km.cluster_centers_.shape == (k, d)
    np.testing.assert_array_equal(labels[...], km.predict(zarr.open_array(str(out / "points.zarr"))[...]))
    assert "X: 20,000 x 3 float32, 4 row chunks" in r.stdout
    m = re.search(r"adjusted Rand index ([\d.]+)\s+NMI ([\d.]+)\s+matched accuracy ([\d.]+)", r.stdout)
    assert m, r.stdout
    assert all(float(v) > 0.95 for v in m.groups())


def test_dpmeans_xarray(tmp_path):
    import xarray as xr

    out = tmp_path / "regimes.zarr"
    n = 20_000
    r = run_example("dpmeans_xarray.py", "--n", n, "--chunk-rows", 5_000, "--out", out)
    ds = xr.open_zarr(str(out), consolidated=False)
    assert ds["cluster"].dims == ("time",) and ds.sizes["time"] == n
    assert np.issubdtype(ds["time"].dtype, np.datetime64)
    assert str(ds["time"].values[0]).startswith("2024-01-01T00:00")
    m = re.search(r"K = (\d+)", r.stdout)
    assert m and int(m.group(1)) == 5
    assert int(ds["cluster"].max()) == 4
    assert "labels: DataArray dims ('time',)" in r.stdout
    ari = float(re.search(r"adjusted Rand index vs the true regimes: ([\d.]+)", r.stdout).group(1))
    assert ari > 0.95


def test_rings_prints_both_algorithms_beside_the_paper():
    r = run_example("rings.py", "--steps", 3, "--points", 120)
    for name, paper in (("SD-Means", "75.1"), ("D-Means", "18.7")):
        cells = table_row(r.stdout.replace("  ", "│"), name)
        assert paper in cells
        acc = float(cells[1])
        assert 0.0 <= acc <= 100.0


def test_uci_rdpmeans_on_iris_beats_dpmeans_with_links():
    r = run_example("uci_rdpmeans.py", "--datasets", "iris", "--r", 0.05, "--p", 1.0, "--seeds", 1)
    m = re.search(r"RDP-means F/ARI/NMI ([\d.]+)/([\d.]+)/([\d.]+)\s+DP-means ([\d.]+)/([\d.]+)/([\d.]+)", r.stdout)
    assert m, r.stdout
    rdp, dp = [float(v) for v in m.groups()[:3]], [float(v) for v in m.groups()[3:]]
    assert all(a > b for a, b in zip(rdp, dp)), (rdp, dp)


def test_gmpr_constraints_reports_purity_per_link_count():
    r = run_example("gmpr_constraints.py", "--trials", 1, "--links", 0, 64)
    rows = re.findall(r"^\s+(\d+) \|\s+([\d.]+) ± [\d.]+ \|\s+([\d.]+) ± [\d.]+$", r.stdout, flags=re.M)
    assert [int(n) for n, *_ in rows] == [0, 64, 0, 64], r.stdout
    assert all(0 < float(v) <= 1 for _, *vals in rows for v in vals)


def test_pointcloud_track_prints_both_algorithms_beside_the_paper(tmp_path):
    tracks = tmp_path / "tracks.csv"
    r = run_example("pointcloud_track.py", "--frames", 4, "--n", 1_200, "--objects", 3, "--out", tracks)
    assert "wrote 4 .ply frames of 1,200 points" in r.stdout
    for name, paper in (("D-Means", 53.6), ("SD-Means", 86.8)):
        m = re.search(rf"^{name}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", r.stdout, re.M)
        assert m, r.stdout
        acc, frame_acc, consistency, ids, fps, paper_acc = map(float, m.groups())
        assert acc > 90 and frame_acc > 90 and consistency > 0.9 and ids >= 3 and fps > 0 and paper_acc == paper
    assert tracks.read_text().splitlines()[0] == "id,frame,n_points,x,y,z,birth,death"


def test_video_quantize(tmp_path):
    out = tmp_path / "v"
    r = run_example("video_quantize.py", "--n", 6, "--width", 64, "--height", 48, "--out", out)
    for name in ("dmeans", "kmeans", "dpmeans"):
        rep = json.loads((out / f"{name}-report.json").read_text())
        assert len(rep["frames"]) == 6 and rep["summary"]["psnr"] > 25
        assert (out / f"{name}.mp4").is_file() and (out / f"{name}-palette.png").is_file()
    assert "median |f-1|" in r.stdout


def test_uci_side_information_prints_every_method_beside_the_paper():
    r = run_example("uci_side_information.py", "--datasets", "iris", "--r", 0.05, "--p", 1.0, "--trials", 1,
                    "--tv-sweeps", 5)
    methods = ("K-means", "DP-means", "RDP-means", "TVClust (Gibbs)", "TVClust (variational)", "MPCK-means", "LCVQE")
    rows = {m: table_row(r.stdout, m) for m in methods}
    rdp, dp = ([float(v) for v in rows[m][1].split("/")] for m in ("RDP-means", "DP-means"))
    assert all(a > b for a, b in zip(rdp, dp)), (rdp, dp)
    assert all(0.0 <= float(v) <= 1.0 for cells in rows.values() for v in cells[1].split("/"))
    assert rows["RDP-means"][2] == "0.86/0.80/0.80" and rows["MPCK-means"][2] == "0.53/0.29/0.30"
    assert "RDP-means F > DP-means F (cells averaged over datasets): 1/1 cells" in r.stdout
