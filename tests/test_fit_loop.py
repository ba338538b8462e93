"""The contract of THE fit loop (``dclust._fit``), tested once for every estimator that runs on it, with real
estimators on a real Zarr store: progress events in order with their phases, ``max_iter`` / ``tol`` /
ConvergenceWarning, a checkpoint saved at every iteration before it is announced, and a fit interrupted after any
iteration that resumes to the bit-identical model."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from _support.checkpoints import Stop, stop_after

import dclust
from dclust._fit import LoopResult, fit_loop
from dclust.cluster._collapsed import CappedDPMeans
from dclust.cluster._copkmeans import COPKMeans
from dclust.cluster._kmeans import Lloyd
from dclust.errors import ConvergenceWarning


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """600 rows, 3 features, 4 overlapping blobs, in a Zarr store of 150-row chunks."""
    rng = np.random.default_rng(5)
    centers = rng.uniform(-4, 4, size=(4, 3))
    X = centers[rng.integers(0, 4, 600)] + rng.normal(size=(600, 3))
    path = tmp_path_factory.mktemp("fitloop") / "x.zarr"
    dclust.write_array(X, path, chunks=150)
    return dclust.open_array(path)


#: every estimator on the loop, with parameters that make runs of several iterations (and restarts)
ESTIMATORS = {
    "KMeans": lambda ck=None: dclust.KMeans(n_clusters=5, init="random", n_init=2, tol=0.0, max_iter=6,
                                            random_state=1, checkpoint=ck),
    "GMPR": lambda ck=None: dclust.GMPR(n_classes=2, clusters_per_class=2, covariance_type="diag", tol=1e-12,
                                        max_iter=5, random_state=0, checkpoint=ck),
    "KFeatures": lambda ck=None: dclust.KFeatures(n_components=3, n_init=2, max_iter=4, random_state=0,
                                                  checkpoint=ck),
    "CappedDPMeans": lambda ck=None: CappedDPMeans(lam=6.0, max_clusters=5, random_state=0, checkpoint=ck),
    "COPKMeans": lambda ck=None: COPKMeans(n_clusters=4, n_init=2, random_state=0, checkpoint=ck),
    "TVClust": lambda ck=None: dclust.TVClust(init_clusters=3, n_sweeps=4, random_state=0, checkpoint=ck),
    "DPMeans": lambda ck=None: dclust.DPMeans(lam=6.0, max_iter=5, prefix_size=20, max_proposals=8, random_state=0,
                                              checkpoint=ck),
    "RDPMeans": lambda ck=None: dclust.RDPMeans(lam=6.0, max_iter=4, prefix_size=20, max_proposals=8,
                                                random_state=0, checkpoint=ck),
    "BPMeans": lambda ck=None: dclust.BPMeans(lam=4.0, max_iter=5, prefix_size=20, max_proposals=8, random_state=0,
                                              checkpoint=ck),
}

#: estimators with ``converged_`` that stop at max_iter=2 unconverged on the store (with the unit their warning names)
UNCONVERGED = {
    "DPMeans": ("passes", lambda ck=None: dclust.DPMeans(lam=6.0, max_iter=2, random_state=0, checkpoint=ck)),
    "RDPMeans": ("iterations", lambda ck=None: dclust.RDPMeans(lam=6.0, max_iter=2, random_state=0, checkpoint=ck)),
    "BPMeans": ("passes", lambda ck=None: dclust.BPMeans(lam=4.0, max_iter=2, prefix_size=20, random_state=0,
                                                         checkpoint=ck)),
}


def fit_events(make, X):
    events = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with dclust.on_progress(events.append):
            model = make().fit(X)
    return model, events


def model_state(model):
    """Every learned attribute, dask arrays computed: what "the same model" compares."""
    out = {}
    for k, v in vars(model).items():
        if k.endswith("_") and not k.startswith("_"):
            out[k] = np.asarray(v.compute()) if hasattr(v, "compute") else v
    return out


def assert_same_model(a, b):
    sa, sb = model_state(a), model_state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        if isinstance(sa[k], np.ndarray):
            assert sa[k].dtype == sb[k].dtype, k
            np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)
        else:
            assert sa[k] == sb[k], k


def runs(events):
    """The iteration events grouped by run (a run starts at its "init" event)."""
    out = []
    for e in events:
        if e.phase == "init":
            out.append([])
        elif e.phase == "iter":
            out[-1].append(e)
    return out


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_events_come_in_order_with_their_phases(name, store):
    model, events = fit_events(ESTIMATORS[name], store)
    phases = [e.phase for e in events]
    assert phases[-1] == "done" and phases.count("done") == 1 and phases[0] == "init"
    assert all(e.estimator == name for e in events)
    for run in runs(events):
        assert run, "every run makes at least one pass"
        assert [e.iteration for e in run] == list(range(1, len(run) + 1))
        assert all(e.seconds >= 0 and np.isfinite(e.objective) and e.n_clusters >= 0 for e in run)
    assert events[-1].iteration == getattr(model, "n_iter_", getattr(model, "n_sweeps", None))


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_iteration_is_saved_before_it_is_announced_and_resumes_bit_identically(name, store, tmp_path):
    ref, events = fit_events(ESTIMATORS[name], store)
    n_iter = sum(e.phase == "iter" for e in events)
    assert n_iter >= 3

    # while the fit runs, the checkpoint read at each "iter" event holds that iteration (or, at the end of a run,
    # the start of the next one): what was announced is durable
    ck = tmp_path / "watched"
    seen = []

    def watch(event):
        if event.phase == "iter":
            state = json.loads((ck / "zarr.json").read_text())["attributes"]["dclust_checkpoint"]["state"] \
                if (ck / "zarr.json").exists() else None
            seen.append((event.iteration, state))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with dclust.on_progress(watch):
            ESTIMATORS[name](ck).fit(store)
    ends = {sum(len(r) for r in runs(events)[: j + 1]) - 1 for j in range(len(runs(events)))}
    for t, (iteration, state) in enumerate(seen):
        if t in ends and t != len(seen) - 1:
            assert state["loop"] is None, "the end of a run saves the start of the next before it is announced"
        elif t not in ends:
            assert state["loop"]["iteration"] == iteration
    assert len(seen) == n_iter

    # a fit that dies after any iteration (the first, the last and first of every run, the last but one) resumes
    # to the same model, running only the remaining iterations
    for k in sorted({1, n_iter - 1} | {t + d for t in ends for d in (1, 2) if t + d < n_iter}):
        path = tmp_path / f"ck{k}"
        with pytest.raises(Stop), warnings.catch_warnings(), dclust.on_progress(stop_after(k)):
            warnings.simplefilter("ignore", ConvergenceWarning)
            ESTIMATORS[name](path).fit(store)
        resumed, events = fit_events(lambda: ESTIMATORS[name](path), store)
        assert sum(e.phase == "iter" for e in events) == n_iter - k
        assert_same_model(resumed, ref)
    again, events = fit_events(lambda: ESTIMATORS[name](path), store)
    assert [e.phase for e in events] == ["done"]
    assert_same_model(again, ref)


def lloyd(X, **kw):
    init = np.asarray(X[:4].compute(), dtype=np.float64)
    return Lloyd(X, None, lambda: init, n_clusters=4, **kw)


def test_max_iter_tol_and_the_convergence_warning(store):
    # max_iter bounds the passes; an unconverged run warns when asked to
    with pytest.warns(ConvergenceWarning, match=r"KMeans did not converge in max_iter=2 iterations"):
        run = fit_loop(lloyd(store, tol=0.0), max_iter=2, warn=True)
    assert isinstance(run, LoopResult) and run.n_iter == 2 and not run.converged
    assert len(run.state["history"]) == 2

    # tol=0: runs until the partition repeats (converged, no warning)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        full = fit_loop(lloyd(store, tol=0.0), max_iter=300, warn=True)
    assert full.converged and full.state["strict"] and full.n_iter > 2
    # a huge tol stops at the first pass
    loose = fit_loop(lloyd(store, tol=1e9), max_iter=300)
    assert loose.converged and loose.n_iter == 1
    # the estimators pass max_iter and tol through
    km = dclust.KMeans(n_clusters=4, init=np.asarray(store[:4].compute()), max_iter=2, tol=0.0).fit(store)
    assert km.n_iter_ == 2
    with pytest.warns(ConvergenceWarning, match="GMPR did not converge in max_iter=1 iterations"):
        dclust.GMPR(n_classes=2, max_iter=1, tol=0.0, random_state=0).fit(store)


@pytest.mark.parametrize("name", ["DPMeans", "RDPMeans", "BPMeans"])
def test_unconverged_fits_warn_from_the_loop_and_again_from_their_finished_checkpoint(name, store, tmp_path):
    unit, make = UNCONVERGED[name]
    ck = tmp_path / "ck"
    with pytest.warns(ConvergenceWarning, match=rf"^{name} did not converge in max_iter=2 {unit}"):
        model = make(ck).fit(store)
    assert model.n_iter_ == 2 and model.converged_ is False
    events = []
    with pytest.warns(ConvergenceWarning, match=rf"^{name} did not converge in max_iter=2 {unit}"), \
            dclust.on_progress(events.append):
        again = make(ck).fit(store)
    assert [e.phase for e in events] == ["done"]
    assert_same_model(again, model)
    # and a run that converges does not warn
    params = {"max_iter": 100} if name != "RDPMeans" else {"max_iter": 100, "max_xi": 0.001}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        converged = make().set_params(**params).fit(store)
    assert converged.converged_ and converged.n_iter_ > 2


@pytest.mark.parametrize("name", ["DPMeans", "RDPMeans", "BPMeans"])
def test_their_checkpoints_of_format_1_are_refused_not_misread(name, store, tmp_path):
    """Format 1 held these estimators' own loop states: refused with a FormatVersionError, before any pass."""
    from dclust.errors import FormatVersionError

    ck = tmp_path / "ck"
    with pytest.raises(Stop), dclust.on_progress(stop_after(1)):
        ESTIMATORS[name](ck).fit(store)
    doc = json.loads((ck / "zarr.json").read_text())
    doc["attributes"]["dclust_checkpoint"]["format"] = 1
    (ck / "zarr.json").write_text(json.dumps(doc))
    events = []
    with pytest.raises(FormatVersionError, match=rf"a {name} checkpoint of format 2 or newer.*format 1, written by "
                                                 "an older dclust.*Remove the checkpoint"), \
            dclust.on_progress(events.append):
        ESTIMATORS[name](ck).fit(store)
    assert events == []


def test_a_resumed_loop_state_that_does_not_fit_is_refused(store, tmp_path):
    from dclust.errors import StorageError

    ck = tmp_path / "ck"
    with pytest.raises(Stop), dclust.on_progress(stop_after(2)):
        ESTIMATORS["KMeans"](ck).fit(store)
    doc = json.loads((ck / "zarr.json").read_text())
    doc["attributes"]["dclust_checkpoint"]["state"]["loop"]["iteration"] = 6  # max_iter: no iteration left to resume
    (ck / "zarr.json").write_text(json.dumps(doc))
    with pytest.raises(StorageError, match="iteration 6 with max_iter=6"):
        ESTIMATORS["KMeans"](ck).fit(store)
