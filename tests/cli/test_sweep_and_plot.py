"""``dclust sweep dpmeans`` and ``dclust plot ...`` on real Zarr stores in ``tmp_path`` and a real
``distributed.LocalCluster`` (one for the module, via ``--scheduler``); outputs compared with the public API."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

import dclust
from dclust.apps.video import VideoOptions, quantize_video, synthetic_frames
from dclust.model_selection import sweep_dpmeans

from _support.cli import ok_json, one_line_error, read, run

pytest.importorskip("matplotlib")
from matplotlib.image import imread  # noqa: E402

TRUE_K = 4


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """4 well-separated unit blobs in 3-D (centres 30 apart), 4,000 rows in chunks of 1,000."""
    rng = np.random.default_rng(7)
    centers = np.array([[0, 0, 0], [30, 0, 0], [0, 30, 0], [0, 0, 30]], float)
    y = rng.integers(0, TRUE_K, size=4000)
    X = centers[y] + rng.normal(size=(4000, 3))
    path = str(tmp_path_factory.mktemp("sweep") / "x.zarr")
    dclust.write_array(X, path, chunks=1000)
    return path, X, y


def drawn(path):
    img = imread(path)
    assert img.shape[0] > 100 and img.shape[1] > 100 and img[..., :3].std() > 0.05
    return img


def test_sweep_json_suggests_the_true_k_and_equals_the_api(store, address, tmp_path):
    x, X, _ = store
    png = tmp_path / "sweep.png"
    out = ok_json(run(["sweep", "dpmeans", x, "--n-lams", 8, "--sample-size", 600, "--seed", 3, "--plot", png,
                       "--json", "--quiet", "--scheduler", address]))
    assert out["command"] == "sweep dpmeans" and out["n_passes"] == 2 and out["scheduler"] == address
    assert out["suggested_n_clusters"] == TRUE_K and out["rule"].startswith("widest K plateau")
    expected = sweep_dpmeans(X, n_lams=8, sample_size=600, random_state=3)
    assert out["sweep"]["lam"] == pytest.approx(expected.lam, rel=1e-12)
    assert out["sweep"]["n_clusters"] == expected.n_clusters
    assert out["sweep"]["objective"] == pytest.approx(expected.objective, rel=1e-9)
    assert out["suggested_lam"] == pytest.approx(expected.suggested_lam, rel=1e-12)
    drawn(png)
    # the table, and the plot of the JSON by 'dclust plot sweep'
    r = run(["sweep", "dpmeans", x, "--lams", "1,50,5000", "--sample-size", 500, "--quiet", "--scheduler", address],
            env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    assert "<- suggested" in r.stdout and "dclust fit dpmeans" in r.stdout and "passes over the data" in r.stdout
    (tmp_path / "sweep.json").write_text(json.dumps(out))
    got = ok_json(run(["plot", "sweep", tmp_path / "sweep.json", "--out", tmp_path / "again.png", "--json"]))
    assert got["n_candidates"] == 8 and got["suggested_lam"] == out["suggested_lam"]
    drawn(tmp_path / "again.png")


def test_fit_dpmeans_without_lam_points_at_sweep(store, tmp_path):
    x, _, _ = store
    r = run(["fit", "dpmeans", x, "--labels", tmp_path / "l.zarr", "--model", tmp_path / "m.zarr"])
    assert r.exit_code == 2
    text = " ".join(r.stderr.replace("│", " ").split())
    assert f"dclust sweep dpmeans {x}" in text and "exactly one of --k" in text
    assert os.listdir(tmp_path) == []


def test_sweep_errors_before_any_work(store, tmp_path):
    x, _, _ = store
    r = run(["sweep", "dpmeans", x, "--lams", "1,abc"])
    assert r.exit_code == 2 and "--lams" in r.stderr
    (tmp_path / "s.png").write_bytes(b"old")
    r = run(["sweep", "dpmeans", x, "--plot", tmp_path / "s.png"])  # no --scheduler: fails before any cluster
    assert r.exit_code == 1 and "already exists" in one_line_error(r.stderr)
    assert (tmp_path / "s.png").read_bytes() == b"old"
    r = run(["plot", "clusters", x, "--out", tmp_path / "c.png"])
    assert r.exit_code == 2 and "--model" in r.stderr


def test_plot_commands_from_real_runs(store, address, tmp_path):
    x, X, y = store
    # a fit, its history and clusters (by the model and by the stored labels)
    labels, model = tmp_path / "l.zarr", tmp_path / "m.zarr"
    ok_json(run(["fit", "dpmeans", x, "--lam", 200, "--labels", labels, "--model", model, "--seed", 0, "--json",
                 "--quiet", "--scheduler", address]))
    fitted = dclust.load(str(model))
    out = ok_json(run(["plot", "history", model, "--out", tmp_path / "h.png", "--json"]))
    assert out["n_iterations"] == len(fitted.objective_history_) and out["estimator"] == "DPMeans"
    drawn(tmp_path / "h.png")
    for flag, value, png in [("--model", model, "c1.png"), ("--labels", labels, "c2.png")]:
        out = ok_json(run(["plot", "clusters", x, flag, value, "--out", tmp_path / png, "--sample-size", 500,
                           "--json", "--quiet", "--scheduler", address]))
        assert out["sample_size"] == 500
        drawn(tmp_path / png)
    # links: a links CSV over the rows and the labels of the fit
    i, j = np.arange(0, 40), np.arange(40, 80)
    csv = tmp_path / "links.csv"
    csv.write_text("i,j,type\n" + "".join(f"{a},{b},{'must' if y[a] == y[b] else 'cannot'}\n" for a, b in zip(i, j)))
    out = ok_json(run(["plot", "links", labels, "--constraints", csv, "--out", tmp_path / "links.png", "--json"]))
    expected = dclust.metrics.link_satisfaction(read(labels), dclust.ConstraintGraph.from_pairs(
        i, j, y[i] == y[j], n_samples=len(y)))
    assert out["must_total"] + out["cannot_total"] == 40 and out["fraction"] > 0.9  # the fit found the blobs
    assert {k: out[k] for k in expected} == expected
    drawn(tmp_path / "links.png")


def test_plot_tracks_and_palette(address, tmp_path):
    rng = np.random.default_rng(0)
    centers = [[(0, 0), (8, 0)]] * 2 + [[(0, 8), (8, 0)]] * 2 + [[(0, 8), (0, 0)]] * 2
    X = np.concatenate([np.array(c)[rng.integers(2, size=200)] + rng.normal(scale=0.3, size=(200, 2))
                        for c in centers])
    x, labels = tmp_path / "s.zarr", tmp_path / "ids.zarr"
    dclust.write_array(X, str(x), chunks=400)
    ok_json(run(["stream", "dmeans", x, "--batch-rows", 200, "--lam", 9, "--T-Q", 10, "--k-tau", 1.1, "--labels",
                 labels, "--seed", 0, "--json", "--quiet", "--scheduler", address]))
    out = ok_json(run(["plot", "tracks", labels, "--batch-rows", 200, "--out", tmp_path / "t.png", "--json"]))
    assert out["n_steps"] == 6 and out["title"] == "3 tracks over 6 steps (1 revival)"
    drawn(tmp_path / "t.png")
    frames = np.stack(list(synthetic_frames(3, 24, 16, seed=1)))
    src = str(tmp_path / "v.zarr")
    z = zarr.create_array(store=src, shape=frames.shape, dtype=np.uint8, chunks=(1, 16, 24, 3))
    z[...] = frames
    quantize_video(src, tmp_path / "q.zarr", VideoOptions(fit_sample=200, report=tmp_path / "report.json"))
    out = ok_json(run(["plot", "palette", tmp_path / "report.json", "--out", tmp_path / "p.svg", "--json"]))
    assert out["n_frames"] == 3 and (tmp_path / "p.svg").read_text().lstrip().startswith("<?xml")
    r = run(["plot", "palette", tmp_path / "missing.json", "--out", tmp_path / "p2.png"])
    assert r.exit_code == 1 and "does not exist" in one_line_error(r.stderr)
