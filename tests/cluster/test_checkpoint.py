"""Checkpoints (``checkpoint=PATH``): a fit stopped after iteration k and refitted with the same checkpoint ends
with the model of an uninterrupted fit, bit for bit; a checkpoint of another fit, a damaged one or one of a newer
format is refused with a clear error before anything is written."""

from __future__ import annotations

import json
import os
import shutil

import dask.array as da
import numpy as np
import pytest
import zarr

from _support.checkpoints import Stop, snapshot, stop_after

import dclust
from dclust._store._checkpoint import FORMAT_VERSION
from dclust.errors import FormatVersionError, InvalidParameterError, StorageError


def interrupted(make, X, k):
    with pytest.raises(Stop), dclust.on_progress(stop_after(k)):
        make().fit(X)


def iter_events(make, X):
    events = []
    with dclust.on_progress(events.append):
        model = make().fit(X)
    return model, [e for e in events if e.phase in ("init", "iter")]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    centers = rng.uniform(-10, 10, size=(6, 3))
    X = centers[rng.integers(0, 6, 2400)] + rng.normal(size=(2400, 3))
    return da.from_array(X, chunks=(400, -1)), X


@pytest.fixture(scope="module")
def dp_data():
    """Well separated blobs: DP-means (seed 1) converges in 5 passes."""
    rng = np.random.default_rng(7)
    centers = rng.uniform(-30, 30, size=(6, 3))
    return da.from_array(centers[rng.integers(0, 6, 2400)] + rng.normal(size=(2400, 3)), chunks=(400, -1))


KM = dict(n_clusters=6, init="random", n_init=2, random_state=3)
DP = dict(lam=80.0, random_state=1, prefix_size=40, max_proposals=8)


def same_kmeans(a, b, X):
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert a.inertia_ == b.inertia_ and a.n_iter_ == b.n_iter_ and a.objective_history_ == b.objective_history_
    np.testing.assert_array_equal(a.predict(X).compute(), b.predict(X).compute())


# ------------------------------------------------------------------------------------------------- KMeans


def test_kmeans_resumes_to_the_uninterrupted_model(data, tmp_path):
    X, _ = data
    ref, events = iter_events(lambda: dclust.KMeans(**KM), X)
    first_init = next(i for i, e in enumerate(events[1:], 1) if e.phase == "init") - 1  # iterations of init 1
    total = sum(e.phase == "iter" for e in events)
    assert first_init >= 3 and total > first_init + 2
    for k in (2, first_init + 2):  # inside the first Lloyd run, and inside the second init's
        ck = tmp_path / f"ck{k}"
        interrupted(lambda: dclust.KMeans(**KM, checkpoint=ck), X, k)
        assert (ck / "zarr.json").is_file()
        resumed, events = iter_events(lambda: dclust.KMeans(**KM, checkpoint=ck), X)
        same_kmeans(resumed, ref, X)
        # only the iterations after the checkpoint ran (the second init is not seeded again when resumed in it)
        assert sum(e.phase == "iter" for e in events) == total - k
        assert [e.phase for e in events].count("init") == (1 if k == 2 else 0)

    # after a complete fit the checkpoint holds the model: a rerun returns it without a pass, and it loads
    again, events = iter_events(lambda: dclust.KMeans(**KM, checkpoint=ck), X)
    assert events == []
    same_kmeans(again, ref, X)
    same_kmeans(dclust.load(ck), ref, X)
    assert sorted(os.listdir(tmp_path)) == sorted(f"ck{k}" for k in (2, first_init + 2))  # no temporaries left


def test_kmeans_without_checkpoint_and_with_a_fresh_one_agree(data, tmp_path):
    X, _ = data
    same_kmeans(dclust.KMeans(**KM, checkpoint=tmp_path / "new").fit(X), dclust.KMeans(**KM).fit(X), X)


def test_kmeans_with_an_init_array_and_a_generator_seed(data, tmp_path):
    X, Xn = data
    init = Xn[:6].copy()
    ref = dclust.KMeans(n_clusters=6, init=init).fit(X)
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.KMeans(n_clusters=6, init=init, checkpoint=ck), X, 2)
    same_kmeans(dclust.KMeans(n_clusters=6, init=init, checkpoint=ck).fit(X), ref, X)
    with pytest.raises(StorageError, match="init=<another array>"):
        dclust.KMeans(n_clusters=6, init=init + 1.0, checkpoint=ck).fit(X)

    # random_state=None / a Generator: the generator's state is in the checkpoint, so the resume is still exact
    gen_ck = tmp_path / "gen"
    one = dict(n_clusters=6, init="random")
    with pytest.raises(Stop), dclust.on_progress(stop_after(2)):
        dclust.KMeans(**one, random_state=np.random.default_rng(11), checkpoint=gen_ck).fit(X)
    resumed = dclust.KMeans(**one, random_state=np.random.default_rng(999), checkpoint=gen_ck).fit(X)
    same_kmeans(resumed, dclust.KMeans(**one, random_state=np.random.default_rng(11)).fit(X), X)


# ------------------------------------------------------------------------------------------------- DPMeans


def test_dpmeans_resumes_to_the_uninterrupted_model(dp_data, tmp_path):
    X = dp_data
    ref = dclust.DPMeans(**DP).fit(X)
    assert ref.n_iter_ >= 4 and ref.converged_
    for k in (1, ref.n_iter_ - 1):
        ck = tmp_path / f"ck{k}"
        interrupted(lambda: dclust.DPMeans(**DP, checkpoint=ck), X, k)
        resumed, events = iter_events(lambda: dclust.DPMeans(**DP, checkpoint=ck), X)
        assert [e.iteration for e in events] == list(range(k + 1, ref.n_iter_ + 1))  # no init pass again
        np.testing.assert_array_equal(resumed.cluster_centers_, ref.cluster_centers_)
        assert resumed.objective_history_ == ref.objective_history_ and resumed.n_iter_ == ref.n_iter_
        assert resumed.assignment_objective_history_ == ref.assignment_objective_history_
        assert resumed.lam_ == ref.lam_ and resumed.converged_
        for a, b in zip(resumed.serial_order_, ref.serial_order_, strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(resumed.predict(X).compute(), ref.predict(X).compute())
    rerun, events = iter_events(lambda: dclust.DPMeans(**DP, checkpoint=ck), X)
    assert events == [] and rerun.objective_history_ == ref.objective_history_
    for a, b in zip(rerun.serial_order_, ref.serial_order_, strict=True):
        np.testing.assert_array_equal(a, b)


def test_dpmeans_with_n_clusters_resumes_with_the_same_lam(dp_data, tmp_path):
    X = dp_data
    params = dict(n_clusters=5, random_state=1, prefix_size=40, max_proposals=8)
    ref = dclust.DPMeans(**params).fit(X)
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.DPMeans(**params, checkpoint=ck), X, 1)
    resumed = dclust.DPMeans(**params, checkpoint=ck).fit(X)
    assert resumed.lam_ == ref.lam_ and resumed.objective_history_ == ref.objective_history_
    np.testing.assert_array_equal(resumed.cluster_centers_, ref.cluster_centers_)


# ------------------------------------------------------------------------------------------------- streams


def stream_data():
    rng = np.random.default_rng(3)
    centers = rng.uniform(-10, 10, (4, 2))
    X = np.concatenate([centers[rng.integers(0, 4, 150)] + 0.3 * rng.normal(size=(150, 2)) + 0.3 * t
                        for t in range(6)])
    return X, da.from_array(X, chunks=(150, -1))


def same_state(a, b, names):
    for n in names:
        x, y = getattr(a, n), getattr(b, n)
        x, y = (np.asarray(v.compute() if hasattr(v, "compute") else v) for v in (x, y))
        np.testing.assert_array_equal(x, y, err_msg=n)
    ha = {k: v for k, v in a.history_.items() if k != "seconds"}
    hb = {k: v for k, v in b.history_.items() if k != "seconds"}
    assert ha == hb


STREAMS = {
    "DynamicMeans": (dict(lam=4.0, T_Q=3, k_tau=1.1, random_state=0),
                     ["cluster_centers_", "cluster_ids_", "labels_", "weights_", "ages_", "objective_history_"]),
    "SpectralDynamicMeans": (dict(lam=10.0, T_Q=3, k_tau=1.5, kernel="linear", random_state=0),
                             ["cluster_ids_", "labels_", "weights_", "ages_", "support_", "support_coef_"]),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_stream_fit_and_partial_fit_resume(name, tmp_path):
    cls, (params, names) = getattr(dclust, name), STREAMS[name]
    X, Xd = stream_data()
    ref = cls(**params).fit(Xd)

    # fit over the time steps of an array: stopped after batch 3, refitted -> only batches 4..6 run
    ck = tmp_path / "fit"
    interrupted(lambda: cls(**params, checkpoint=ck), Xd, 3)
    resumed, events = iter_events(lambda: cls(**params, checkpoint=ck), Xd)
    assert [e.iteration for e in events] == [4, 5, 6]
    same_state(resumed, ref, names)
    same_state(dclust.load(ck), ref, names)  # a stream checkpoint is also a model

    # partial_fit: a new process' estimator restores the state at its first batch, which is the next one
    ck = tmp_path / "partial"
    first = cls(**params, checkpoint=ck)
    for t in range(2):
        first.partial_fit(X[150 * t:150 * (t + 1)])
    second = cls(**params, checkpoint=ck)
    for t in range(2, 6):
        second.partial_fit(X[150 * t:150 * (t + 1)])
    same_state(second, ref, names)
    # fit over a list of batches resumes too; one shorter than the checkpoint's stream is refused
    batches = [X[150 * t:150 * (t + 1)] for t in range(6)]
    same_state(cls(**params, checkpoint=ck).fit(batches), ref, names)
    with pytest.raises(StorageError, match="at least the 6 batches"):
        cls(**params, checkpoint=ck).fit(batches[:4])


def test_anytime_dpmeans_fit_resumes_at_the_next_batch(tmp_path):
    X, _ = stream_data()
    Xd = da.from_array(X, chunks=(100, -1))
    params = dict(lam=4.0, batch_rows=100, random_state=0)
    ref = dclust.AnytimeDPMeans(**params).fit(Xd)
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.AnytimeDPMeans(**params, checkpoint=ck), Xd, 4)
    resumed, events = iter_events(lambda: dclust.AnytimeDPMeans(**params, checkpoint=ck), Xd)
    assert [e.iteration for e in events] == list(range(5, 10))
    names = ["cluster_centers_", "cluster_ids_", "labels_", "weights_", "batch_order_", "n_seen_", "n_batches_"]
    same_state(resumed, ref, names)
    again, events = iter_events(lambda: dclust.AnytimeDPMeans(**params, checkpoint=ck), Xd)
    assert events == []  # every batch is done: the rerun returns at once
    same_state(again, ref, names)
    with pytest.raises(StorageError, match="other data"):  # other batches of the same store
        dclust.AnytimeDPMeans(**{**params, "batch_rows": 100}, checkpoint=ck).fit(Xd[:800])


# ------------------------------------------------------------------------------------------------- refusals


@pytest.fixture
def kmeans_ck(data, tmp_path):
    X, _ = data
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.KMeans(**KM, checkpoint=ck), X, 2)
    return ck


def _attrs(ck):
    return json.loads((ck / "zarr.json").read_text())


def _write_attrs(ck, attrs):
    doc = json.loads((ck / "zarr.json").read_text())
    doc["attributes"] = attrs
    (ck / "zarr.json").write_text(json.dumps(doc))


def _refused(make, X, ck, error, *fragments):
    before = snapshot(ck)
    with pytest.raises(error) as info:
        make().fit(X)
    text = str(info.value)
    assert "expected" in text and "received" in text, text
    for f in fragments:
        assert f in text, text
    assert snapshot(ck) == before  # nothing written
    return text


def test_other_parameters_estimator_or_data_are_refused(data, kmeans_ck):
    X, Xn = data
    ck = kmeans_ck
    _refused(lambda: dclust.KMeans(**{**KM, "n_clusters": 5}, checkpoint=ck), X, ck, StorageError,
             "n_clusters=6 (now 5)", "another checkpoint path")
    _refused(lambda: dclust.DPMeans(**DP, checkpoint=ck), X, ck, StorageError, "a checkpoint of DPMeans", "'KMeans'")
    _refused(lambda: dclust.KMeans(**KM, checkpoint=ck), X[:2000], ck, StorageError, "other data", "shape")
    _refused(lambda: dclust.KMeans(**KM, checkpoint=ck), X.rechunk((600, -1)), ck, StorageError, "row_chunks")
    _refused(lambda: dclust.KMeans(**KM, checkpoint=ck), X + 1.0, ck, StorageError, "head_sha256")
    # same shape, chunks and first rows, other values further down: refused at the first pass, by its sums
    other = Xn.copy()
    other[1000:] += 0.5
    _refused(lambda: dclust.KMeans(**KM, checkpoint=ck), da.from_array(other, chunks=(400, -1)), ck,
             StorageError, "total weight, mean and scatter")
    # parameters that do not change the result may change
    same_kmeans(dclust.KMeans(**KM, persist=False, checkpoint=ck).fit(X), dclust.KMeans(**KM).fit(X), X)


def test_newer_format_and_damaged_checkpoints_are_refused(data, kmeans_ck):
    X, _ = data
    ck = kmeans_ck
    make = lambda: dclust.KMeans(**KM, checkpoint=ck)  # noqa: E731
    good = _attrs(ck)["attributes"]

    newer = json.loads(json.dumps(good))
    newer["dclust_checkpoint"]["format"] = 99
    _write_attrs(ck, newer)
    _refused(make, X, ck, FormatVersionError, "format 99", f"checkpoint format {FORMAT_VERSION}")

    for broken, fragment in [
        ({k: v for k, v in good.items() if k != "dclust_checkpoint"}, "'dclust_checkpoint'"),
        ({**good, "dclust_checkpoint": {**good["dclust_checkpoint"], "format": "1"}}, "format >= 1"),
        ({**good, "dclust_checkpoint": {**good["dclust_checkpoint"], "state": {"phase": "iter"}}}, "KeyError"),
    ]:
        _write_attrs(ck, broken)
        _refused(make, X, ck, StorageError, fragment, "damaged")

    (ck / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group", "attributes": {"dclust_ch')
    _refused(make, X, ck, StorageError, "readable Zarr group", "damaged")


def test_a_format_older_than_the_estimators_state_is_refused_others_are_read(data, dp_data, kmeans_ck, tmp_path):
    # DPMeans, RDPMeans and BPMeans save their loop as the fit loop does since format 2: a format-1 checkpoint of
    # theirs (their own loop state) is refused as such, not misread
    ck = tmp_path / "dp"
    interrupted(lambda: dclust.DPMeans(**DP, checkpoint=ck), dp_data, 2)
    attrs = _attrs(ck)["attributes"]
    attrs["dclust_checkpoint"]["format"] = 1
    _write_attrs(ck, attrs)
    _refused(lambda: dclust.DPMeans(**DP, checkpoint=ck), dp_data, ck, FormatVersionError,
             "a DPMeans checkpoint of format 2 or newer", "format 1, written by an older dclust")
    # an estimator whose state did not change reads format 1
    X, _ = data
    ref = dclust.KMeans(**KM).fit(X)
    attrs = _attrs(kmeans_ck)["attributes"]
    attrs["dclust_checkpoint"]["format"] = 1
    _write_attrs(kmeans_ck, attrs)
    same_kmeans(dclust.KMeans(**KM, checkpoint=kmeans_ck).fit(X), ref, X)


def test_mismatched_shapes_are_refused(data, kmeans_ck):
    X, _ = data
    ck = kmeans_ck
    make = lambda: dclust.KMeans(**KM, checkpoint=ck)  # noqa: E731
    attrs = _attrs(ck)["attributes"]
    tag = attrs["dclust_checkpoint"]["state"]["loop"]["state"]["centres"]
    assert tag["__dclust__"] == "inline_array" and tag["shape"] == [6, 3] and len(tag["data"]) == 18

    # the data does not fit the shape its tag says
    tag["shape"] = [5, 3]
    _write_attrs(ck, attrs)
    _refused(make, X, ck, StorageError, "inline array", "cannot reshape")

    # consistent, but not the (n_clusters, n_features) centres this fit needs
    tag["data"] = tag["data"][:15]
    _write_attrs(ck, attrs)
    _refused(make, X, ck, StorageError, "centres of shape (6, 3)", "(5, 3)")


def test_large_state_arrays_are_zarr_arrays_checked_against_their_tag(tmp_path):
    from dclust.io._checkpoint import Checkpointer

    ck = tmp_path / "ck"
    big = np.arange(5000, dtype=np.float64).reshape(1000, 5)
    Checkpointer(ck, dclust.KMeans(), None).save({"phase": "iter", "big": big, "small": big[:2]})
    state = Checkpointer(ck, dclust.KMeans(), None).resume()
    np.testing.assert_array_equal(state["big"], big)
    np.testing.assert_array_equal(state["small"], big[:2])
    name = _attrs(ck)["attributes"]["dclust_checkpoint"]["state"]["big"]["name"]
    zarr.open_group(str(ck), mode="r+").create_array(f"checkpoint/state/{name}", data=np.zeros((999, 5)),
                                                      overwrite=True)
    with pytest.raises(StorageError, match=r"of shape \[1000, 5\].*shape \[999, 5\]"):
        Checkpointer(ck, dclust.KMeans(), None).resume()


def test_not_a_checkpoint_and_a_bucket_root_are_refused(data, tmp_path):
    """(Checkpoints on object stores work: tests/io/test_object_store.py.)"""
    X, _ = data
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "notes.txt").write_text("mine")
    with pytest.raises(StorageError, match="checkpoint"):
        dclust.KMeans(**KM, checkpoint=tmp_path / "dir").fit(X)
    assert os.listdir(tmp_path / "dir") == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="not a directory"):
        dclust.KMeans(**KM, checkpoint=tmp_path / "file").fit(X)
    with pytest.raises(StorageError, match="root of a bucket"):
        dclust.KMeans(**KM, checkpoint="memory://").fit(X)
    with pytest.raises(InvalidParameterError, match="checkpoint"):
        dclust.KMeans(**KM, checkpoint=3).fit(X)


# ------------------------------------------------------------------------------------------------- durability


def test_a_crash_between_the_renames_of_a_save_keeps_the_previous_state(dp_data, tmp_path):
    """The state a save replaces is renamed aside before the new one is renamed in: a crash right between
    leaves it as .ck.old-*, with the new one as a complete .ck.tmp-*; the resume puts the old one back."""
    X = dp_data
    ref = dclust.DPMeans(**DP).fit(X)
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.DPMeans(**DP, checkpoint=ck), X, 2)
    os.replace(ck, tmp_path / ".ck.old-0123456789ab")
    shutil.copytree(tmp_path / ".ck.old-0123456789ab", tmp_path / ".ck.tmp-ba9876543210")
    resumed, events = iter_events(lambda: dclust.DPMeans(**DP, checkpoint=ck), X)
    assert events[0].iteration == 3
    assert resumed.objective_history_ == ref.objective_history_
    np.testing.assert_array_equal(resumed.cluster_centers_, ref.cluster_centers_)
    assert sorted(os.listdir(tmp_path)) == ["ck"]
