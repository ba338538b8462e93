"""Checkpoints (``checkpoint=PATH``) of BPMeans, KFeatures, StepwiseKFeatures, the in-memory MAD-Bayes variants
and the reference samplers: a fit stopped after pass/sweep k and refitted with the same checkpoint ends with the
model of an uninterrupted fit, bit for bit (the Gibbs chains draw the identical samples: the generator's state is
in the checkpoint); a rerun after completion returns at once; a checkpoint of other parameters is refused."""

from __future__ import annotations

import json
import os
import warnings

import dask.array as da
import numpy as np
import pytest
from typer.testing import CliRunner

from _support.checkpoints import Stop, snapshot, stop_after

import dclust
from dclust._cli.main import app
from dclust.cluster._collapsed import CappedDPMeans, CollapsedBPMeans, CollapsedDPMeans
from dclust.cluster import DPMMGibbs, IBPGibbs, SpectralClustering
from dclust.errors import StorageError
from dclust.io._checkpoint import Checkpointer

pytestmark = pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")


def interrupted(make, X, k):
    with pytest.raises(Stop), dclust.on_progress(stop_after(k)):
        make().fit(X)


def fit_with_events(make, X):
    events = []
    with dclust.on_progress(events.append):
        model = make().fit(X)
    return model, events


def iterations(events):
    return [e.iteration for e in events if e.phase == "iter"]


def _value(v):
    return np.asarray(v.compute()) if hasattr(v, "compute") else v


def same_model(a, b, extra=()):
    """Every learned attribute of ``a`` (and ``extra`` properties) equals ``b``'s exactly."""
    names = sorted(k for k in vars(b) if k.endswith("_") and not k.startswith("_")) + list(extra)
    assert names and names == sorted(k for k in vars(a) if k.endswith("_") and not k.startswith("_")) + list(extra)
    for name in names:
        x, y = _value(getattr(a, name)), _value(getattr(b, name))
        if isinstance(y, np.ndarray) or (isinstance(y, list) and y and isinstance(y[0], np.ndarray)):
            x, y = (v if isinstance(v, list) else [v] for v in (x, y))
            assert len(x) == len(y), name
            for p, q in zip(x, y):
                assert np.asarray(p).dtype == np.asarray(q).dtype, name
                np.testing.assert_array_equal(p, q, err_msg=name)
        else:
            assert x == y and type(x) is type(y), name


# ------------------------------------------------------------------------------------------------- data


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(5)
    centers = rng.uniform(-10, 10, (5, 2))
    return centers[rng.integers(0, 5, 300)] + 1.5 * rng.normal(size=(300, 2))


@pytest.fixture(scope="module")
def small_features():
    rng = np.random.default_rng(5)
    A = np.array([[4.0, 0, 0, 0], [0, 0, 4.0, 4.0], [0, 4.0, 0, 0]])
    return rng.integers(0, 2, (80, 3)) @ A + 0.8 * rng.normal(size=(80, 4))


@pytest.fixture(scope="module")
def features():
    """600 rows of binary combinations of 4 random features plus noise, 100-row chunks (dask)."""
    rng = np.random.default_rng(1)
    A = rng.normal(0, 3, (4, 4))
    F = rng.integers(0, 2, (600, 4)) @ A + 0.5 * rng.normal(size=(600, 4))
    return da.from_array(F, chunks=(100, -1))


# ------------------------------------------------------------------------------------------------- in memory

# estimator, parameters, data fixture, a parameter changed for the refusal test
IN_MEMORY = {
    "CollapsedDPMeans": (CollapsedDPMeans, dict(lam=20.0, random_state=0), "blobs", ("lam", 21.0)),
    "CappedDPMeans": (CappedDPMeans, dict(lam=40.0, max_clusters=4, random_state=0), "blobs", ("max_clusters", 3)),
    "CollapsedBPMeans": (CollapsedBPMeans, dict(lam=5.0, random_state=0), "small_features", ("lam", 6.0)),
    "DPMMGibbs": (DPMMGibbs, dict(sigma2=1.0, rho2=50.0, n_iter=6, random_state=0), "blobs", ("alpha", 2.0)),
    "IBPGibbs": (IBPGibbs, dict(sigma_x=0.5, sigma_a=3.0, n_iter=6, anneal_factor=4.0, random_state=0),
                 "small_features", ("sigma_x", 0.6)),
    "SpectralClustering": (SpectralClustering, dict(n_clusters=5, affinity="nearest_neighbors", n_neighbors=8,
                                                    n_init=3, random_state=0), "blobs", ("n_neighbors", 9)),
}


@pytest.mark.parametrize("name", sorted(IN_MEMORY))
def test_in_memory_estimators_resume_to_the_uninterrupted_model(name, request, tmp_path):
    cls, params, data, (other, value) = IN_MEMORY[name]
    X = request.getfixturevalue(data)
    ref, events = fit_with_events(lambda: cls(**params), X)
    total = iterations(events)
    assert len(total) >= 4 and total == list(range(1, len(total) + 1))
    k = 2
    ck = tmp_path / "ck"
    interrupted(lambda: cls(**params, checkpoint=ck), X, k)
    assert (ck / "zarr.json").is_file()
    resumed, events = fit_with_events(lambda: cls(**params, checkpoint=ck), X)
    assert iterations(events) == total[k:]  # only the passes after the checkpoint ran
    same_model(resumed, ref)

    # a finished fit's checkpoint holds the model: the rerun returns it at once, and dclust.load reads it
    again, events = fit_with_events(lambda: cls(**params, checkpoint=ck), X)
    assert [e.phase for e in events] == ["done"]
    same_model(again, ref)
    same_model(dclust.load(ck), ref)

    # other parameters, or other data of the same shape and first rows: refused, nothing written
    before = snapshot(ck)
    with pytest.raises(StorageError, match=rf"{other}=.*\(now {value}\)"):
        cls(**{**params, other: value}, checkpoint=ck).fit(X)
    changed = X.copy()
    changed[len(X) // 2:] *= 1.01
    with pytest.raises(StorageError, match="total weight, mean and scatter"):
        cls(**params, checkpoint=ck).fit(changed)
    assert snapshot(ck) == before
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no temporaries left


def test_gibbs_chain_resumed_with_a_generator_seed_is_bit_identical(blobs, tmp_path):
    """random_state=Generator: the generator's state after each sweep is in the checkpoint, so the resumed chain
    (given another generator, whose state is ignored) draws the same sweeps as the uninterrupted one."""
    params = dict(sigma2=1.0, rho2=50.0, n_iter=5, keep="last")
    ref = DPMMGibbs(**params, random_state=np.random.default_rng(3)).fit(blobs)
    ck = tmp_path / "ck"
    with pytest.raises(Stop), dclust.on_progress(stop_after(3)):
        DPMMGibbs(**params, random_state=np.random.default_rng(3), checkpoint=ck).fit(blobs)
    state = Checkpointer(ck, DPMMGibbs(**params, random_state=np.random.default_rng(0)), None)._params
    assert state["random_state"] is None  # a Generator is not a saved parameter; its state is in the loop state
    saved = json.loads((ck / "zarr.json").read_text())["attributes"]["dclust_checkpoint"]["state"]
    assert saved["sweep"] == 3 and json.loads(saved["rng"])["bit_generator"] == "PCG64"
    resumed = DPMMGibbs(**params, random_state=np.random.default_rng(999), checkpoint=ck).fit(blobs)
    same_model(resumed, ref)


# ------------------------------------------------------------------------------------------------- BPMeans

BP = dict(lam=8.0, random_state=0, prefix_size=20, max_proposals=4, n_init=2)


def test_bpmeans_resumes_to_the_uninterrupted_model(features, tmp_path):
    X = features
    ref, events = fit_with_events(lambda: dclust.BPMeans(**BP), X)
    assert ref.n_iter_ >= 5 and ref.converged_ and iterations(events) == list(range(1, ref.n_iter_ + 1))
    for k in (1, 3):  # after the first pass (its serial prefix and OCC records), and after a later one
        ck = tmp_path / f"ck{k}"
        interrupted(lambda: dclust.BPMeans(**BP, checkpoint=ck), X, k)
        resumed, events = fit_with_events(lambda: dclust.BPMeans(**BP, checkpoint=ck), X)
        assert iterations(events) == list(range(k + 1, ref.n_iter_ + 1))
        assert "init" not in [e.phase for e in events]  # the initial features are not drawn again
        same_model(resumed, ref, extra=("serial_order_",))

    again, events = fit_with_events(lambda: dclust.BPMeans(**BP, checkpoint=ck), X)
    assert [e.phase for e in events] == ["done"]
    same_model(again, ref, extra=("serial_order_",))  # with the allocation Z, saved in the checkpoint
    loaded = dclust.load(ck)
    np.testing.assert_array_equal(loaded.features_, ref.features_)
    np.testing.assert_array_equal(loaded.transform(X).compute(), ref.transform(X).compute())

    before = snapshot(ck)
    with pytest.raises(StorageError, match=r"lam=8\.0 \(now 9\.0\)"):
        dclust.BPMeans(**{**BP, "lam": 9.0}, checkpoint=ck).fit(X)
    with pytest.raises(StorageError, match="a checkpoint of KFeatures"):
        dclust.KFeatures(n_components=2, checkpoint=ck).fit(X)
    with pytest.raises(StorageError, match="row_chunks"):
        dclust.BPMeans(**BP, checkpoint=ck).fit(X.rechunk((150, -1)))
    assert snapshot(ck) == before


def test_capped_greedy_bpmeans_resumes(features, tmp_path):
    params = dict(lam=30.0, init="greedy", capped=True, max_features=4, max_iter=4, random_state=0,
                  prefix_size=20, max_proposals=4)
    ref = dclust.BPMeans(**params).fit(features)
    assert ref.n_iter_ == 4
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.BPMeans(**params, checkpoint=ck), features, 2)
    same_model(dclust.BPMeans(**params, checkpoint=ck).fit(features), ref, extra=("serial_order_",))


# ------------------------------------------------------------------------------------------------- K-features


@pytest.fixture(scope="module")
def kf_data():
    rng = np.random.default_rng(1)
    A = rng.normal(0, 3, (3, 4))
    F = rng.integers(0, 2, (300, 3)) @ A + rng.normal(size=(300, 4))
    return da.from_array(F, chunks=(100, -1))


KF = dict(n_features=3, n_init=2, max_iter=5, random_state=0)


def test_kfeatures_resumes_inside_either_restart(kf_data, tmp_path):
    X = kf_data
    ref, events = fit_with_events(lambda: dclust.KFeatures(**KF), X)
    total = iterations(events)
    assert len(total) >= 6
    for k in (2, len(total) - 2):  # in the first restart, and in the second (with the best run so far saved)
        ck = tmp_path / f"ck{k}"
        interrupted(lambda: dclust.KFeatures(**KF, checkpoint=ck), X, k)
        resumed, events = fit_with_events(lambda: dclust.KFeatures(**KF, checkpoint=ck), X)
        assert iterations(events) == total[k:]
        same_model(resumed, ref)
    again, events = fit_with_events(lambda: dclust.KFeatures(**KF, checkpoint=ck), X)
    assert [e.phase for e in events] == ["done"]
    same_model(again, ref)
    with pytest.raises(StorageError, match=r"n_init=2 \(now 3\)"):
        dclust.KFeatures(**{**KF, "n_init": 3}, checkpoint=ck).fit(X)


SW = dict(lam=40.0, max_features=5, max_iter=4, random_state=0)


def test_stepwise_kfeatures_resumes_between_and_inside_values_of_k(kf_data, tmp_path, monkeypatch):
    X = kf_data
    ref, events = fit_with_events(lambda: dclust.StepwiseKFeatures(**SW), X)
    assert iterations(events) == list(range(1, len(ref.objectives_by_k_) + 1)) and len(ref.objectives_by_k_) >= 3

    # stopped after K = 2: the resumed fit starts at K = 3
    ck = tmp_path / "between"
    interrupted(lambda: dclust.StepwiseKFeatures(**SW, checkpoint=ck), X, 2)
    resumed, events = fit_with_events(lambda: dclust.StepwiseKFeatures(**SW, checkpoint=ck), X)
    assert iterations(events)[0] == 3
    same_model(resumed, ref)

    # killed right after the 5th save (a pass inside a K-features run): resumed at the next pass
    ck = tmp_path / "inside"
    save, saves = Checkpointer.save, []

    def dying_save(self, state, model=None):
        save(self, state, model)
        saves.append(state)
        if len(saves) == 5:
            raise Stop

    with monkeypatch.context() as m:
        m.setattr(Checkpointer, "save", dying_save)
        with pytest.raises(Stop):
            dclust.StepwiseKFeatures(**SW, checkpoint=ck).fit(X)
    assert "outer" in saves[-1] and saves[-1]["loop"] is not None  # inside a run, not between two values of K
    same_model(dclust.StepwiseKFeatures(**SW, checkpoint=ck).fit(X), ref)
    again, events = fit_with_events(lambda: dclust.StepwiseKFeatures(**SW, checkpoint=ck), X)
    assert [e.phase for e in events] == ["done"]
    same_model(again, ref)
    with pytest.raises(StorageError, match="max_features=5"):
        dclust.StepwiseKFeatures(**{**SW, "max_features": 6}, checkpoint=ck).fit(X)


# ------------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def address():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_cli_fit_bpmeans_resumes_from_its_checkpoint(features, address, tmp_path):
    store = str(tmp_path / "x.zarr")
    dclust.write_array(features.compute(), store, chunks=100)
    ref = dclust.BPMeans(lam=30.0, init="greedy", max_iter=4, random_state=0).fit(dclust.open_array(store))
    assert ref.n_iter_ == 4
    ck, out = tmp_path / "ck", tmp_path / "A.zarr"
    args = ["fit", "bpmeans", store, "--lam", 30.0, "--init", "greedy", "--max-iter", 4, "--features", out,
            "--seed", 0, "--checkpoint", ck, "--scheduler", address]

    def interrupt(event):  # Ctrl-C after pass 2
        if event.phase == "iter" and event.iteration == 2:
            raise KeyboardInterrupt

    run = lambda extra: CliRunner().invoke(app, [str(a) for a in args + extra], catch_exceptions=False)  # noqa: E731
    with dclust.on_progress(interrupt):
        r = run(["--quiet"])
    assert r.exit_code == 130 and (ck / "zarr.json").is_file() and not out.exists()

    events = []
    with dclust.on_progress(events.append):
        r = run(["--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    result = json.loads(r.stdout)
    assert result["resumed"] is True and result["checkpoint"] == str(ck) and "resuming from the checkpoint" in r.stderr
    assert iterations(events) == list(range(3, ref.n_iter_ + 1))
    assert result["objective_history"] == ref.objective_history_
    np.testing.assert_array_equal(dclust.open_array(str(out)).compute(), ref.features_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(dclust.load(ck).features_, ref.features_)
    assert sorted(os.listdir(tmp_path)) == ["A.zarr", "ck", "x.zarr"]
