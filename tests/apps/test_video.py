"""Video colour quantisation on real files written by PyAV in ``tmp_path`` (tiny: 64 x 48, 8 frames)."""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
import pytest
import zarr

av = pytest.importorskip("av")

from dclust.apps import _video_kernels as K  # noqa: E402
from dclust.apps.video import (  # noqa: E402
    VideoOptions,
    flicker_ratio,
    psnr,
    quantize_video,
    synthetic_frames,
)
from dclust.errors import InvalidDataError, InvalidParameterError, StorageError  # noqa: E402
from dclust.io.video import open_frames, write_video  # noqa: E402
from dclust.metrics import flicker_summary  # noqa: E402
from dclust.plot import palette_image  # noqa: E402

W, H, T = 64, 48, 8


@pytest.fixture(scope="module")
def frames():
    return np.stack(list(synthetic_frames(T, W, H, seed=3)))


@pytest.fixture(scope="module")
def video(tmp_path_factory, frames):
    path = tmp_path_factory.mktemp("video") / "in.mp4"
    write_video(frames, path, fps=10)
    return str(path)


@pytest.fixture(scope="module")
def decoded(video):
    """The input as PyAV decodes it (lossy encode): the frames the job quantises."""
    return np.stack(list(open_frames(video).frames()))


def _files(directory):
    return sorted(os.listdir(directory))


# ------------------------------------------------------------------------------------------------ metrics / kernels


def test_metrics_on_hand_computed_values():
    assert psnr(0.0) == math.inf
    assert psnr(255.0**2) == pytest.approx(0.0)
    assert psnr(1.0) == pytest.approx(20 * math.log10(255))
    assert flicker_ratio(6, 4) == 1.5 and math.isnan(flicker_ratio(3, 0))
    assert flicker_summary([math.nan, 1.2, 0.7, 1.0, None]) == pytest.approx(0.2)  # median of 0.2, 0.3, 0
    assert math.isnan(flicker_summary([math.nan]))


def test_quantiser_sums_on_a_hand_made_frame():
    O = np.array([[[10, 10, 10], [200, 0, 0]], [[12, 8, 10], [190, 5, 5]]], np.uint8)
    prevO = np.array([[[10, 10, 10], [10, 10, 10]], [[12, 8, 10], [190, 5, 5]]], np.uint8)
    C = np.array([[10.0, 10.0, 10.0], [195.0, 2.0, 2.0]])
    pal = np.array([[10, 10, 10], [195, 2, 2]], np.uint8)
    prevQ = np.array([[[10, 10, 10], [10, 10, 10]], [[10, 10, 10], [195, 2, 2]]], np.uint8)
    Q = np.empty_like(O)
    sse, dq, do = K.quantise_rows(O, 0, 2, "rgb", C, pal, prevO, prevQ, Q)
    assert Q.tolist() == [[[10, 10, 10], [195, 2, 2]], [[10, 10, 10], [195, 2, 2]]]
    # errors: 0; (5,2,2); (2,2,0); (5,3,3)
    assert sse == (25 + 4 + 4) + (4 + 4) + (25 + 9 + 9)
    assert do == 190 + 10 + 10  # only pixel (0, 1) changed in the original
    assert dq == 185 + 8 + 8  # and in the quantised frame


@pytest.mark.parametrize("colorspace", ["rgb", "lab"])
def test_quantiser_equals_its_numpy_twin(colorspace):
    rng = np.random.default_rng(0)
    O = rng.integers(0, 256, (37, 29, 3)).astype(np.uint8)
    O[:10] = O[:10] // 32 * 32  # plus repeated colours and exact ties between centres
    C = K.features(rng.integers(0, 256, (9, 3)).astype(np.uint8), colorspace)
    C = np.vstack([C, C[:2]])  # duplicate centres: the lowest index wins
    pal = K.palette_rgb(C, colorspace)
    Q = np.empty_like(O)
    table = K.CellTable()
    top = K.quantise_rows(O, 0, 20, colorspace, C, pal, None, None, Q, table)
    bottom = K.quantise_rows(O, 20, 37, colorspace, C, pal, None, None, Q, table)  # shared table, other rows
    np.testing.assert_array_equal(Q, K.quantise_numpy(O, colorspace, C, pal))
    err = O.astype(np.int64) - Q
    assert top[0] + bottom[0] == int((err**2).sum())


def test_lab_conversion_known_values_and_round_trip():
    lab = K.srgb_to_lab(np.array([[255, 255, 255], [0, 0, 0], [255, 0, 0]], np.uint8))
    np.testing.assert_allclose(lab[0], [100, 0, 0], atol=1e-3)
    np.testing.assert_allclose(lab[1], [0, 0, 0], atol=1e-9)
    np.testing.assert_allclose(lab[2], [53.24, 80.09, 67.20], atol=0.02)
    rgb = np.random.default_rng(1).integers(0, 256, (5000, 3)).astype(np.uint8)
    np.testing.assert_array_equal(K.lab_to_srgb(K.srgb_to_lab(rgb)), rgb)


def test_palette_image_rows_are_ids_columns_are_frames():
    recs = [{"ids": [0, 2], "rgb": [[1, 2, 3], [4, 5, 6]]}, {"ids": [2, 5], "rgb": [[7, 8, 9], [10, 11, 12]]}]
    img = palette_image(recs, cell_height=1, max_width=2)
    assert img.shape == (3, 2, 4)  # ids 0, 2, 5 x 2 frames
    assert img[0, 0].tolist() == [1, 2, 3, 255] and img[0, 1, 3] == 0  # id 0 absent from frame 1
    assert img[1, 1].tolist() == [7, 8, 9, 255] and img[2, 0, 3] == 0


# ------------------------------------------------------------------------------------------------ the job


def test_dmeans_video_to_video_and_report(video, decoded, tmp_path):
    out, rep, png = tmp_path / "q.mp4", tmp_path / "r.json", tmp_path / "p.png"
    doc = quantize_video(video, out, VideoOptions(lam=800, T_Q=15, k_tau=1.1, fit_sample=512, report=rep,
                                                  palette_png=png))
    assert _files(tmp_path) == ["p.png", "q.mp4", "r.json"]  # no temporary or checkpoint left
    back = open_frames(out)
    assert (back.width, back.height, back.fps) == (W, H, 10)
    q = np.stack(list(back.frames()))
    assert q.shape == (T, H, W, 3)
    on_disk = json.loads(rep.read_text())
    frames = on_disk["frames"]
    assert len(frames) == T and on_disk["n_frames"] == T
    for f in frames:
        assert {"k", "births", "deaths", "psnr", "flicker"} <= set(f) and f["k"] == len(f["ids"]) >= 1
    assert frames[0]["flicker"] is None and frames[0]["births"] == frames[0]["k"]
    assert on_disk["summary"]["flicker_median_abs_dev"] == pytest.approx(flicker_summary(on_disk["flicker"]))
    assert doc["summary"]["psnr"] > 25
    # the default pass bound lets every frame's fit converge: a palette never depends on where a fit stopped
    assert doc["params"]["max_iter"] == 100 and doc["summary"]["frames_not_converged"] == 0
    # the lossy H.264 output stays close to the quantised frames, whose PSNR the report gives
    assert psnr(float(((q.astype(float) - decoded) ** 2).mean())) > doc["summary"]["psnr"] - 6
    with av.open(str(png)) as c:  # a real PNG: one column per frame (8 px each), one row per persistent id
        img = next(c.decode(video=0)).to_ndarray(format="rgba")
    n_ids = len({i for f in frames for i in f["ids"]})
    assert img.shape == (8 * n_ids, 8 * T, 4)


def test_zarr_output_is_exact_and_uses_each_frames_palette(video, decoded, tmp_path):
    doc = quantize_video(video, tmp_path / "q.zarr", VideoOptions(fit_sample=512))
    q = zarr.open_array(str(tmp_path / "q.zarr"), mode="r")
    assert q.shape == (T, H, W, 3) and q.dtype == np.uint8 and q.attrs["fps"] == 10
    q = q[...]
    for t, f in enumerate(doc["frames"]):
        colors = {tuple(c) for c in f["rgb"]}
        assert {tuple(c) for c in q[t].reshape(-1, 3)} <= colors  # every pixel takes a palette colour
        mse = float(((q[t].astype(np.int64) - decoded[t]) ** 2).mean())
        assert f["mse"] == pytest.approx(mse, rel=1e-12)
        assert f["psnr"] == pytest.approx(psnr(mse))
        if t:
            dq = np.abs(q[t].astype(np.int64) - q[t - 1]).mean()
            do = np.abs(decoded[t].astype(np.int64) - decoded[t - 1]).mean()
            assert f["flicker"] == pytest.approx(dq / do, rel=1e-12)


def test_zarr_input_gives_the_same_result_as_the_video(video, decoded, tmp_path):
    zin = tmp_path / "in.zarr"
    z = zarr.create_array(store=str(zin), shape=decoded.shape, dtype=np.uint8, chunks=(1, H, W, 3))
    z[...] = decoded
    z.attrs["fps"] = 10.0
    a = quantize_video(video, tmp_path / "a.zarr", VideoOptions(fit_sample=300))
    b = quantize_video(zin, tmp_path / "b.zarr", VideoOptions(fit_sample=300))
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[...],
                                  zarr.open_array(str(tmp_path / "b.zarr"))[...])
    assert [f["ids"] for f in a["frames"]] == [f["ids"] for f in b["frames"]]
    quantize_video(zin, tmp_path / "c.mp4", VideoOptions(fit_sample=300))  # Zarr in, video out
    assert open_frames(tmp_path / "c.mp4").n_frames in (T, None)
    assert len(list(open_frames(tmp_path / "c.mp4").frames())) == T


@pytest.mark.parametrize("method", ["dmeans", "kmeans", "dpmeans"])
def test_resume_after_interruption_equals_an_uninterrupted_run(method, video, tmp_path):
    kw = {"k": 5} if method == "kmeans" else {"lam": 600.0}
    if method != "dmeans":
        kw.update(T_Q=None, k_tau=None)
    full = quantize_video(video, tmp_path / "full.zarr", VideoOptions(method=method, fit_sample=400, **kw))
    out = tmp_path / "cut.zarr"
    with pytest.raises(KeyboardInterrupt):
        quantize_video(video, out, VideoOptions(method=method, fit_sample=400, **kw), _stop_after=3)
    assert not out.exists() and (tmp_path / ".cut.zarr.resume").is_dir()  # no partial output, a checkpoint
    res = quantize_video(video, out, VideoOptions(method=method, fit_sample=400, resume=True, **kw))
    assert res["resumed_frames"] == 3 and not (tmp_path / ".cut.zarr.resume").exists()
    np.testing.assert_array_equal(zarr.open_array(str(out))[...], zarr.open_array(str(tmp_path / "full.zarr"))[...])
    keys = ("k", "births", "deaths", "ids", "rgb", "mse", "flicker")
    assert [[f[k] for k in keys] for f in res["frames"]] == [[f[k] for k in keys] for f in full["frames"]]
    if method == "kmeans":
        assert all(f["k"] == 5 for f in res["frames"])
    # other parameters do not resume silently
    with pytest.raises(KeyboardInterrupt):
        quantize_video(video, tmp_path / "x.zarr", VideoOptions(method=method, fit_sample=400, **kw), _stop_after=2)
    with pytest.raises(StorageError, match="other parameters"):
        quantize_video(video, tmp_path / "x.zarr", VideoOptions(method=method, fit_sample=401, resume=True, **kw))


def test_dmeans_flickers_less_than_per_frame_dpmeans(video, tmp_path):
    """The paper's point at toy size (the full comparison, with k-means, is benchmarks/bench_video.py)."""
    dm = quantize_video(video, tmp_path / "dm.zarr", VideoOptions(lam=800.0))
    dp = quantize_video(video, tmp_path / "dp.zarr", VideoOptions(method="dpmeans", lam=800.0, T_Q=None, k_tau=None))
    assert dm["summary"]["flicker_median_abs_dev"] < dp["summary"]["flicker_median_abs_dev"]
    assert dm["summary"]["psnr"] >= dp["summary"]["psnr"] - 0.5


def test_Q_tau_pair_equals_its_eq30_reparameterisation(video, tmp_path):
    ref = quantize_video(video, tmp_path / "a.zarr", VideoOptions(lam=800.0, T_Q=15.0, k_tau=1.1))
    tau = (15.0 * (1.1 - 1.0) + 1.0) / (15.0 - 1.0)
    got = quantize_video(video, tmp_path / "b.zarr", VideoOptions(lam=800.0, Q=800.0 / 15.0, tau=tau))
    assert [f["mse"] for f in got["frames"]] == [f["mse"] for f in ref["frames"]]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a.zarr"))[...],
                                  zarr.open_array(str(tmp_path / "b.zarr"))[...])


def _palette_motion(doc):
    """Mean RGB distance moved by the colours present in consecutive frames (matched by persistent id)."""
    moves = []
    for prev, cur in zip(doc["frames"], doc["frames"][1:]):
        before = dict(zip(prev["ids"], np.asarray(prev["rgb"], float)))
        moves += [np.abs(c - before[i]).sum() for i, c in zip(cur["ids"], np.asarray(cur["rgb"], float))
                  if i in before]
    return float(np.mean(moves))


def test_a_firmer_temporal_prior_holds_the_palette_still(video, tmp_path):
    loose = quantize_video(video, tmp_path / "loose.zarr", VideoOptions(lam=800.0))  # [DM] 10.2: tau = 2.5/14
    firm = quantize_video(video, tmp_path / "firm.zarr", VideoOptions(lam=800.0, Q=800.0 / 15.0, tau=0.001))
    assert _palette_motion(firm) < 0.5 * _palette_motion(loose)  # flicker itself: benchmarks/bench_video.py


def test_max_colors_and_lab(video, tmp_path):
    doc = quantize_video(video, tmp_path / "q.zarr",
                         VideoOptions(colorspace="lab", lam=100.0, max_colors=4, fit_sample=500))
    assert all(1 <= f["k"] <= 4 for f in doc["frames"])
    q = zarr.open_array(str(tmp_path / "q.zarr"))[...]
    assert all(len({tuple(c) for c in q[t].reshape(-1, 3)}) <= 4 for t in range(T))


def test_distributed_quantisation_equals_local(tmp_path, decoded):
    from distributed import Client, LocalCluster

    zin = tmp_path / "in.zarr"
    z = zarr.create_array(store=str(zin), shape=decoded.shape, dtype=np.uint8, chunks=(1, H, W, 3))
    z[...] = decoded
    local = quantize_video(zin, tmp_path / "local.zarr", VideoOptions(fit_sample=300))
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        dist = quantize_video(zin, tmp_path / "dist.zarr", VideoOptions(fit_sample=300), client=client)
        dist_video = quantize_video(zin, tmp_path / "dist.mp4", VideoOptions(fit_sample=300), client=client)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "dist.zarr"))[...],
                                  zarr.open_array(str(tmp_path / "local.zarr"))[...])
    assert [f["mse"] for f in dist["frames"]] == [f["mse"] for f in local["frames"]]
    assert dist_video["n_frames"] == T and len(list(open_frames(tmp_path / "dist.mp4").frames())) == T


# ------------------------------------------------------------------------------------------------ bad input


def test_bad_inputs_leave_nothing_behind(video, tmp_path):
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"this is not a video")
    with pytest.raises(InvalidDataError, match="cannot open as a video"):
        quantize_video(junk, tmp_path / "o.mp4")
    for ext in ("avi", "mp4"):  # valid containers without a frame (mp4 then drops the stream too)
        empty = tmp_path / f"empty.{ext}"
        with av.open(str(empty), "w") as c:
            s = c.add_stream("mpeg4", rate=10)
            s.width, s.height, s.pix_fmt = W, H, "yuv420p"
            c.start_encoding()
        with pytest.raises(InvalidDataError, match="zero frames"):
            quantize_video(empty, tmp_path / "o.mp4")
    with pytest.raises(StorageError, match="does not exist"):
        quantize_video(tmp_path / "missing.mp4", tmp_path / "o.mp4")
    bad = tmp_path / "bad.zarr"
    zarr.create_array(store=str(bad), shape=(2, 4, 4), dtype=np.uint8)
    with pytest.raises(InvalidDataError, match=r"\(T, H, W, 3\)"):
        quantize_video(bad, tmp_path / "o.mp4")
    (tmp_path / "exists.mp4").write_bytes(b"keep me")
    with pytest.raises(StorageError, match="already exists"):
        quantize_video(video, tmp_path / "exists.mp4")
    assert (tmp_path / "exists.mp4").read_bytes() == b"keep me"
    with pytest.raises(InvalidParameterError, match="k"):
        quantize_video(video, tmp_path / "o.mp4", VideoOptions(method="kmeans"))
    with pytest.raises(InvalidParameterError, match="lam"):
        quantize_video(video, tmp_path / "o.mp4", VideoOptions(lam=-1.0))
    for pairs in ({"Q": 50.0}, {"tau": 0.1}, {"Q": 50.0, "tau": 0.1, "T_Q": 15.0}, {"Q": -1.0, "tau": 0.1}):
        with pytest.raises(InvalidParameterError, match="Q|tau"):
            quantize_video(video, tmp_path / "o.mp4", VideoOptions(**pairs))
    assert _files(tmp_path) == ["bad.zarr", "empty.avi", "empty.mp4", "exists.mp4", "junk.mp4"]


def test_options_are_checked_when_made_and_frozen():
    with pytest.raises(InvalidParameterError, match="fit_sample"):
        VideoOptions(fit_sample=0)
    with pytest.raises(InvalidParameterError, match="max_frames"):
        VideoOptions(max_frames=0)
    with pytest.raises(InvalidParameterError, match="k"):
        VideoOptions(method="dpmeans", k=4)
    options = VideoOptions(method="kmeans", k=6, lam=None)
    with pytest.raises(AttributeError):
        options.k = 7  # frozen: one options object describes one job
    assert options.params() == {"method": "kmeans", "colorspace": "rgb", "max_colors": None, "fit_sample": 2048,
                                "max_iter": 100, "seed": 0, "lam": None, "T_Q": None, "k_tau": None, "Q": None,
                                "tau": None, "k": 6}


def test_keywords_still_work_for_one_release_with_a_warning(video, tmp_path):
    new = quantize_video(video, tmp_path / "new.zarr", VideoOptions(method="kmeans", k=4, fit_sample=300))
    with pytest.warns(DeprecationWarning, match="VideoOptions"):
        old = quantize_video(video, tmp_path / "old.zarr", method="kmeans", k=4, fit_sample=300)
    assert [f["rgb"] for f in old["frames"]] == [f["rgb"] for f in new["frames"]]
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "old.zarr"))[...],
                                  zarr.open_array(str(tmp_path / "new.zarr"))[...])
    with pytest.raises(TypeError, match="colour"):
        quantize_video(video, tmp_path / "x.zarr", colour="rgb")
    with pytest.raises(InvalidParameterError, match="not both"):
        quantize_video(video, tmp_path / "x.zarr", VideoOptions(), k=4)
    assert _files(tmp_path) == ["new.zarr", "old.zarr"]


def test_missing_pyav_names_the_extra(video, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    with pytest.raises(ImportError, match=r"dclust\[video\]"):
        quantize_video(video, tmp_path / "o.mp4")
    assert _files(tmp_path) == []
