"""Checkpoints of the fits with side information (RDPMeans, GMPR, TVClust; ``checkpoint=PATH``): a fit stopped
after iteration k and refitted with the same checkpoint ends with every learned attribute equal, bit for bit, to
an uninterrupted fit's; a rerun after completion returns that model at once; a checkpoint of other parameters,
data or another constraint graph is refused before anything is written. Plus ``dclust fit rdpmeans --checkpoint``
killed by Ctrl-C and rerun."""

from __future__ import annotations

import json
import os
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr

from _support.checkpoints import Interrupt, Stop, snapshot, stop_after

import dclust
from dclust.constraints import ConstraintGraph
from dclust.errors import StorageError
from dclust.io._checkpoint import learned_attributes

pytestmark = pytest.mark.filterwarnings("ignore::dclust.errors.ConvergenceWarning")


def interrupted(make, X, G, k):
    with pytest.raises(Stop), dclust.on_progress(stop_after(k)):
        make().fit(X, constraints=G)


def fit_events(make, X, G):
    events = []
    with dclust.on_progress(events.append):
        model = make().fit(X, constraints=G)
    return model, [e for e in events if e.phase in ("init", "iter")]


def value(v):
    return np.asarray(v.compute() if hasattr(v, "compute") else v)


def same_model(a, b):
    """Every learned attribute (as dclust.save stores them) equal, bit for bit."""
    la, lb = learned_attributes(a), learned_attributes(b)
    assert sorted(la) == sorted(lb) and len(la) >= 7
    for name in la:
        x, y = value(la[name]), value(lb[name])
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)


def refused(make, X, G, ck, *fragments):
    before = snapshot(ck)
    with pytest.raises(StorageError) as info:
        make().fit(X, constraints=G)
    text = str(info.value)
    for f in ("expected", "received", "another checkpoint path", *fragments):
        assert f in text, text
    assert snapshot(ck) == before  # nothing written
    return text


def saved(ck):
    return json.loads((ck / "zarr.json").read_text())["attributes"]["dclust_checkpoint"]


def resumes(make, X, G, ref, k, ck, check=None):
    """Stop after iteration k, refit: only iterations k+1.. run, and the model is the uninterrupted one."""
    interrupted(lambda: make(ck), X, G, k)
    assert (ck / "zarr.json").is_file()
    state = saved(ck)
    assert state["state"]["phase"] == "iter" and state["fingerprint"]["constraints"]["n_links"] == G.n_links
    if check is not None:
        check(state["state"])
    model, events = fit_events(lambda: make(ck), X, G)
    assert [e.phase for e in events] == ["iter"] * (len(events))  # no initialisation again
    assert [e.iteration for e in events] == list(range(k + 1, k + 1 + len(events))) and events
    same_model(model, ref)
    return model


# ------------------------------------------------------------------------------------------------- RDPMeans


@pytest.fixture(scope="module")
def rdp_data():
    """600 x 2 points in four blobs (150-row chunks) and 60 noisy links across blocks; count data for KL."""
    rng = np.random.default_rng(0)
    centers = rng.uniform(-8, 8, (4, 2))
    y = rng.integers(0, 4, 600)
    X = centers[y] + rng.normal(size=(600, 2))
    i, j = rng.integers(0, 600, 80), rng.integers(0, 600, 80)
    keep = i < j
    must = (y[i] == y[j])[keep] ^ (rng.random(keep.sum()) < 0.1)
    G = ConstraintGraph.from_pairs(i[keep], j[keep], must, n_samples=600, chunks=150)
    counts = rng.poisson(np.array([[8.0, 1, 1], [1, 8.0, 1], [1, 1, 8.0], [4, 4, 1]])[y]).astype(np.float64)
    return da.from_array(X, chunks=(150, -1)), da.from_array(counts, chunks=(150, -1)), G


RDP = {
    "serial": dict(lam=30.0, xi0=0.5, max_xi=8.0, max_iter=10, random_state=0, prefix_size=30, max_proposals=8),
    "jacobi-kl": dict(lam=1.5, xi0=0.05, max_iter=6, random_state=1, prefix_size=30, mode="jacobi",
                      divergence="kl", smoothing=0.5),
}


@pytest.mark.parametrize("case", sorted(RDP))
def test_rdpmeans_resumes_to_the_uninterrupted_model(case, rdp_data, tmp_path):
    X, counts, G = rdp_data
    if case != "serial":
        X = counts
    make = lambda ck=None: dclust.RDPMeans(**RDP[case], checkpoint=ck)  # noqa: E731
    ref = make().fit(X, constraints=G)
    assert ref.n_iter_ >= 4 and G.n_links > 20 and ref.n_clusters_ >= 2
    if case == "serial":
        assert ref.converged_ and ref.xi_history_[-1] >= 8.0
    for k in (1, ref.n_iter_ - 1):
        ck = tmp_path / f"ck{k}"
        model = resumes(make, X, G, ref, k, ck)
        if case == "serial":  # the serial order of every pass, including those run before the stop
            for a, b in zip(model.serial_order_, ref.serial_order_, strict=True):
                np.testing.assert_array_equal(a, b)
    # after completion the checkpoint holds the model: a rerun makes no pass and returns it; dclust.load reads it
    again, events = fit_events(lambda: make(ck), X, G)
    assert events == []
    same_model(again, ref)
    same_model(dclust.load(ck), ref)
    if case == "serial":
        for a, b in zip(again.serial_order_, ref.serial_order_, strict=True):
            np.testing.assert_array_equal(a, b)
    assert sorted(os.listdir(tmp_path)) == ["ck1", f"ck{ref.n_iter_ - 1}"]  # no temporaries left


def test_rdpmeans_checkpoint_of_other_parameters_data_or_links_is_refused(rdp_data, tmp_path):
    X, _, G = rdp_data
    ck = tmp_path / "ck"
    params = RDP["serial"]
    interrupted(lambda: dclust.RDPMeans(**params, checkpoint=ck), X, G, 2)
    make = lambda **kw: (lambda: dclust.RDPMeans(**{**params, **kw}, checkpoint=ck))  # noqa: E731
    refused(make(lam=20.0), X, G, ck, "lam=30.0 (now 20.0)")
    refused(make(mode="jacobi"), X, G, ck, "mode='serial' (now 'jacobi')")
    # another constraint graph over the same rows: one link less, one link flipped, or none at all
    a, b, s = G.pairs()
    fewer = ConstraintGraph.from_pairs(a[1:], b[1:], s[1:] > 0, n_samples=600, chunks=150)
    flipped = ConstraintGraph.from_pairs(a, b, np.r_[s[:1] < 0, s[1:] > 0], n_samples=600, chunks=150)
    text = refused(make(), X, fewer, ck, "constraints=", "other data")
    assert f"'n_links': {G.n_links}" in text and f"'n_links': {G.n_links - 1}" in text
    refused(make(), X, flipped, ck, "pairs_sha256")
    refused(make(), X, None, ck, "'n_links': 0")
    # the same shape, chunks and first rows but other values further down: refused at the first pass
    other = X.compute()
    other[400:] += 0.25
    refused(make(), da.from_array(other, chunks=(150, -1)), G, ck, "total weight, mean and scatter")
    # and the right fit still resumes from it
    resumed = dclust.RDPMeans(**params, checkpoint=ck).fit(X, constraints=G)
    same_model(resumed, dclust.RDPMeans(**params).fit(X, constraints=G))


# ------------------------------------------------------------------------------------------------- GMPR


@pytest.fixture(scope="module")
def gm_data():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (200, 2)), rng.normal(3, 1.5, (200, 2))])
    perm = rng.permutation(400)
    X = X[perm]
    G = ConstraintGraph.from_pairs([0, 1, 5, 7], [250, 2, 300, 390], [False, True, False, True], n_samples=400,
                                   chunks=100)
    return da.from_array(X, chunks=(100, -1)), G


@pytest.mark.parametrize("cov", ["full", "diag"])
def test_gmpr_resumes_to_the_uninterrupted_model(cov, gm_data, tmp_path):
    X, G = gm_data
    params = dict(n_classes=2, clusters_per_class=2, covariance_type=cov, random_state=0, tol=1e-12, max_iter=8)
    make = lambda ck=None: dclust.GMPR(**params, checkpoint=ck)  # noqa: E731
    ref = make().fit(X, constraints=G)
    assert ref.n_iter_ == 8 and len(ref.objective_history_) == 9 and ref.n_must_ == 2
    for k in (1, 5):
        resumes(make, X, G, ref, k, tmp_path / f"ck{k}")
    again, events = fit_events(lambda: make(tmp_path / "ck5"), X, G)
    assert events == []
    same_model(again, ref)
    same_model(dclust.load(tmp_path / "ck5"), ref)
    np.testing.assert_array_equal(again.predict(X, constraints=G).compute(), ref.predict(X, constraints=G).compute())


def test_gmpr_checkpoint_of_other_parameters_or_links_is_refused(gm_data, tmp_path):
    X, G = gm_data
    params = dict(n_classes=2, random_state=0, tol=1e-12, max_iter=6)
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.GMPR(**params, checkpoint=ck), X, G, 2)
    refused(lambda: dclust.GMPR(**{**params, "reg_covar": 1e-3}, checkpoint=ck), X, G, ck, "reg_covar=")
    a, b, s = G.pairs()
    other = ConstraintGraph.from_pairs(a, b[::-1], s > 0, n_samples=400, chunks=100)  # same counts, other pairs
    refused(lambda: dclust.GMPR(**params, checkpoint=ck), X, other, ck, "pairs_sha256")
    refused(lambda: dclust.GMPR(**params, checkpoint=ck), X, None, ck, "'n_links': 0")
    moved = X.compute()
    moved[300:] *= 1.01
    refused(lambda: dclust.GMPR(**params, checkpoint=ck), da.from_array(moved, chunks=(100, -1)), G, ck,
            "total weight, mean and scatter")
    same_model(dclust.GMPR(**params, checkpoint=ck).fit(X, constraints=G), dclust.GMPR(**params).fit(X, constraints=G))


# ------------------------------------------------------------------------------------------------- TVClust


@pytest.fixture(scope="module")
def tv_data():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 0.5, (40, 2)), rng.normal(4, 0.5, (40, 2))])
    G = ConstraintGraph.from_pairs([0, 40, 3, 10], [1, 41, 45, 70], [True, True, False, False], n_samples=80)
    return X, G


def test_tvclust_chain_resumes_bit_for_bit(tv_data, tmp_path):
    X, G = tv_data
    params = dict(init_clusters=2, n_sweeps=8, random_state=0)  # p and q sampled: the generator is used each sweep
    make = lambda ck=None: dclust.TVClust(**params, checkpoint=ck)  # noqa: E731
    ref = make().fit(X, constraints=G)

    def check(state):  # the generator's exact state, as JSON (no pickle), and the sweep to continue at
        assert json.loads(state["loop"]["state"]["rng"])["bit_generator"] == "PCG64" and state["loop"]["iteration"] == k

    for k in (1, 5):
        ck = tmp_path / f"ck{k}"
        resumes(make, X, G, ref, k, ck, check)
    again, events = fit_events(lambda: make(ck), X, G)
    assert events == []
    same_model(again, ref)

    # random_state=None / a Generator: the chain continues from the saved generator state, not the new one
    gen = tmp_path / "gen"
    with pytest.raises(Stop), dclust.on_progress(stop_after(3)):
        dclust.TVClust(init_clusters=2, n_sweeps=6, random_state=np.random.default_rng(5), checkpoint=gen).fit(
            X, constraints=G)
    resumed = dclust.TVClust(init_clusters=2, n_sweeps=6, random_state=np.random.default_rng(99),
                             checkpoint=gen).fit(X, constraints=G)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same_model(resumed, dclust.TVClust(init_clusters=2, n_sweeps=6, random_state=np.random.default_rng(5)).fit(
            X, constraints=G))


def test_tvclust_checkpoint_of_other_parameters_or_links_is_refused(tv_data, tmp_path):
    X, G = tv_data
    params = dict(init_clusters=2, n_sweeps=6, random_state=0)
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.TVClust(**params, checkpoint=ck), X, G, 2)
    refused(lambda: dclust.TVClust(**{**params, "alpha": 2.0}, checkpoint=ck), X, G, ck, "alpha=1.0 (now 2.0)")
    refused(lambda: dclust.TVClust(**{**params, "random_state": 1}, checkpoint=ck), X, G, ck, "random_state=0")
    a, b, s = G.pairs()
    refused(lambda: dclust.TVClust(**params, checkpoint=ck), X,
            ConstraintGraph.from_pairs(a[:-1], b[:-1], s[:-1] > 0, n_samples=80), ck, "'n_links': 3")
    other = X.copy()
    other[60] += 1.0
    refused(lambda: dclust.TVClust(**params, checkpoint=ck), other, G, ck, "total weight, mean and scatter")


# ------------------------------------------------------------------------------------------------- COPKMeans


def test_copkmeans_resumes_inside_a_run_and_between_runs(tmp_path):
    from dclust.cluster._copkmeans import COPKMeans

    rng = np.random.default_rng(3)
    y = np.repeat([0, 1, 2], 80)
    X = rng.normal(size=(240, 2)) * 1.3 + np.array([[0, 0], [2.5, 0], [1.2, 2.2]])[y]
    G = ConstraintGraph.from_labels_sample(y, 0.01, rng=0, p=0.9)
    params = dict(n_clusters=3, n_init=3, random_state=0)
    make = lambda ck=None: COPKMeans(**params, checkpoint=ck)  # noqa: E731
    ref, events = fit_events(make, X, G)
    runs = [e.extra["init"] for e in events if e.phase == "iter"]
    total, in_first = len(runs), runs.count(0)
    assert in_first >= 2 and runs.count(2) >= 2
    assert [e.phase for e in events].count("init") == 3  # one per run
    for k in (1, in_first + 1):  # inside the first run; in the second, after one of its sweeps
        ck = tmp_path / f"ck{k}"
        interrupted(lambda: make(ck), X, G, k)
        model, events = fit_events(lambda: make(ck), X, G)
        assert sum(e.phase == "iter" for e in events) == total - k
        assert [e.phase for e in events].count("init") == (2 if k == 1 else 1)  # runs not started yet
        same_model(model, ref)
    again, events = fit_events(lambda: make(ck), X, G)
    assert events == []
    same_model(again, ref)
    a, b, s = G.pairs()
    refused(lambda: make(ck), X, ConstraintGraph.from_pairs(a[1:], b[1:], s[1:] > 0, n_samples=240,
                                                            check_feasible=False), ck,
            "pairs_sha256")


def test_a_damaged_state_is_refused_with_a_storage_error(rdp_data, tmp_path):
    X, _, G = rdp_data
    ck = tmp_path / "ck"
    interrupted(lambda: dclust.RDPMeans(**RDP["serial"], checkpoint=ck), X, G, 2)
    doc = json.loads((ck / "zarr.json").read_text())
    z = doc["attributes"]["dclust_checkpoint"]["state"]["loop"]["state"]["z"]
    z["data"], z["shape"] = z["data"][:-1], [len(z["data"]) - 1]
    (ck / "zarr.json").write_text(json.dumps(doc))
    refused(lambda: dclust.RDPMeans(**RDP["serial"], checkpoint=ck), X, G, ck, "labels of the linked rows",
            "damaged")


# ------------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def address():
    from distributed import LocalCluster

    # in-process worker: a real distributed scheduler and worker, without a fresh process importing dclust again.
    # No memory limit: an in-process worker measures the RSS of the whole pytest process, and a limit it crosses
    # pauses the worker (every compute then waits forever; this hung CI once the suite had grown past 0.8 GiB).
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None,
                      memory_limit=0) as c:
        yield c.scheduler_address


def test_cli_fit_rdpmeans_resumes_from_its_checkpoint(rdp_data, address, tmp_path):
    from typer.testing import CliRunner

    from dclust._cli.main import app

    X, _, G = rdp_data
    x, links = tmp_path / "x.zarr", tmp_path / "links.zarr"
    dclust.write_array(X.compute(), x, chunks=150)
    G.to_zarr(links)
    expected = dclust.RDPMeans(lam=30.0, xi0=0.5, max_iter=6, random_state=0).fit(dclust.open_array(str(x)),
                                                                                constraints=G)
    out, labels, model, ck = tmp_path / "out", tmp_path / "out/l.zarr", tmp_path / "out/m.zarr", tmp_path / "out/ck"
    out.mkdir()
    args = [str(a) for a in ["fit", "rdpmeans", x, "--lam", 30, "--xi0", 0.5, "--max-iter", 6, "--seed", 0,
                             "--constraints", links, "--labels", labels, "--model", model, "--checkpoint", ck,
                             "--scheduler", address]]
    with dclust.on_progress(Interrupt(3)):
        r = CliRunner().invoke(app, [*args, "--quiet"], catch_exceptions=False)
    assert r.exit_code == 130, r.stderr
    assert os.listdir(out) == ["ck"]  # the state after iteration 3, no labels or model
    events = []
    with dclust.on_progress(events.append):
        r = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["resumed"] is True and result["checkpoint"] == str(ck)
    assert f"resuming from the checkpoint {ck}" in r.stderr
    assert [e.iteration for e in events if e.phase == "iter"] == list(range(4, expected.n_iter_ + 1))
    assert result["objective_history"] == expected.objective_history_
    np.testing.assert_array_equal(zarr.open_array(str(labels), mode="r")[...], np.asarray(expected.labels_))
    same_model(dclust.load(str(model)), expected)


def test_cli_fit_gmpr_with_a_checkpoint_reruns_from_the_finished_fit(gm_data, address, tmp_path):
    from typer.testing import CliRunner

    from dclust._cli.main import app

    X, G = gm_data
    x, links, ck = tmp_path / "x.zarr", tmp_path / "links.zarr", tmp_path / "ck"
    dclust.write_array(X.compute(), x, chunks=100)
    G.to_zarr(links)
    args = [str(a) for a in ["fit", "gmpr", x, "--classes", 2, "--constraints", links, "--labels", tmp_path / "l.zarr",
                             "--model", tmp_path / "m.zarr", "--max-iter", 5, "--seed", 0, "--checkpoint", ck,
                             "--json", "--quiet", "--scheduler", address]]
    first = CliRunner().invoke(app, args, catch_exceptions=False)
    assert first.exit_code == 0, first.stderr
    events = []
    with dclust.on_progress(events.append):
        again = CliRunner().invoke(app, [*args, "--overwrite"], catch_exceptions=False)
    assert again.exit_code == 0, again.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert (a["resumed"], b["resumed"]) == (False, True) and b["checkpoint"] == str(ck)
    assert [e.phase for e in events] == ["done"]  # no pass: the checkpoint holds the finished model
    assert a["objective_history"] == b["objective_history"] and len(a["objective_history"]) == 6
    same_model(dclust.load(str(tmp_path / "m.zarr")), dclust.load(str(ck)))
