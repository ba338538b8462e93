"""dclust.plot: every figure rendered to a PNG from real fitted models (Zarr stores in tmp_path, a real video job,
a real stream, a real constrained fit); size and non-blank content checked; errors; the lazy import."""

from __future__ import annotations

import doctest
import subprocess
import sys

import dask
import numpy as np
import pytest
import zarr

import dclust
from dclust import plot
from dclust.apps.video import VideoOptions, quantize_video, synthetic_frames
from dclust.errors import InvalidDataError, InvalidParameterError, NotFittedError, StorageError
from dclust.model_selection import sweep_dpmeans
from dclust.plot import _figures

pytest.importorskip("matplotlib")  # the 'plot' extra: installed by the 'test'/'all' extras this suite runs with
from matplotlib.image import imread  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _sync_scheduler():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def blobs_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("plot")
    b = dclust.make_blobs(3000, 5, 4, cluster_std=0.7, chunk_rows=700, random_state=1)
    path = str(d / "x.zarr")
    dclust.write_array(b.X, path)
    return path


def check_png(path, width, height):
    """A real PNG of the figure's size whose pixels are not all alike (something was drawn)."""
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    img = imread(path)
    assert img.shape[:2] == (height, width), img.shape
    gray = img[..., :3].mean(axis=2)
    assert gray.std() > 0.05, gray.std()  # far from blank
    assert (gray < 0.5).mean() > 0.002 and (gray > 0.9).mean() > 0.2  # ink on a light background
    return img


def test_clusters_of_a_fitted_model_on_a_store(blobs_store, tmp_path):
    X = dclust.open_array(blobs_store)
    dp = dclust.DPMeans(n_clusters=4, random_state=0).fit(X)
    fig = plot.plot_clusters(blobs_store, model=dp, sample_size=800)
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("PC 1") and "800 of 3,000 rows" in ax.get_title()
    out = plot.save_figure(fig, tmp_path / "clusters.png")
    img = check_png(out, 640, 480)
    colored = np.abs(img[..., 0] - img[..., 2]) > 0.2  # cluster colors, not only black and white
    assert colored.mean() > 0.002
    # labels given instead (dask, only the sampled entries are read); 2-D data is drawn on its own features
    fig2 = plot.plot_clusters(X[:, :2], dp.predict(X), sample_size=300, random_state=2)
    assert fig2.axes[0].get_xlabel() == "feature 0"
    check_png(plot.save_figure(fig2, tmp_path / "labels.png", dpi=50), 320, 240)


def test_objective_and_k_per_iteration(blobs_store, tmp_path):
    events = []
    with dclust.on_progress(events.append):
        dp = dclust.DPMeans(lam=3.0, random_state=0).fit(dclust.open_array(blobs_store))
    fig = plot.plot_objective_history(dp, events=events)
    objective_ax, k_ax = fig.axes
    line = objective_ax.get_lines()[0]
    np.testing.assert_array_equal(line.get_ydata(), dp.objective_history_)
    assert k_ax.get_lines()[0].get_ydata()[-1] == dp.n_clusters_
    check_png(plot.save_figure(fig, tmp_path / "history.png"), 640, 480)


def test_sweep_curve(blobs_store, tmp_path):
    sw = sweep_dpmeans(dclust.open_array(blobs_store), n_lams=6, sample_size=400, random_state=0)
    fig = plot.plot_sweep(sw)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("suggested lam=") for t in legend)
    check_png(plot.save_figure(fig, tmp_path / "sweep.png"), 640, 480)
    # the same from the JSON dict (what 'dclust sweep dpmeans --json' prints)
    fig2 = plot.plot_sweep({"sweep": sw.to_dict()})
    np.testing.assert_array_equal(fig2.axes[0].get_lines()[0].get_ydata(), sw.n_clusters)


def test_palette_timeline_of_a_real_video_job(tmp_path):
    frames = np.stack(list(synthetic_frames(8, 48, 32, seed=3)))
    src = str(tmp_path / "in.zarr")
    z = zarr.create_array(store=src, shape=frames.shape, dtype=np.uint8, chunks=(1, 32, 48, 3))
    z[...] = frames
    report = quantize_video(src, tmp_path / "q.zarr", VideoOptions(fit_sample=400, report=tmp_path / "report.json"))
    fig = plot.plot_palette_timeline(report)
    palette_ax, flicker_ax, k_ax = fig.axes
    assert palette_ax.get_images()[0].get_array().shape[1] == 8
    np.testing.assert_array_equal(k_ax.get_lines()[0].get_ydata(), [r["k"] for r in report["frames"]])
    check_png(plot.save_figure(fig, tmp_path / "palette.png"), 800, 500)
    plot.plot_palette_timeline(tmp_path / "report.json")  # the JSON the job wrote (NaN flicker -> null)


def test_track_lifetimes_of_a_stream(tmp_path):
    rng = np.random.default_rng(0)
    centers = [[(0, 0), (8, 0)]] * 2 + [[(0, 8), (8, 0)]] * 2 + [[(0, 8), (0, 0)]] * 2
    dm = dclust.DynamicMeans(lam=9.0, T_Q=10.0, k_tau=1.1, random_state=0)
    steps = []
    for c in centers:
        batch = np.array(c)[rng.integers(2, size=200)] + rng.normal(scale=0.3, size=(200, 2))
        steps.append(np.asarray(dm.partial_fit(batch).labels_))
    fig = plot.plot_track_lifetimes(steps)
    title = fig.axes[0].get_title()
    assert title == "3 tracks over 6 steps (1 revival)"  # (0,0) dies and comes back with its id
    assert sum(dm.history_["births"]) == 3 and sum(dm.history_["revivals"]) == 1
    check_png(plot.save_figure(fig, tmp_path / "tracks.png"), 700, 250)


def test_link_satisfaction_of_a_constrained_fit(tmp_path):
    blobs = dclust.make_blobs(600, 2, 3, cluster_std=0.6, chunk_rows=200, random_state=2)
    truth = np.asarray(blobs.labels)
    G = dclust.ConstraintGraph.from_labels_sample(truth, 0.002, rng=0, chunks=200)
    rdp = dclust.RDPMeans(n_clusters=3, random_state=0).fit(blobs.X, constraints=G)
    s = dclust.metrics.link_satisfaction(rdp.labels_, G)
    assert s["must_total"] + s["cannot_total"] == G.n_links and 0 < s["fraction"] <= 1
    fig = plot.plot_link_satisfaction(rdp.labels_, G)
    assert fig.axes[0].get_title().startswith(f"links satisfied: {s['must_satisfied'] + s['cannot_satisfied']} of")
    check_png(plot.save_figure(fig, tmp_path / "links.png"), 640, 300)
    # hand-checked counts; dask labels read only at the linked rows
    G2 = dclust.ConstraintGraph.from_pairs([0, 1, 2], [3, 2, 3], [True, False, False], n_samples=4)
    import dask.array as da

    got = dclust.metrics.link_satisfaction(da.from_array(np.array([5, 5, 5, 7]), chunks=2), G2)
    assert (got["must_satisfied"], got["must_total"], got["cannot_satisfied"], got["cannot_total"]) == (0, 1, 1, 2)


def test_errors(tmp_path, blobs_store):
    with pytest.raises(InvalidParameterError, match="labels or a fitted model"):
        plot.plot_clusters(blobs_store)
    with pytest.raises(InvalidDataError, match="one label per row"):
        plot.plot_clusters(blobs_store, np.zeros(5, int))
    with pytest.raises(InvalidParameterError, match="sample_size"):
        plot.plot_clusters(blobs_store, model=dclust.KMeans(n_clusters=2), sample_size=0)
    with pytest.raises(NotFittedError):
        plot.plot_objective_history(dclust.KMeans(n_clusters=2))
    with pytest.raises(InvalidDataError, match="frames"):
        plot.plot_palette_timeline({"frames": []})
    with pytest.raises(InvalidDataError, match="integer"):
        plot.plot_track_lifetimes([np.array([0.5])])
    with pytest.raises(InvalidParameterError, match="ConstraintGraph"):
        plot.plot_link_satisfaction([0, 1], [(0, 1)])
    with pytest.raises(InvalidParameterError, match="LamSweep"):
        plot.plot_sweep(3)
    fig = plot.plot_track_lifetimes([[0]])
    plot.save_figure(fig, tmp_path / "a.png")
    with pytest.raises(StorageError, match="already exists"):
        plot.save_figure(fig, tmp_path / "a.png")
    plot.save_figure(fig, tmp_path / "a.png", overwrite=True)


def test_missing_matplotlib_names_the_extra():
    """In a fresh interpreter where matplotlib cannot be imported, dclust imports and dclust.plot raises an
    ImportError naming the 'plot' extra when a figure is asked for."""
    code = (
        "import sys; sys.modules['matplotlib'] = None; sys.modules['matplotlib.figure'] = None\n"
        "import dclust, dclust.plot\n"
        "try:\n    dclust.plot.plot_track_lifetimes([[0]])\n"
        "except ImportError as e:\n    print('IMPORT-ERROR', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "IMPORT-ERROR" in r.stdout and "dclust[plot]" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize("module", [plot, _figures])
def test_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
