"""The command tree of ``dclust``: one app that every entry point builds completely, an example in every command's
``--help``, and ``fit ... --labels`` without ``--model`` (labels only) for every fit command.

The labels-only fits run in-process (``typer.testing.CliRunner``) on a real Zarr store in ``tmp_path`` against a
real ``distributed.LocalCluster`` (``--scheduler``); the entry points run as subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import typer
import zarr

import dclust
from dclust._cli.main import app

from _support.cli import DCLUST, ok_json, run

#: Every command of the CLI, as typed after ``dclust``.
COMMANDS = {
    ("generate", "blobs"), ("fit", "kmeans"), ("fit", "dpmeans"), ("fit", "bpmeans"), ("fit", "rdpmeans"),
    ("fit", "gmpr"), ("predict",), ("info",), ("constraints", "import"), ("stream", "dmeans"),
    ("stream", "anytime-dpmeans"), ("video", "quantize"), ("pointcloud", "track"), ("sweep", "dpmeans"),
    ("plot", "clusters"), ("plot", "history"), ("plot", "sweep"), ("plot", "palette"), ("plot", "tracks"),
    ("plot", "links"), ("clean",),
}
TOP_LEVEL = sorted({c[0] for c in COMMANDS})


def _leaves(command, path=()):
    """The paths of the leaf commands under a click command."""
    sub = getattr(command, "commands", None)
    if not sub:
        return {path}
    return set().union(*(_leaves(c, path + (name,)) for name, c in sub.items()))


def test_the_app_holds_every_command():
    assert _leaves(typer.main.get_command(app)) == COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=" ".join)
def test_every_command_help_shows_an_example(command):
    r = run([*command, "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.stderr
    assert "Example:" in r.stdout, r.stdout
    example = r.stdout[r.stdout.index("Example:"):]
    assert f"dclust {' '.join(command)}" in example, example  # the example runs this very command


@pytest.mark.parametrize("entry", ["python -m dclust", "python -m dclust._cli.main", "dclust"])
def test_every_entry_point_knows_every_command(entry):
    """Each entry point lists every command family (the tree below them is one app: test_the_app_holds...)."""
    argv = {"python -m dclust": [sys.executable, "-m", "dclust"],
            "python -m dclust._cli.main": [sys.executable, "-m", "dclust._cli.main"],
            "dclust": [DCLUST]}[entry]
    top = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "COLUMNS": "200"})
    assert top.returncode == 0, top.stderr
    assert _listed(top.stdout) == set(TOP_LEVEL), top.stdout


def _listed(help_text):
    """The command names of a group's --help (the first word of each row of its Commands box)."""
    rows = [line.split() for line in help_text.splitlines() if line.startswith("│ ") and line[2] != " "]
    return {row[1] for row in rows if len(row) > 2 and not row[1].startswith("-")}


# ----------------------------------------------------------------------------------- fit --labels without --model

N = 600


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """600 x 2 points in three separated blobs (3 row chunks) and a links CSV over them."""
    d = tmp_path_factory.mktemp("labels-only")
    rng = np.random.default_rng(0)
    truth = np.repeat(np.arange(3), N // 3)
    X = (np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])[truth] + rng.normal(0, 0.5, (N, 2))).astype(np.float32)
    x = str(d / "x.zarr")
    dclust.write_array(X, x, chunks=200)
    links = d / "links.csv"
    rows = [(i, i + 1, "must") for i in range(0, 150, 10)] + [(i, i + 200, "cannot") for i in range(0, 150, 10)]
    links.write_text("i,j,type\n" + "".join(f"{i},{j},{t}\n" for i, j, t in rows))
    return x, str(links), X


FIT_ARGS = {
    "kmeans": ["--k", 3],
    "dpmeans": ["--lam", 20.0],
    "rdpmeans": ["--lam", 20.0, "--constraints", "LINKS"],
    "gmpr": ["--classes", 3, "--constraints", "LINKS"],
}


@pytest.mark.parametrize("name", sorted(FIT_ARGS))
def test_fit_with_labels_only_writes_the_labels(name, data, address, tmp_path):
    x, links, X = data
    out = tmp_path / "out"
    out.mkdir()
    labels = out / "labels.zarr"
    args = [links if a == "LINKS" else a for a in FIT_ARGS[name]]
    res = ok_json(run(["fit", name, x, *args, "--labels", labels, "--seed", 0, "--json", "--quiet",
                       "--scheduler", address]))
    assert res["model"] is None and res["labels"] == str(labels)
    assert os.listdir(out) == ["labels.zarr"]  # the labels, and nothing else
    y = zarr.open_array(str(labels), mode="r")[:]
    assert y.shape == (N,)
    # three separated blobs: every fit finds them (labels equal the blobs up to a permutation)
    truth = np.repeat(np.arange(3), N // 3)
    assert dclust.metrics.adjusted_rand_score(truth, y) == pytest.approx(1.0)
    if name == "kmeans":  # the same labels as the library gives (results independent of the scheduler)
        assert np.array_equal(y, dclust.KMeans(n_clusters=3, random_state=0).fit(X).predict(X))


def test_fit_bpmeans_without_model_writes_the_features_only(data, address, tmp_path):
    x, _, _ = data
    out = tmp_path / "out"
    out.mkdir()
    res = ok_json(run(["fit", "bpmeans", x, "--lam", 20.0, "--features", out / "f.zarr", "--seed", 0, "--json",
                       "--quiet", "--scheduler", address]))
    assert res["model"] is None and os.listdir(out) == ["f.zarr"]
    assert zarr.open_array(str(out / "f.zarr"), mode="r").shape == (res["n_latent_features"], 2)
