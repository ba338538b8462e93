"""Bad option values on every command family: one ``dclust: error:`` line naming the option, what it expects and
what it received (exit code 2), found before any work (no cluster started, nothing written)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from _support.cli import run


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("stores")
    zarr.create_array(store=str(d / "x.zarr"), shape=(20, 2), dtype="float32", chunks=(10, 2))[...] = np.ones((20, 2))
    group = zarr.open_group(str(d / "g.zarr"), mode="w")
    group.create_array("X", shape=(20, 2), dtype="float32", chunks=(10, 2))[...] = np.ones((20, 2))
    return str(d / "x.zarr"), str(d / "g.zarr")


FIT = ["fit", "kmeans", "{x}", "--k", "2", "--labels", "l.zarr", "--model", "m.zarr"]

# (arguments, what the line must contain)
CASES = [
    (FIT + ["--memory-limit", "lots"], "--memory-limit: expected 'auto', a size per worker"),
    (FIT + ["--memory-limit", "-5"], "received '-5'"),
    (FIT + ["--memory-limit", "0"], "received '0'"),
    (FIT + ["--scheduler", "garbage"], "--scheduler: expected the address of a running Dask scheduler"),
    (FIT + ["--scheduler", "tcp://127.0.0.1"], "received 'tcp://127.0.0.1'"),
    (FIT + ["--scheduler", "tcp://127.0.0.1:99999"], "received 'tcp://127.0.0.1:99999'"),
    (["fit", "kmeans", "{g}", "--k", "2", "--labels", "l.zarr", "--model", "m.zarr", "--component", "../x"],
     "--component: expected the name of an array inside the input Zarr group"),
    (["fit", "kmeans", "{g}", "--k", "2", "--labels", "l.zarr", "--model", "m.zarr", "--component", "/X"],
     "received '/X'"),
    (["fit", "kmeans", "{x}", "--k", "0", "--labels", "l.zarr", "--model", "m.zarr"],
     "--k: input should be greater than or equal to 1; received '0'"),
    (["fit", "kmeans", "{x}", "--k", "abc", "--labels", "l.zarr", "--model", "m.zarr"], "received 'abc'"),
    (["fit", "dpmeans", "{x}", "--lam", "nan", "--labels", "l.zarr", "--model", "m.zarr"],
     "--lam: expected a finite number > 0; received nan"),
    (["fit", "gmpr", "{x}", "--classes", "2", "--covariance", "tied", "--labels", "l.zarr", "--model", "m.zarr"],
     "--covariance: 'tied' is not one of 'full', 'diag'"),
    (["generate", "blobs", "o.zarr", "--n", "10", "--codec", "gzip"], "--codec: 'gzip' is not one of"),
    (["stream", "dmeans", "{x}", "--lam", "1", "--T-Q", "0", "--labels", "l.zarr"],
     "--T-Q: expected a finite number > 1; received 0.0"),
    (["sweep", "dpmeans", "{x}", "--lams", "-1,2"], "--lams: expected comma-separated finite penalties > 0"),
    (["video", "quantize", "in.mp4", "o.mp4", "--memory-limit", "lots"], "--memory-limit: expected"),
    (["video", "quantize", "in.mp4", "o.mp4", "--scheduler", "nonsense"], "received 'nonsense'"),
    (["constraints", "import", "c.csv", "o.zarr", "--chunks-like", "{x}", "--component", ".."], "received '..'"),
    (["fit", "kmeans", "{x}", "--k", "2", "--model", "m.zarr"], "Missing option '--labels'"),  # --model is optional
]


@pytest.mark.parametrize("args, needle", CASES, ids=[" ".join(a[:2] + a[-2:]) for a, _ in CASES])
def test_a_bad_option_value_is_one_line_before_any_work(stores, tmp_path, monkeypatch, args, needle):
    x, g = stores
    monkeypatch.chdir(tmp_path)
    r = run([a.format(x=x, g=g) for a in args], env={"DCLUST_SCHEDULER": ""})
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("dclust: error: "), r.stderr
    assert needle in r.stderr and f"(see 'dclust {args[0]}" in r.stderr, r.stderr
    assert r.stdout == "" and os.listdir(tmp_path) == []


def test_usage_errors_of_the_root_and_groups_keep_their_help():
    r = run(["fit"])
    assert r.exit_code == 2 and "Usage" in r.output and "kmeans" in r.output  # no arguments: the group's help
    r = run(["no-such-command"])
    assert r.exit_code == 2 and r.stderr.startswith("dclust: error: No such command 'no-such-command'")
    assert r.stderr.count("\n") == 1
