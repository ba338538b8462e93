"""``dclust stream dmeans``, ``dclust stream anytime-dpmeans``, ``dclust fit bpmeans`` and ``dclust fit rdpmeans``
on real Zarr stores in ``tmp_path`` and a real ``distributed.LocalCluster`` (one for the module, via ``--scheduler``).

Every command's output is compared with the public API called directly on the same data and parameters.
"""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

import dclust
from dclust._cli.main import app

from _support.checkpoints import Interrupt, snapshot
from _support.cli import ok_json, one_line_error, read, run

T, BATCH, CHUNK = 6, 300, 600  # 6 time steps of 300 rows, stored in chunks of 600 rows
STREAM = dict(lam=9.0, T_Q=3.0, k_tau=1.1)


# ------------------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def stream_store(tmp_path_factory):
    """T time steps of 2-D points around a changing set of centres: (0,0) and (8,0), then (0,8) is born and
    (0,0) disappears, then (0,0) comes back while (8,0) goes."""
    rng = np.random.default_rng(0)
    centers = [[(0, 0), (8, 0)]] * 2 + [[(0, 8), (8, 0)]] * 2 + [[(0, 8), (0, 0)]] * 2
    X = np.concatenate([np.array(c)[rng.integers(2, size=BATCH)] + rng.normal(scale=0.3, size=(BATCH, 2))
                        for c in centers]).astype(np.float32)
    p = str(tmp_path_factory.mktemp("stream") / "x.zarr")
    dclust.write_array(X, p, chunks=CHUNK)
    return p


@pytest.fixture(scope="module")
def features_store(tmp_path_factory):
    """600 rows that are sums of binary combinations of 3 features, plus a little noise."""
    rng = np.random.default_rng(1)
    A = np.array([[6.0, 0, 0, 0], [0, 6.0, 0, 0], [0, 0, 6.0, 6.0]])
    Z = rng.integers(0, 2, size=(600, 3))
    X = (Z @ A + rng.normal(scale=0.1, size=(600, 4))).astype(np.float32)
    p = str(tmp_path_factory.mktemp("bp") / "x.zarr")
    dclust.write_array(X, p, chunks=200)
    return p


@pytest.fixture(scope="module")
def linked_store(tmp_path_factory):
    """600 blob points (3 blobs, 200-row chunks), their truth, and links sampled from it in other row blocks."""
    d = tmp_path_factory.mktemp("rdp")
    blobs = dclust.make_blobs(600, 2, 3, cluster_std=0.6, chunk_rows=200, random_state=2)
    x, links = str(d / "x.zarr"), str(d / "links.zarr")
    dclust.write_array(blobs.X, x)
    truth = np.asarray(blobs.labels)
    G = dclust.ConstraintGraph.from_labels_sample(truth, 0.002, rng=0, chunks=300)  # not X's 200-row blocks
    G.to_zarr(links)
    return x, links, truth, G


def dmeans_reference(x):
    """The public API, batch by batch: the model and the persistent ids of every batch."""
    X = dclust.open_array(x, chunks=BATCH)
    model = dclust.DynamicMeans(**STREAM, random_state=0)
    labels = []
    for b in range(X.numblocks[0]):
        labels.append(np.asarray(model.partial_fit(X.blocks[b]).labels_))
    return model, np.concatenate(labels)


def same_dynamic_state(a, b):
    np.testing.assert_array_equal(a.cluster_ids_, b.cluster_ids_)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    np.testing.assert_array_equal(a.weights_, b.weights_)
    np.testing.assert_array_equal(a.ages_, b.ages_)
    assert a.next_id_ == b.next_id_ and a.n_batches_ == b.n_batches_
    assert {k: v for k, v in a.history_.items() if k != "seconds"} == {
        k: v for k, v in b.history_.items() if k != "seconds"}


@pytest.fixture(scope="module")
def dmeans_expected(stream_store):
    return dmeans_reference(stream_store)


def dmeans_args(x, labels, *extra):
    return ["stream", "dmeans", x, "--batch-rows", BATCH, "--lam", STREAM["lam"], "--T-Q", STREAM["T_Q"],
            "--k-tau", STREAM["k_tau"], "--labels", labels, "--seed", 0, *extra]


# ----------------------------------------------------------------------------------------------- stream dmeans


def test_stream_dmeans_end_to_end(stream_store, dmeans_expected, address, tmp_path):
    expected, expected_labels = dmeans_expected
    labels, ck, model = tmp_path / "labels.zarr", tmp_path / "ck.zarr", tmp_path / "model.zarr"
    out = ok_json(run(dmeans_args(stream_store, labels, "--checkpoint", ck, "--model", model, "--json",
                                  "--scheduler", address)))
    assert out["command"] == "stream dmeans" and out["estimator"] == "DynamicMeans"
    assert out["n_samples"] == T * BATCH and out["n_features"] == 2 and out["batch_rows"] == BATCH
    assert out["n_batches"] == T and out["resumed_batches"] == 0 and out["scheduler"] == address
    assert out["labels"] == str(labels) and out["checkpoint"] == str(ck) and out["model"] == str(model)
    assert out["params"]["lam"] == STREAM["lam"] and out["params"]["T_Q"] == STREAM["T_Q"]
    assert out["history"]["births"] == expected.history_["births"] and out["births"] == sum(out["history"]["births"])
    assert out["births"] >= 3 and out["history"]["n_samples"] == [BATCH] * T
    assert out["n_clusters"] == expected.n_clusters_ and out["cluster_ids"] == expected.cluster_ids_.tolist()
    assert out["points_per_second"] > 0 and out["warnings"] == []

    z = zarr.open_array(str(labels), mode="r")
    assert z.shape == (T * BATCH,) and z.dtype == np.int64 and z.chunks == (BATCH,)
    np.testing.assert_array_equal(z[...], expected_labels)  # the persistent ids each batch got when it was fitted
    same_dynamic_state(dclust.load(model), expected)
    same_dynamic_state(dclust.load(ck), expected)
    assert sorted(os.listdir(tmp_path)) == ["ck.zarr", "labels.zarr", "model.zarr"]  # no partial store left


def test_stream_dmeans_resume_from_checkpoint_equals_uninterrupted(stream_store, dmeans_expected, address, tmp_path):
    expected, expected_labels = dmeans_expected
    labels, ck = tmp_path / "labels.zarr", tmp_path / "ck.zarr"
    args = dmeans_args(stream_store, labels, "--checkpoint", ck, "--scheduler", address)

    # Ctrl-C while batch 4 is being fitted: exit 130, three batches checkpointed, no labels under the final name
    with dclust.on_progress(Interrupt(4)):
        r = run([*args, "--quiet"])
    assert r.exit_code == 130 and "interrupted" in one_line_error(r.stderr)
    assert not labels.exists() and dclust.load(ck).n_batches_ == 3
    assert sorted(os.listdir(tmp_path)) == [".labels.zarr.partial", "ck.zarr"]

    # the same command resumes after batch 3 (fitting only batches 4..6), and the result is the uninterrupted one
    events = []
    with dclust.on_progress(events.append):
        r = run([*args, "--json"])
    out = ok_json(r)
    assert [e.iteration for e in events if e.phase == "iter"] == [4, 5, 6]
    assert out["resumed_batches"] == 3 and f"resuming from {ck}: 3 of {T} batches done" in r.stderr
    np.testing.assert_array_equal(read(labels), expected_labels)
    assert out["history"]["births"] == expected.history_["births"]
    same_dynamic_state(dclust.load(ck), expected)
    assert sorted(os.listdir(tmp_path)) == ["ck.zarr", "labels.zarr"]


def test_stream_dmeans_interrupted_without_checkpoint_leaves_nothing(stream_store, address, tmp_path):
    with dclust.on_progress(Interrupt(2)):
        r = run(dmeans_args(stream_store, tmp_path / "labels.zarr", "--quiet", "--scheduler", address))
    assert r.exit_code == 130
    assert os.listdir(tmp_path) == []


def test_stream_dmeans_checkpoint_with_other_parameters_is_refused(stream_store, address, tmp_path):
    ck = tmp_path / "ck.zarr"
    with dclust.on_progress(Interrupt(2)):
        assert run(dmeans_args(stream_store, tmp_path / "l.zarr", "--checkpoint", ck, "--quiet",
                               "--scheduler", address)).exit_code == 130
    before = snapshot(ck)
    args = dmeans_args(stream_store, tmp_path / "l.zarr", "--checkpoint", ck, "--quiet", "--scheduler", address)
    args[args.index("--lam") + 1] = "5.0"
    r = run(args)
    assert r.exit_code == 1
    line = one_line_error(r.stderr)
    assert "--checkpoint" in line and "lam=9.0 (now 5.0)" in line
    assert snapshot(ck) == before and not (tmp_path / "l.zarr").exists()

    # the labels of the interrupted run are gone: it cannot be resumed, and says so
    import shutil

    shutil.rmtree(tmp_path / ".l.zarr.partial")
    r = run(dmeans_args(stream_store, tmp_path / "l.zarr", "--checkpoint", ck, "--quiet", "--scheduler", address))
    assert r.exit_code == 1 and "missing or do not match" in one_line_error(r.stderr)
    assert snapshot(ck) == before and sorted(os.listdir(tmp_path)) == ["ck.zarr"]


def test_stream_dmeans_human_output(stream_store, address, tmp_path):
    r = run(["stream", "dmeans", stream_store, "--batch-rows", 900, "--lam", 9, "--Q", 0.5, "--tau", 1,
             "--labels", tmp_path / "l.zarr", "--scheduler", address], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.stderr
    assert "DynamicMeans" in r.stdout and "births" in r.stdout and "points / s" in r.stdout
    assert f"Dask cluster at {address}" in r.stderr and "points/s" in r.stderr and "batch 2/2" in r.stderr
    assert read(tmp_path / "l.zarr").shape == (T * BATCH,)


def test_warnings_report_the_job_not_the_garbage_collector(stream_store, address, tmp_path):
    """A ResourceWarning raised while the command runs (the garbage collector finalizing an unclosed aiohttp session
    of an earlier S3 read, say) is not the job's warning; a UserWarning raised inside it is reported."""
    def noise(event):
        if event.phase == "iter" and event.iteration == 1:
            warnings.warn("Unclosed client session", ResourceWarning)
            warnings.warn("a warning of the job", UserWarning)

    with dclust.on_progress(noise):
        out = ok_json(run(dmeans_args(stream_store, tmp_path / "l.zarr", "--json", "--scheduler", address)))
    assert out["warnings"] == ["UserWarning: a warning of the job"]


# -------------------------------------------------------------------------------------- stream anytime-dpmeans


def anytime_args(x, labels, model, *extra):
    return ["stream", "anytime-dpmeans", x, "--lam", 9, "--batch-rows", BATCH, "--labels", labels, "--model", model,
            "--seed", 0, "--quiet", "--scheduler", *extra]


def test_stream_anytime_dpmeans_stops_and_resumes(stream_store, address, tmp_path):
    X = dclust.open_array(stream_store)
    expected = dclust.AnytimeDPMeans(lam=9.0, batch_rows=BATCH, random_state=0).fit(X)

    # stopped after 2 batches, checkpointed
    ck = tmp_path / "ck.zarr"
    out = ok_json(run([*anytime_args(stream_store, tmp_path / "l2.zarr", tmp_path / "m2.zarr", address),
                       "--max-batches", 2, "--checkpoint", ck, "--json"]))
    assert out["command"] == "stream anytime-dpmeans" and out["stopped"] == "max_batches"
    assert out["batches_done"] == 2 and out["n_batches"] == T and out["n_seen"] == 2 * BATCH
    assert out["history"]["n_samples"] == [BATCH, BATCH] and len(out["history"]["objective"]) == 2
    m2 = dclust.load(tmp_path / "m2.zarr")
    assert m2.n_batches_ == 2 and dclust.load(ck).n_batches_ == 2
    np.testing.assert_array_equal(read(tmp_path / "l2.zarr"), np.asarray(m2.predict(X)))

    # resumed from the checkpoint to the end: the uninterrupted fit
    out = ok_json(run([*anytime_args(stream_store, tmp_path / "l.zarr", tmp_path / "m.zarr", address),
                       "--checkpoint", ck, "--json"]))
    assert out["resumed_batches"] == 2 and out["batches_done"] == T and out["stopped"] == "end of data"
    assert out["n_seen"] == T * BATCH and out["n_clusters"] == expected.n_clusters_
    assert out["objective"] == pytest.approx(expected.objective_)
    model = dclust.load(tmp_path / "m.zarr")
    np.testing.assert_array_equal(model.cluster_centers_, expected.cluster_centers_)
    np.testing.assert_array_equal(model.batch_order_, expected.batch_order_)
    np.testing.assert_array_equal(read(tmp_path / "l.zarr"), np.asarray(expected.predict(X)))


def test_stream_anytime_dpmeans_target_objective(stream_store, address, tmp_path):
    out = ok_json(run([*anytime_args(stream_store, tmp_path / "l.zarr", tmp_path / "m.zarr", address),
                       "--target-objective", 1e12, "--json"]))
    assert out["stopped"] == "target_objective" and out["batches_done"] == 1 and out["n_seen"] == BATCH
    assert read(tmp_path / "l.zarr").shape == (T * BATCH,)


# ------------------------------------------------------------------------------------------------- fit bpmeans


def test_fit_bpmeans(features_store, address, tmp_path):
    X = dclust.open_array(features_store)
    expected = dclust.BPMeans(lam=4.0, init="empty", random_state=0).fit(X)
    feats, alloc, model = tmp_path / "A.zarr", tmp_path / "Z.zarr", tmp_path / "m.zarr"
    out = ok_json(run(["fit", "bpmeans", features_store, "--lam", 4, "--init", "empty", "--features", feats,
                       "--allocation", alloc, "--model", model, "--seed", 0, "--json", "--quiet", "--scheduler",
                       address]))
    assert out["command"] == "fit bpmeans" and out["estimator"] == "BPMeans" and out["n_samples"] == 600
    assert out["n_latent_features"] == expected.n_latent_features_ == 3 and out["params"]["init"] == "empty"
    assert out["features"] == str(feats) and out["allocation"] == str(alloc) and out["model"] == str(model)
    assert out["learned"]["objective_"] == pytest.approx(expected.objective_)
    assert len(out["objective_history"]) == out["learned"]["n_iter_"] >= 1
    A, Z = read(feats), zarr.open_array(str(alloc), mode="r")
    assert A.shape == (3, 4)
    np.testing.assert_allclose(A, expected.features_)
    assert Z.dtype == np.uint8 and Z.shape == (600, 3) and Z.chunks == (200, 3)  # written chunk by chunk
    np.testing.assert_array_equal(Z[...], np.asarray(expected.allocation_))
    assert np.abs(Z[...] @ A - np.asarray(X)).max() < 1.0  # Z A reconstructs the data up to the noise
    np.testing.assert_allclose(dclust.load(model).features_, A)

    # defaults (init="sample"), --features alone
    default = dclust.BPMeans(lam=4.0, random_state=0).fit(X)
    out = ok_json(run(["fit", "bpmeans", features_store, "--lam", 4, "--features", tmp_path / "A2.zarr", "--seed", 0,
                       "--json", "--quiet", "--scheduler", address]))
    assert out["allocation"] is None and out["model"] is None and out["params"]["init"] == "sample"
    np.testing.assert_allclose(read(tmp_path / "A2.zarr"), default.features_)
    assert sorted(os.listdir(tmp_path)) == ["A.zarr", "A2.zarr", "Z.zarr", "m.zarr"]


# ------------------------------------------------------------------------------------------------ fit rdpmeans


def test_fit_rdpmeans(linked_store, address, tmp_path):
    x, links, truth, G = linked_store
    X = dclust.open_array(x)
    expected = dclust.RDPMeans(n_clusters=3, max_iter=6, random_state=0).fit(X, constraints=G.rechunk(X.chunks[0]))
    labels, model = tmp_path / "l.zarr", tmp_path / "m.zarr"
    out = ok_json(run(["fit", "rdpmeans", x, "--k", 3, "--constraints", links, "--labels", labels, "--model", model,
                       "--max-iter", 6, "--seed", 0, "--json", "--quiet", "--scheduler", address]))
    assert out["command"] == "fit rdpmeans" and out["estimator"] == "RDPMeans"
    assert out["n_must"] == G.n_must and out["n_cannot"] == G.n_cannot and G.n_links > 100
    assert out["n_clusters"] == expected.n_clusters_ and out["learned"]["lam_"] == pytest.approx(expected.lam_)
    assert out["violated"] == dict(zip(("must_links_split", "cannot_links_joined"), expected.n_violated_))
    assert out["constraints"] == links and out["labels"] == str(labels) and out["model"] == str(model)
    got = read(labels)
    np.testing.assert_array_equal(got, np.asarray(expected.labels_))
    assert dclust.metrics.adjusted_rand_score(truth, got) > 0.95
    assert type(dclust.load(model)) is dclust.RDPMeans

    out = ok_json(run(["fit", "rdpmeans", x, "--lam", expected.lam_, "--constraints", links, "--labels",
                       tmp_path / "l2.zarr", "--model", tmp_path / "m2.zarr", "--max-iter", 6, "--seed", 0, "--json",
                       "--quiet", "--scheduler", address]))
    assert out["params"]["lam"] == pytest.approx(expected.lam_) and out["n_clusters"] == expected.n_clusters_


def test_fit_rdpmeans_links_for_other_rows(linked_store, stream_store, address, tmp_path):
    _, links, _, _ = linked_store
    r = run(["fit", "rdpmeans", stream_store, "--lam", 4, "--constraints", links, "--labels", tmp_path / "l.zarr",
             "--model", tmp_path / "m.zarr", "--quiet", "--scheduler", address])
    assert r.exit_code == 1 and "600" in one_line_error(r.stderr)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------- existing outputs, usage errors


def test_existing_outputs_need_overwrite(stream_store, features_store, linked_store, address, tmp_path):
    x, links, _, _ = linked_store
    taken = tmp_path / "taken.zarr"
    dclust.write_labels(np.zeros(5, np.int32), taken)
    before = snapshot(taken)
    t = tmp_path
    commands = {
        "--labels": dmeans_args(stream_store, taken, "--checkpoint", t / "ck.zarr", "--model", t / "dm.zarr"),
        "--model": ["stream", "anytime-dpmeans", stream_store, "--lam", 9, "--batch-rows", BATCH, "--labels",
                    t / "al.zarr", "--model", taken],
        "--allocation": ["fit", "bpmeans", features_store, "--lam", 4, "--features", t / "A.zarr", "--allocation",
                         taken],
        "--features": ["fit", "bpmeans", features_store, "--lam", 4, "--features", taken],
        "--labels ": ["fit", "rdpmeans", x, "--k", 3, "--constraints", links, "--labels", taken, "--model",
                      t / "rm.zarr"],
    }
    for option, args in commands.items():
        r = run([*args, "--quiet", "--scheduler", address])
        assert r.exit_code == 1, (option, r.stderr)
        line = one_line_error(r.stderr)
        assert option.strip() in line and "--overwrite" in line
        assert snapshot(taken) == before and sorted(os.listdir(tmp_path)) == ["taken.zarr"], option

    # with --overwrite the labels store is replaced
    r = run([*commands["--labels"], "--overwrite", "--quiet", "--scheduler", address])
    assert r.exit_code == 0, r.stderr
    assert read(taken).shape == (T * BATCH,)
    assert sorted(os.listdir(tmp_path)) == ["ck.zarr", "dm.zarr", "taken.zarr"]


DM = ["stream", "dmeans", "{s}", "--batch-rows", "300", "--labels", "{t}/l.zarr"]
AT = ["stream", "anytime-dpmeans", "{s}", "--lam", "9", "--batch-rows", "300", "--labels", "{t}/l.zarr",
      "--model", "{t}/m.zarr"]
BP = ["fit", "bpmeans", "{f}", "--features", "{t}/A.zarr"]
RD = ["fit", "rdpmeans", "{f}", "--constraints", "{t}/links.zarr", "--labels", "{t}/l.zarr", "--model", "{t}/m.zarr"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (DM + ["--lam", "9"], "exactly one complete pair"),
        (DM + ["--lam", "9", "--T-Q", "3"], "exactly one complete pair"),
        (DM + ["--lam", "9", "--T-Q", "3", "--k-tau", "1.1", "--Q", "1", "--tau", "1"], "exactly one complete pair"),
        (DM + ["--lam", "9", "--T-Q", "1", "--k-tau", "1.1"], "--T-Q"),
        (DM + ["--lam", "9", "--T-Q", "3", "--k-tau", "0.5"], "--k-tau"),
        (DM + ["--lam", "9", "--Q", "-1", "--tau", "1"], "--Q"),
        (DM + ["--lam", "0", "--Q", "1", "--tau", "1"], "--lam"),
        (["stream", "dmeans", "{s}", "--batch-rows", "0", "--lam", "9", "--Q", "1", "--tau", "1", "--labels",
          "{t}/l.zarr"], "--batch-rows"),
        (DM + ["--lam", "9", "--Q", "1", "--tau", "1", "--checkpoint", "{t}/l.zarr"], "same store"),
        (["stream", "dmeans", "{s}", "--batch-rows", "300", "--lam", "9", "--Q", "1", "--tau", "1", "--labels",
          "memory://l.zarr"], "local path"),
        (AT + ["--max-batches", "0"], "--max-batches"),
        (AT + ["--target-objective", "nan"], "--target-objective"),
        (["stream", "anytime-dpmeans", "{s}", "--lam", "9", "--labels", "{t}/l.zarr", "--model", "{t}/m.zarr"],
         "--batch-rows"),
        (BP + ["--lam", "0"], "--lam"),
        (BP + ["--lam", "4", "--init", "random"], "--init"),
        (BP + ["--lam", "4", "--allocation", "{t}/A.zarr"], "same store"),
        (RD + ["--lam", "4", "--k", "3"], "exactly one of --k"),
        (RD, "exactly one of --k"),
        (RD + ["--lam", "4", "--xi-rate", "0.5"], "--xi-rate"),
        (["fit", "rdpmeans", "{f}", "--lam", "4", "--labels", "{t}/l.zarr", "--model", "{t}/m.zarr"], "--constraints"),
        (["stream", "kmeans"], "kmeans"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(stream_store, features_store, tmp_path, args, needle):
    args = [a.format(s=stream_store, f=features_store, t=tmp_path) for a in args]
    r = CliRunner().invoke(app, args)  # no --scheduler: a usage error stops before any cluster is started
    assert r.exit_code == 2, (r.stdout, r.stderr, r.exception)
    assert needle in " ".join(re.sub("[│╭╮╰╯─]", " ", r.stderr).split())
    assert "Traceback" not in r.stderr
    assert os.listdir(tmp_path) == []
