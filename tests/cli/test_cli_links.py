"""``dclust constraints import``, ``dclust fit rdpmeans --constraints LINKS.csv`` and ``dclust fit gmpr`` on real
Zarr stores in ``tmp_path`` and a real ``distributed.LocalCluster`` (one for the module, via ``--scheduler``).

Every command's output is compared with the public API called directly on the same data and parameters.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import dclust
from dclust._cli.main import app

from _support.cli import ok_json, one_line_error, read, run

# ------------------------------------------------------------------------------------------------------- fixtures


def write_csv(path, header, rows):
    with open(path, "w") as fh:
        fh.write(",".join(header) + "\n")
        for row in rows:
            fh.write(",".join(str(v) for v in row) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """600 blob points (3 blobs, 200-row chunks), their truth, and links sampled from it, as a CSV whose type column
    mixes the accepted spellings (and whose rows list pairs as (j, i) sometimes)."""
    d = tmp_path_factory.mktemp("links")
    blobs = dclust.make_blobs(600, 2, 3, cluster_std=0.6, chunk_rows=200, random_state=2)
    x = str(d / "x.zarr")
    dclust.write_array(blobs.X, x)
    truth = np.asarray(blobs.labels)
    G = dclust.ConstraintGraph.from_labels_sample(truth, 0.002, rng=0, chunks=200)
    i, j, v = G.pairs()
    spell = {True: ["must", "ML", "1"], False: ["cannot", "cl", "-1"]}
    rows = [(b, a, spell[bool(s > 0)][k % 3]) if k % 2 else (a, b, spell[bool(s > 0)][k % 3])
            for k, (a, b, s) in enumerate(zip(i.tolist(), j.tolist(), v.tolist()))]
    csv_path = write_csv(d / "links.csv", [" i", "j ", "Type"], rows)
    return x, csv_path, truth, G


def same_graph(a, b):
    for u, v in zip(a.pairs(), b.pairs()):
        np.testing.assert_array_equal(u, v)
    assert a.n_samples == b.n_samples and tuple(a.chunks) == tuple(b.chunks)


# ------------------------------------------------------------------------------------------- constraints import


def test_constraints_import(data, tmp_path):
    x, csv_path, _, G = data
    out = tmp_path / "g.zarr"
    res = ok_json(run(["constraints", "import", csv_path, "--chunks-like", x, out, "--json", "--quiet"]))
    assert res["command"] == "constraints import" and res["output"] == str(out) and res["n_samples"] == 600
    assert res["n_must"] == G.n_must and res["n_cannot"] == G.n_cannot and res["n_links"] == G.n_links > 100
    assert res["n_pairs_read"] == G.n_links and res["n_row_blocks"] == 3 and res["weighted"] is False
    same_graph(dclust.ConstraintGraph.from_zarr(out), G)

    # --n-samples agreeing with IN; an existing output needs --overwrite, and is replaced with it
    before = sorted(os.listdir(out))
    r = run(["constraints", "import", csv_path, "--chunks-like", x, out, "--n-samples", 600, "--quiet"])
    assert r.exit_code == 1 and "--overwrite" in one_line_error(r.stderr) and sorted(os.listdir(out)) == before
    r = run(["constraints", "import", csv_path, "--chunks-like", x, out, "--n-samples", 600, "--overwrite"])
    assert r.exit_code == 0, r.stderr
    assert "constraints import" in r.stdout
    same_graph(dclust.ConstraintGraph.from_zarr(out), G)


def test_constraints_import_weights_and_noisy_links(data, tmp_path):
    x, _, _, _ = data
    src = tmp_path / "src"
    src.mkdir()
    # 0 -> 1 -> 2 must-linked, yet 0 and 2 cannot: infeasible unless --no-check-feasible
    csv_path = write_csv(src / "w.csv", ["weight", "type", "j", "i"],
                         [(0.5, "ml", 1, 0), (2, "1", 2, 1), (1, "cl", 2, 0), (3, "-1", 450, 5), (1, "must", 7, 450)])
    r = run(["constraints", "import", csv_path, "--chunks-like", x, tmp_path / "g.zarr", "--quiet"])
    assert r.exit_code == 1 and "0 -> 1 -> 2" in one_line_error(r.stderr)
    assert os.listdir(tmp_path) == ["src"]
    res = ok_json(run(["constraints", "import", csv_path, "--chunks-like", x, tmp_path / "g.zarr",
                       "--no-check-feasible", "--json", "--quiet"]))
    assert res["weighted"] is True and res["check_feasible"] is False and res["n_pairs_read"] == 5
    expected = dclust.ConstraintGraph.from_pairs([0, 1, 0, 5, 450], [1, 2, 2, 450, 7], [1, 1, 0, 0, 1], 600,
                                                 chunks=200, weight=[0.5, 2, 1, 3, 1], check_feasible=False)
    assert (res["n_must"], res["n_cannot"]) == (expected.n_must, expected.n_cannot)
    got = dclust.ConstraintGraph.from_zarr(tmp_path / "g.zarr")
    same_graph(got, expected)
    np.testing.assert_array_equal(got.weights(), expected.weights())


@pytest.mark.parametrize(
    "header, rows, needle",
    [
        (["i", "j"], [(0, 1)], "missing type"),
        (["i", "k", "type"], [(0, 1, "must")], "missing j"),
        (["i", "j", "type"], [(0, 1, "maybe")], "'maybe'"),
        (["i", "j", "type"], [(0, 1, "must"), (0, 1.5, "must")], "line 3"),
        (["i", "j", "type"], [(0, "x", "must")], "integer row index"),
        (["i", "j", "type"], [(0, 600, "must")], "[0, 600)"),
        (["i", "j", "type"], [(-1, 3, "must")], "[0, 600)"),
        (["i", "j", "type"], [(0, 1, "must"), (1, 0, "cannot")], "both"),
        (["i", "j", "type"], [(0, 1, "must"), (3, 3, "cannot")], "(3, 3) from a row to itself"),
        (["i", "j", "type"], [(0, 1, "must"), (1, 2, "must"), (2, 0, "cannot")], "0 -> 1 -> 2"),
        (["i", "j", "type", "weight"], [(0, 1, "must", 0)], "weight"),
        (["i", "j", "type", "weight"], [(0, 1, "must", "high")], "weight"),
        (["i", "j", "type"], [(0, 1, "must", 7)], "fields"),
    ],
)
def test_constraints_import_bad_csv_exit_1_and_write_nothing(data, tmp_path, header, rows, needle):
    x = data[0]
    src = tmp_path / "src"
    src.mkdir()
    csv_path = write_csv(src / "bad.csv", header, rows)
    r = run(["constraints", "import", csv_path, "--chunks-like", x, tmp_path / "g.zarr", "--quiet"])
    assert r.exit_code == 1, (r.stdout, r.stderr)
    assert needle in one_line_error(r.stderr)
    assert os.listdir(tmp_path) == ["src"]


def test_constraints_import_data_errors_exit_1(data, tmp_path):
    x, csv_path, _, _ = data
    open(tmp_path / "e.csv", "w").close()
    cases = {
        "empty": (["constraints", "import", tmp_path / "e.csv", "--chunks-like", x, tmp_path / "g.zarr"], "empty"),
        "n-samples": (["constraints", "import", csv_path, "--chunks-like", x, tmp_path / "g.zarr", "--n-samples", 500],
                      "--n-samples"),
        "no csv": (["constraints", "import", tmp_path / "missing.csv", "--chunks-like", x, tmp_path / "g.zarr"],
                   "missing.csv"),
        "no data": (["constraints", "import", csv_path, "--chunks-like", tmp_path / "none.zarr", tmp_path / "g.zarr"],
                    "none.zarr"),
    }
    for name, (args, needle) in cases.items():
        r = run([*args, "--quiet"])
        assert r.exit_code == 1, (name, r.stdout, r.stderr)
        assert needle in one_line_error(r.stderr), name
        assert sorted(os.listdir(tmp_path)) == ["e.csv"], name


# ------------------------------------------------------------------------------- fit rdpmeans --constraints CSV


def test_fit_rdpmeans_with_csv(data, address, tmp_path):
    x, csv_path, truth, G = data
    X = dclust.open_array(x)
    expected = dclust.RDPMeans(n_clusters=3, max_iter=3, random_state=0).fit(X, constraints=G)
    labels, model = tmp_path / "l.zarr", tmp_path / "m.zarr"
    out = ok_json(run(["fit", "rdpmeans", x, "--k", 3, "--constraints", csv_path, "--labels", labels, "--model", model,
                       "--max-iter", 3, "--seed", 0, "--json", "--quiet", "--scheduler", address]))
    assert out["command"] == "fit rdpmeans" and out["constraints"] == csv_path
    assert out["n_must"] == G.n_must and out["n_cannot"] == G.n_cannot
    assert out["n_clusters"] == expected.n_clusters_
    np.testing.assert_array_equal(read(labels), np.asarray(expected.labels_))
    assert dclust.metrics.adjusted_rand_score(truth, read(labels)) > 0.95


def test_fit_rdpmeans_bad_csv_exit_1(data, address, tmp_path):
    x = data[0]
    src = tmp_path / "src"
    src.mkdir()
    bad = write_csv(src / "bad.csv", ["i", "j", "type"], [(0, 700, "must")])
    r = run(["fit", "rdpmeans", x, "--lam", 4, "--constraints", bad, "--labels", tmp_path / "l.zarr",
             "--model", tmp_path / "m.zarr", "--quiet", "--scheduler", address])
    assert r.exit_code == 1 and "[0, 600)" in one_line_error(r.stderr)
    assert os.listdir(tmp_path) == ["src"]


# ------------------------------------------------------------------------------------------------------ fit gmpr


def test_fit_gmpr_with_csv_and_zarr_links(data, address, tmp_path):
    x, csv_path, truth, G = data
    X = dclust.open_array(x)
    expected = dclust.GMPR(n_classes=3, covariance_type="diag", max_iter=15, random_state=0).fit(X, constraints=G)
    expected_labels = np.asarray(expected.predict(X, constraints=G))
    G.to_zarr(tmp_path / "g.zarr")
    for i, links in enumerate([csv_path, str(tmp_path / "g.zarr")]):
        labels, model = tmp_path / f"l{i}.zarr", tmp_path / f"m{i}.zarr"
        out = ok_json(run(["fit", "gmpr", x, "--classes", 3, "--clusters-per-class", 1, "--constraints", links,
                           "--covariance", "diag", "--labels", labels, "--model", model, "--max-iter", 15,
                           "--seed", 0, "--json", "--quiet", "--scheduler", address]))
        assert out["command"] == "fit gmpr" and out["estimator"] == "GMPR" and out["constraints"] == links
        assert out["n_must"] == G.n_must and out["n_cannot"] == G.n_cannot and out["n_classes"] == 3
        assert out["params"]["covariance_type"] == "diag" and out["params"]["max_iter"] == 15
        assert out["learned"]["n_iter_"] == expected.n_iter_ and out["learned"]["n_must_"] == G.n_must
        assert out["learned"]["log_likelihood_"] == pytest.approx(expected.log_likelihood_, rel=1e-9)
        assert out["objective_history"] == pytest.approx(expected.objective_history_, rel=1e-9)
        assert out["class_weights"] == pytest.approx(expected.weights_.tolist(), rel=1e-9)
        np.testing.assert_array_equal(read(labels), expected_labels)
        assert dclust.metrics.adjusted_rand_score(truth, read(labels)) > 0.95
        loaded = dclust.load(model)
        assert type(loaded) is dclust.GMPR
        np.testing.assert_allclose(loaded.means_, expected.means_, rtol=1e-9)


@pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")  # 10 iterations on purpose
def test_fit_gmpr_without_links_table_output(data, address, tmp_path):
    x, _, truth, _ = data
    X = dclust.open_array(x)
    expected = dclust.GMPR(n_classes=3, clusters_per_class=2, max_iter=10, random_state=1).fit(X)
    r = run(["fit", "gmpr", x, "--classes", 3, "--clusters-per-class", 2, "--labels", tmp_path / "l.zarr",
             "--model", tmp_path / "m.zarr", "--max-iter", 10, "--seed", 1, "--quiet", "--scheduler", address])
    assert r.exit_code == 0, r.stderr
    assert "fit GMPR" in r.stdout and "log-likelihood" in r.stdout
    np.testing.assert_array_equal(read(tmp_path / "l.zarr"), np.asarray(expected.predict(X)))


def test_fit_gmpr_errors_exit_1_and_write_nothing(data, address, tmp_path):
    x, csv_path, _, _ = data
    src = tmp_path / "src"
    src.mkdir()
    weighted = write_csv(src / "w.csv", ["i", "j", "type", "weight"], [(0, 1, "must", 2)])
    taken = src / "taken.zarr"
    dclust.write_labels(np.zeros(5, np.int32), taken)
    cases = {
        "weights": ([weighted, "--labels", tmp_path / "l.zarr"], "weight"),
        "contradiction": ([write_csv(src / "c.csv", ["i", "j", "type"], [(3, 4, "ml"), (4, 3, "cl")]),
                           "--labels", tmp_path / "l.zarr"], "both"),
        "existing": ([csv_path, "--labels", taken], "--overwrite"),
        "missing links": ([src / "none.zarr", "--labels", tmp_path / "l.zarr"], "none.zarr"),
    }
    for name, (args, needle) in cases.items():
        links, *rest = args
        r = run(["fit", "gmpr", x, "--classes", 3, "--constraints", links, *rest, "--model", tmp_path / "m.zarr",
                 "--quiet", "--scheduler", address])
        assert r.exit_code == 1, (name, r.stdout, r.stderr)
        assert needle in one_line_error(r.stderr), name
        assert os.listdir(tmp_path) == ["src"], name
        assert read(taken).shape == (5,)


# ------------------------------------------------------------------------------------------------- usage errors


IMP = ["constraints", "import", "{c}"]
GM = ["fit", "gmpr", "{x}", "--labels", "{t}/l.zarr", "--model", "{t}/m.zarr"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (IMP + ["{t}/g.zarr"], "--chunks-like"),
        (IMP + ["--chunks-like", "{x}"], "OUT.zarr"),
        (IMP + ["--chunks-like", "{x}", "{t}/g.zarr", "--n-samples", "0"], "--n-samples"),
        (IMP + ["--chunks-like", "{x}", "{x}"], "same store"),
        (IMP + ["--chunks-like", "{x}", "{t}/g.zarr", "--weights"], "--weights"),
        (GM, "--classes"),
        (GM + ["--classes", "0"], "--classes"),
        (GM + ["--classes", "2", "--clusters-per-class", "0"], "--clusters-per-class"),
        (GM + ["--classes", "2", "--covariance", "spherical"], "--covariance"),
        (GM + ["--classes", "2", "--max-iter", "0"], "--max-iter"),
        (["fit", "gmpr", "{x}", "--classes", "2", "--labels", "{t}/l.zarr", "--model", "{t}/l.zarr"], "same store"),
        (["fit", "gmpr", "{x}", "--classes", "2", "--model", "{t}/m.zarr"], "--labels"),
        (["constraints"], "import"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(data, tmp_path, args, needle):
    x, csv_path, _, _ = data
    args = [a.format(x=x, c=csv_path, t=tmp_path) for a in args]
    r = CliRunner().invoke(app, args)  # no --scheduler: a usage error stops before any cluster is started
    assert r.exit_code == 2, (r.stdout, r.stderr, r.exception)
    assert needle in " ".join(re.sub("[│╭╮╰╯─]", " ", r.stdout + r.stderr).split())
    assert "Traceback" not in r.stderr
    assert os.listdir(tmp_path) == []
