"""The common check suite: every registered batch estimator obeys the same conventions.

Parameter validation of every constructor parameter, clone, get/set_params, seed idempotence, save/load round
trip, and numpy == dask == Zarr results. A new estimator must be added to ``CONFIGS`` (a test fails otherwise).
"""

from __future__ import annotations

import inspect

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust._registry import ESTIMATORS
from sklearn.base import clone
from dclust.errors import DclustError, InvalidParameterError, NotFittedError

#: Small, fast constructor arguments per batch estimator (fit(X) signature).
CONFIGS = {
    "KMeans": dict(n_clusters=5, random_state=0),
    "DPMeans": dict(lam=30.0, random_state=0, prefix_size=50, max_proposals=16),
    "RDPMeans": dict(lam=30.0, random_state=0, prefix_size=50, max_proposals=16, max_iter=4),
    "DPMMGibbs": dict(n_iter=3, random_state=0),
    "SpectralClustering": dict(n_clusters=5, affinity="nearest_neighbors", n_init=2, random_state=0),
    "IBPGibbs": dict(sigma_x=1.0, sigma_a=10.0, n_iter=3, random_state=0),
    "BPMeans": dict(lam=30.0, random_state=0, prefix_size=50, max_proposals=16, max_iter=5),
    "KFeatures": dict(n_components=3, random_state=0, max_iter=5),
    "StepwiseKFeatures": dict(lam=50000.0, random_state=0, max_iter=3, max_features=6),
    "GMPR": dict(n_classes=5, random_state=0, max_iter=20, tol=1e-4),
    "TVClust": dict(random_state=0, n_sweeps=3),
    "TVClustVariational": dict(random_state=0, max_iter=10),
    "MPCKMeans": dict(n_clusters=5, random_state=0, max_iter=10),
    "LCVQE": dict(n_clusters=5, random_state=0, max_iter=20),
    "MahalanobisKMeans": dict(n_clusters=5, lam=100.0, random_state=0, max_iter=30),
    "CollapsedDPMeans": dict(lam=30.0, random_state=0),
    "CappedDPMeans": dict(lam=30.0, max_clusters=4, random_state=0),
    "CollapsedBPMeans": dict(lam=150.0, random_state=0, max_iter=2),
    "COPKMeans": dict(n_clusters=5, random_state=0, n_init=2),
}

#: The fitted state that defines a model, by kind: centres (clusterings), features (feature allocations), mixture
#: means (GMPR), or the training labels (SpectralClustering, which has neither). Each estimator is checked on the
#: first one it has.
MODEL_ATTRIBUTES = ("cluster_centers_", "features_", "means_", "labels_")


def _model(est):
    name = next((a for a in MODEL_ATTRIBUTES if hasattr(est, a)), None)
    assert name is not None, f"{type(est).__name__} has none of {MODEL_ATTRIBUTES}"
    return getattr(est, name)


def _is_fitted(est) -> bool:
    return any(hasattr(est, a) for a in MODEL_ATTRIBUTES)


def _batch_estimators():
    import dclust.cluster  # noqa: F401  (registers every batch estimator)

    return sorted(name for name, cls in ESTIMATORS.items() if cls.__module__.startswith("dclust.cluster"))


NAMES = _batch_estimators()


def _make(name, **extra):
    return ESTIMATORS[name](**{**CONFIGS[name], **extra})


def test_every_batch_estimator_has_a_check_config():
    assert set(NAMES) == set(CONFIGS), "add the new estimator to CONFIGS so the common checks cover it"


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_keyword_only_and_constrained(name):
    cls = ESTIMATORS[name]
    params = inspect.signature(cls.__init__).parameters
    names = [p for p in params if p != "self"]
    assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in names)
    assert set(names) == set(cls._parameter_constraints), "no accepted-but-unvalidated parameters"


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_rejects_a_wrong_value_before_fitting(name, blobs):
    X, _ = blobs
    for param in ESTIMATORS[name]._parameter_constraints:
        est = _make(name).set_params(**{param: object()})
        with pytest.raises(InvalidParameterError) as info:
            est.fit(X)
        text = str(info.value)
        assert param in text and "expected" in text.lower() and "received" in text.lower(), text
        assert not _is_fitted(est)


@pytest.mark.parametrize("name", NAMES)
def test_get_set_params_and_clone(name, blobs):
    est = _make(name)
    params = est.get_params()
    assert set(params) == set(ESTIMATORS[name]._parameter_constraints)
    assert est.set_params(**params) is est
    with pytest.raises(InvalidParameterError, match="no_such_param"):
        est.set_params(no_such_param=1)
    est.fit(blobs[0])
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    assert not _is_fitted(twin)
    assert repr(twin).startswith(name + "(")


@pytest.mark.parametrize("name", NAMES)
def test_unfitted_estimator_refuses_to_predict(name, blobs):
    with pytest.raises(NotFittedError, match="fit"):
        _make(name).predict(blobs[0])


@pytest.mark.parametrize("name", NAMES)
def test_predict_with_the_wrong_number_of_features(name, blobs):
    X, _ = blobs
    est = _make(name).fit(X)
    with pytest.raises(DclustError, match="features") as info:
        est.predict(X[:, :2])
    assert "3" in str(info.value) and "2" in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_result(name, blobs):
    X = da.from_array(blobs[0], chunks=(600, -1))
    a, b = _make(name).fit(X), _make(name).fit(X)
    np.testing.assert_array_equal(_model(a), _model(b))
    np.testing.assert_array_equal(a.predict(X).compute(), b.predict(X).compute())
    assert getattr(a, "objective_history_", None) == getattr(b, "objective_history_", None)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_dask_and_zarr_give_the_same_model(name, blobs, tmp_path):
    X, _ = blobs
    path = tmp_path / "x.zarr"
    dclust.write_array(da.from_array(X, chunks=(750, -1)), path)
    fits = [
        _make(name).fit(da.from_array(X, chunks=(750, -1))),
        _make(name).fit(dclust.open_array(path)),
    ]
    for other in fits[1:]:
        np.testing.assert_allclose(_model(other), _model(fits[0]), rtol=1e-10)
        np.testing.assert_array_equal(other.predict(X), fits[0].predict(X))
    # numpy input is chunked by dclust itself; its model equals the dask model on the same chunking
    from dclust._validation import check_array

    chunked, _ = check_array(X)
    same = _make(name).fit(da.from_array(X, chunks=chunked.chunks))
    np.testing.assert_allclose(_model(_make(name).fit(X)), _model(same), rtol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip(name, blobs, tmp_path):
    X, _ = blobs
    est = _make(name).fit(X)
    dclust.save(est, tmp_path / "m.zarr")
    back = dclust.load(tmp_path / "m.zarr")
    assert type(back) is type(est)
    assert back.get_params() == est.get_params()
    np.testing.assert_array_equal(_model(back), _model(est))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    assert getattr(back, "objective_history_", None) == getattr(est, "objective_history_", None)
    with pytest.raises(DclustError, match="exists"):
        dclust.save(est, tmp_path / "m.zarr")


@pytest.mark.parametrize("name", NAMES)
def test_unknown_chunk_sizes_are_resolved(name, blobs):
    """A boolean row mask leaves dask with unknown (NaN) chunk sizes: the fit resolves them and equals the fit
    on the same rows with known sizes."""
    X, _ = blobs
    keep = np.arange(len(X)) % 7 != 3
    Xd = da.from_array(X, chunks=(750, -1))
    masked = Xd[da.from_array(keep, chunks=750)]
    assert np.isnan(masked.chunks[0][0])
    known = da.from_array(X[keep], chunks=(masked.compute_chunk_sizes().chunks[0], -1))
    a, b = _make(name).fit(masked), _make(name).fit(known)
    np.testing.assert_allclose(_model(a), _model(b), rtol=1e-10)


def test_sparse_input_is_refused_with_the_way_out():
    sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(dclust.errors.InvalidDataError, match="toarray"):
        dclust.KMeans(n_clusters=2).fit(sparse.random(50, 3, density=0.5, format="csr", random_state=0))
