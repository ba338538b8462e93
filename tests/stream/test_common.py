"""The common check suite of the stream estimators (DynamicMeans, SpectralDynamicMeans, KernelDynamicMeans,
AnytimeDPMeans): the conventions of the batch suite (tests/cluster/test_common.py) applied to a sequence of batches.

Each estimator sees the same three batches through ``partial_fit``; the checks are parameter validation before any
work, get/set_params and clone, refusal to predict before fitting or with the wrong number of features, seed
idempotence, numpy == dask == Zarr batches, unknown chunk sizes and the save/load round trip. A new stream
estimator must be added to ``CONFIGS`` (a test fails otherwise).
"""

from __future__ import annotations

import inspect

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone

import dclust
from dclust._registry import ESTIMATORS
from dclust.errors import DclustError, InvalidParameterError, NotFittedError

CONFIGS = {
    "DynamicMeans": dict(lam=4.0, T_Q=5.0, k_tau=1.1, random_state=0),
    "SpectralDynamicMeans": dict(lam=4.0, T_Q=5.0, k_tau=1.1, kernel="linear", random_state=0),
    "KernelDynamicMeans": dict(lam=4.0, T_Q=5.0, k_tau=1.1, kernel="linear", random_state=0),
    "AnytimeDPMeans": dict(lam=4.0, random_state=0),
}

NAMES = sorted(n for n, c in ESTIMATORS.items() if c.__module__.startswith("dclust.stream"))


def _make(name, **extra):
    return ESTIMATORS[name](**{**CONFIGS[name], **extra})


@pytest.fixture(scope="module")
def batches():
    """Three time steps of three moving, unequal blobs in 2-D (120, 90 and 150 rows)."""
    rng = np.random.default_rng(7)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    out = []
    for t, n in enumerate((120, 90, 150)):
        z = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
        out.append(centers[z] + 0.3 * t + rng.normal(scale=0.5, size=(n, 2)))
    return out


def _fit(est, batches, wrap=lambda b: b):
    for b in batches:
        est.partial_fit(wrap(b))
    return est


def _model(est):
    """The fitted state: the centers, or for the kernel estimators (no explicit centers) the support of each center
    in feature space and its coefficients; with the persistent ids and weights of the clusters."""
    parts = [est.cluster_centers_] if hasattr(est, "cluster_centers_") else [est.support_, est.support_coef_]
    return np.concatenate([np.ravel(p) for p in parts + [est.cluster_ids_, est.weights_]])


def test_every_stream_estimator_has_a_check_config():
    assert set(NAMES) == set(CONFIGS), "add the new stream estimator to CONFIGS so the common checks cover it"


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_is_keyword_only_and_constrained(name):
    cls = ESTIMATORS[name]
    params = inspect.signature(cls.__init__).parameters
    names = [p for p in params if p != "self"]
    assert all(params[p].kind is inspect.Parameter.KEYWORD_ONLY for p in names)
    assert set(names) == set(cls._parameter_constraints), "no accepted-but-unvalidated parameters"


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_rejects_a_wrong_value_before_fitting(name, batches):
    for param in ESTIMATORS[name]._parameter_constraints:
        est = _make(name).set_params(**{param: object()})
        with pytest.raises(InvalidParameterError) as info:
            est.partial_fit(batches[0])
        text = str(info.value)
        assert param in text and "expected" in text.lower() and "received" in text.lower(), text
        assert not hasattr(est, "cluster_ids_")


@pytest.mark.parametrize("name", NAMES)
def test_get_set_params_and_clone(name, batches):
    est = _make(name)
    params = est.get_params()
    assert set(params) == set(ESTIMATORS[name]._parameter_constraints)
    assert est.set_params(**params) is est
    with pytest.raises(InvalidParameterError, match="no_such_param"):
        est.set_params(no_such_param=1)
    _fit(est, batches[:1])
    twin = clone(est)
    assert twin.get_params() == est.get_params()
    assert not hasattr(twin, "cluster_ids_")
    assert repr(twin).startswith(name + "(")


@pytest.mark.parametrize("name", NAMES)
def test_unfitted_estimator_refuses_to_predict(name, batches):
    with pytest.raises(NotFittedError, match="fit"):
        _make(name).predict(batches[0])


@pytest.mark.parametrize("name", NAMES)
def test_wrong_number_of_features_is_refused(name, batches):
    est = _fit(_make(name), batches[:1])
    with pytest.raises(DclustError, match="features"):
        est.predict(np.zeros((5, 3)))
    with pytest.raises(DclustError, match="features"):
        est.partial_fit(np.zeros((5, 3)))


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_result(name, batches):
    a, b = _fit(_make(name), batches), _fit(_make(name), batches)
    np.testing.assert_array_equal(_model(a), _model(b))
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.predict(batches[0]), b.predict(batches[0]))


@pytest.mark.parametrize("name", NAMES)
def test_numpy_dask_and_zarr_batches_give_the_same_model(name, batches, tmp_path):
    ref = _fit(_make(name), batches)
    as_dask = _fit(_make(name), batches, lambda b: da.from_array(b, chunks=(40, -1)))
    paths = []
    for i, b in enumerate(batches):
        paths.append(dclust.write_array(da.from_array(b, chunks=(50, -1)), tmp_path / f"b{i}.zarr"))
    as_zarr = _fit(_make(name), [dclust.open_array(p) for p in paths])
    for other in (as_dask, as_zarr):
        np.testing.assert_allclose(_model(other), _model(ref), rtol=1e-10)
        np.testing.assert_array_equal(np.asarray(other.labels_), np.asarray(ref.labels_))


@pytest.mark.parametrize("name", NAMES)
def test_unknown_chunk_sizes_are_resolved(name, batches):
    """A boolean row mask leaves dask with unknown (NaN) chunk sizes: the batch is taken as its rows."""
    keep = [np.arange(len(b)) % 5 != 2 for b in batches]
    masked = [da.from_array(b, chunks=(40, -1))[da.from_array(k, chunks=40)] for b, k in zip(batches, keep)]
    assert np.isnan(masked[0].chunks[0][0])
    a = _fit(_make(name), masked)
    b = _fit(_make(name), [b[k] for b, k in zip(batches, keep)])
    np.testing.assert_allclose(_model(a), _model(b), rtol=1e-10)


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip_and_continue(name, batches, tmp_path):
    est = _fit(_make(name), batches[:2])
    dclust.save(est, tmp_path / "m.zarr")
    back = dclust.load(tmp_path / "m.zarr")
    assert type(back) is type(est) and back.get_params() == est.get_params()
    np.testing.assert_array_equal(_model(back), _model(est))
    np.testing.assert_array_equal(back.predict(batches[0]), est.predict(batches[0]))
    # the loaded model goes on with the stream exactly as the original does
    est.partial_fit(batches[2])
    back.partial_fit(batches[2])
    np.testing.assert_array_equal(_model(back), _model(est))
    with pytest.raises(DclustError, match="exists"):
        dclust.save(est, tmp_path / "m.zarr")
