"""``dclust video quantize`` on real files written by PyAV in ``tmp_path`` (tiny: 64 x 48, 8 frames)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

pytest.importorskip("av")

from dclust._cli.main import app  # noqa: E402
from dclust.apps.video import synthetic_frames  # noqa: E402
from dclust.io._video import open_frames, write_video  # noqa: E402

DCLUST = os.path.join(os.path.dirname(sys.executable), "dclust")
W, H, T = 64, 48, 8


def run(args):
    env = {k: v for k, v in os.environ.items() if k != "DCLUST_SCHEDULER"}
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli-video") / "in.mp4"
    write_video(synthetic_frames(T, W, H, seed=5), path, fps=12)
    return str(path)


def test_quantize_writes_video_palette_and_report(video, tmp_path):
    out, rep, png = tmp_path / "out.mp4", tmp_path / "rep.json", tmp_path / "pal.png"
    r = run(["video", "quantize", video, out, "--lam", 800, "--T-Q", 15, "--k-tau", 1.1, "--fit-sample", 500,
             "--report", rep, "--palette-png", png, "--json", "--quiet"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["command"] == "video quantize" and res["n_frames"] == T and res["method"] == "dmeans"
    assert res["params"]["lam"] == 800 and res["params"]["T_Q"] == 15 and res["params"]["k_tau"] == 1.1
    frames = json.loads(rep.read_text())["frames"]
    assert [f["k"] for f in frames] == [len(f["ids"]) for f in frames] and all(f["psnr"] > 20 for f in frames)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    src = open_frames(out)
    assert (src.width, src.height, src.fps) == (W, H, 12) and len(list(src.frames())) == T
    assert sorted(os.listdir(tmp_path)) == ["out.mp4", "pal.png", "rep.json"]


def test_kmeans_and_dpmeans_methods_to_zarr(video, tmp_path):
    r = run(["video", "quantize", video, tmp_path / "k.zarr", "--method", "kmeans", "--k", 6, "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["summary"]["k_max"] == 6
    q = zarr.open_array(str(tmp_path / "k.zarr"))[...]
    assert q.shape == (T, H, W, 3) and all(len(np.unique(q[t].reshape(-1, 3), axis=0)) <= 6 for t in range(T))
    r = run(["video", "quantize", video, tmp_path / "d.zarr", "--method", "dpmeans", "--lam", 800,
             "--colorspace", "lab", "--lam", 150, "--max-colors", 5, "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["summary"]["k_max"] <= 5
    r = run(["video", "quantize", video, tmp_path / "x.zarr", "--method", "kmeans"])
    assert r.exit_code == 2 and "--k" in r.output


def test_kmeans_quantises_a_fade_in_from_black_with_the_colors_each_frame_has(tmp_path):
    """A real clip (PyAV, H.264) fading in from black: frame 0 is all black, the next frames hold few colours."""
    full = np.stack(list(synthetic_frames(T, W, H, seed=7)))
    fade = (full * (np.arange(T) / (T - 1))[:, None, None, None] ** 3).round().astype(np.uint8)
    clip = tmp_path / "fade.mp4"
    write_video(fade, clip, fps=12)
    decoded = np.stack(list(open_frames(clip).frames()))
    distinct = [len(np.unique(f.reshape(-1, 3), axis=0)) for f in decoded]
    assert distinct[0] < 20 <= max(distinct)
    out = tmp_path / "q.zarr"
    r = run(["video", "quantize", clip, out, "--method", "kmeans", "--k", 20, "--fit-sample", W * H, "--json",
             "-q"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    ks = [min(d, 20) for d in distinct]  # every pixel is in the fit sample: a frame of m < 20 colours has m
    fewer = [t for t, d in enumerate(distinct) if d < 20]
    assert res["summary"]["frames_fewer_colors"] == fewer and res["summary"]["k_max"] == 20
    q = zarr.open_array(str(out))[...]
    for t in fewer:  # quantised exactly: the palette is the frame's own colours
        np.testing.assert_array_equal(q[t], decoded[t])
    assert all(len(np.unique(q[t].reshape(-1, 3), axis=0)) <= k for t, k in enumerate(ks))
    # the table names the frames
    r = run(["video", "quantize", clip, tmp_path / "t.zarr", "--method", "kmeans", "--k", 20, "--quiet"])
    assert r.exit_code == 0 and "frames with < 20 colours" in r.stdout and f"{len(fewer)} (frames 0" in r.stdout


def test_Q_and_tau_replace_T_Q_and_k_tau(video, tmp_path):
    r = run(["video", "quantize", video, tmp_path / "f.zarr", "--Q", 53.3, "--tau", 0.01, "--fit-sample", 500,
             "--json", "-q"])
    assert r.exit_code == 0, r.output
    params = json.loads(r.stdout)["params"]
    assert (params["Q"], params["tau"], params["T_Q"], params["k_tau"]) == (53.3, 0.01, None, None)
    for mixed in (["--Q", 53.3], ["--tau", 0.01], ["--T-Q", 15, "--tau", 0.01]):
        r = run(["video", "quantize", video, tmp_path / "m.zarr", *mixed])
        assert r.exit_code == 2 and "--Q and --tau" in " ".join(r.output.replace("│", " ").split())
    assert sorted(os.listdir(tmp_path)) == ["f.zarr"]


def test_resume_continues_an_interrupted_run(video, tmp_path):
    full, cut = tmp_path / "full.zarr", tmp_path / "cut.zarr"
    args = ["--fit-sample", 400, "--json", "-q"]
    assert run(["video", "quantize", video, full, *args]).exit_code == 0
    r = run(["video", "quantize", video, cut, *args, "--stop-after", 4])
    assert r.exit_code == 130 and "interrupted" in r.stderr
    assert not cut.exists() and (tmp_path / ".cut.zarr.resume").is_dir()
    r = run(["video", "quantize", video, cut, *args, "--resume"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["resumed_frames"] == 4
    np.testing.assert_array_equal(zarr.open_array(str(cut))[...], zarr.open_array(str(full))[...])
    assert sorted(os.listdir(tmp_path)) == ["cut.zarr", "full.zarr"]


def test_bad_input_one_line_errors_and_no_output(video, tmp_path):
    junk = tmp_path / "junk.avi"
    junk.write_text("not a video")
    env = {k: v for k, v in os.environ.items() if k != "DCLUST_SCHEDULER"}
    r = subprocess.run([DCLUST, "video", "quantize", str(junk), str(tmp_path / "o.mp4")], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("dclust: error: input") and "video" in r.stderr
    (tmp_path / "o.mp4").write_bytes(b"old")
    r = run(["video", "quantize", video, tmp_path / "o.mp4"])
    assert r.exit_code == 1 and "--overwrite" in r.stderr
    assert (tmp_path / "o.mp4").read_bytes() == b"old"
    r = run(["video", "quantize", video, tmp_path / "o2.mp4", "--scheduler", "tcp://127.0.0.1:1"])
    assert r.exit_code == 2 and "Zarr" in r.output  # checked before connecting
    assert sorted(os.listdir(tmp_path)) == ["junk.avi", "o.mp4"]


def test_missing_pyav_is_a_one_line_error_naming_the_extra(video, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    r = run(["video", "quantize", video, tmp_path / "o.mp4"])
    assert r.exit_code == 1 and "dclust[video]" in r.stderr and r.stderr.count("\n") == 1
    assert os.listdir(tmp_path) == []
