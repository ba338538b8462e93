"""Bad input fuzzing (hypothesis): the only allowed outcomes are a correct result or a ``dclust.errors`` exception.

Random shapes (0 rows, 1 row, D=1), dtypes (ints, float16/32/64, bool, object, complex, strings), NaN/inf,
chunkings (split along the features too), and parameters (out of range, wrong types) are thrown at the estimators'
fit/predict/partial_fit, at ``open_array`` and ``write_array``, and corrupted model stores at ``load``. No hang
(``pytest-timeout`` per test), no partial output (the output directory is unchanged after a failure).
All on dask's threaded scheduler, tiny data.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dclust
from dclust.errors import DclustError

pytestmark = pytest.mark.timeout(120)

FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

DTYPES = ["int8", "int32", "int64", "uint8", "float16", "float32", "float64", "bool", "object", "complex128", "<U3"]


@pytest.fixture(autouse=True, scope="module")
def threaded():
    with dask.config.set(scheduler="threads"):
        yield


def _estimators():
    return {
        "KMeans": lambda: dclust.KMeans(n_clusters=2, random_state=0, max_iter=5),
        "DPMeans": lambda: dclust.DPMeans(lam=4.0, random_state=0, max_iter=5),
        "BPMeans": lambda: dclust.BPMeans(lam=4.0, random_state=0, n_init=1, max_iter=5),
        "RDPMeans": lambda: dclust.RDPMeans(lam=4.0, random_state=0, max_iter=3),
        "GMPR": lambda: dclust.GMPR(n_classes=2, random_state=0, max_iter=5),
        "DynamicMeans": lambda: dclust.DynamicMeans(lam=4.0, T_Q=2.0, k_tau=1.1, random_state=0),
    }


@st.composite
def data(draw):
    """(array-like, dtype name) with random shape, dtype, specials and chunking."""
    n = draw(st.sampled_from([0, 1, 2, 3, 7, 40]))
    d = draw(st.sampled_from([1, 2, 3]))
    dtype = draw(st.sampled_from(DTYPES))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    base = rng.normal(scale=3.0, size=(n, d))
    if dtype == "object":
        X = base.astype(object)
    elif dtype == "<U3":
        X = base.astype("<U3")
    else:
        X = base.astype(dtype) if np.dtype(dtype).kind not in "iu" else (base * 3).astype(dtype)
    if np.dtype(X.dtype).kind in "fc" and n and draw(st.booleans()):
        special = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        X[draw(st.integers(0, n - 1)), draw(st.integers(0, d - 1))] = special
    form = draw(st.sampled_from(["numpy", "dask", "dask-split-features", "list"]))
    if form == "list":
        return X.tolist(), dtype
    if form != "numpy" and X.dtype.kind not in "OU":
        rows = draw(st.integers(1, max(1, n)))
        cols = 1 if form == "dask-split-features" else d
        return da.from_array(X, chunks=(rows, cols)), dtype
    return X, dtype


def _check_fitted(model, n_features):
    """The learned centres (features for BPMeans, means for GMPR) are finite, with n_features columns."""
    name = next(a for a in ("cluster_centers_", "features_", "means_") if hasattr(model, a))
    centers = np.asarray(getattr(model, name))
    assert centers.shape[-1] == n_features
    assert name == "features_" or centers.size >= n_features  # BP-means may keep zero latent features
    assert np.isfinite(centers).all()


@FUZZ
@given(name=st.sampled_from(sorted(_estimators())), X=data())
def test_fit_and_predict_on_random_data(name, X):
    X, dtype = X
    model = _estimators()[name]()
    try:
        if name == "DynamicMeans":
            model.partial_fit(X)
        else:
            model.fit(X)
    except DclustError:
        return
    n, d = np.shape(X)
    kind = np.asarray(X).dtype.kind if isinstance(X, list) else np.dtype(dtype).kind  # lists of floats are floats
    assert kind in "biuf"  # only numeric data may fit
    if name == "DynamicMeans" and n == 0:  # an empty batch is a time step without data: only the ages advance
        assert model.n_batches_ == 1 and np.shape(model.cluster_centers_) == (0, d)
        return
    assert n >= 1
    _check_fitted(model, d)
    try:
        labels = np.asarray(model.predict(X))
    except DclustError:
        return
    assert labels.shape[0] == n  # labels (n,), or BPMeans' allocation matrix (n, n_latent_features)
    if labels.ndim == 1 and n:
        assert labels.min() >= 0


BAD_VALUES = [-1, 0, 1, 2, -0.5, 0.0, 1e300, float("nan"), float("inf"), True, None, "nonsense", [1, 2], {"a": 1},
              np.float32(2.5), np.int64(3), object()]


@FUZZ
@given(name=st.sampled_from(sorted(_estimators())), param_value=st.data())
def test_random_parameter_values(name, param_value):
    model = _estimators()[name]()
    params = sorted(model.get_params())
    param = param_value.draw(st.sampled_from(params))
    value = param_value.draw(st.sampled_from(BAD_VALUES))
    X = np.random.default_rng(1).normal(size=(30, 2))
    # a string is a valid ``checkpoint`` path: run where a checkpoint written by mistake cannot land in the project
    with tempfile.TemporaryDirectory() as d, contextlib.chdir(d):
        try:
            model.set_params(**{param: value})
            if name == "DynamicMeans":
                model.partial_fit(X)
            else:
                model.fit(X)
        except DclustError:
            return
    _check_fitted(model, 2)


@FUZZ
@given(X=data(), chunks=st.sampled_from([None, 1, 3, 0, -2, (2, 1), (0,), "x", 2.5, True]),
       ndim_extra=st.sampled_from([0, 0, 1]))
def test_open_array_on_random_inputs(X, chunks, ndim_extra):
    X, dtype = X
    if ndim_extra:
        X = np.asarray(X)[..., None]
    try:
        out = dclust.open_array(X, chunks=chunks)
    except DclustError:
        return
    assert isinstance(out, da.Array) and out.ndim in (1, 2) and len(out.chunks[-1]) == 1
    assert out.shape == np.shape(X)


@FUZZ
@given(X=data(), chunks=st.sampled_from([None, 1, 4, 0, (3, 1), "x"]),
       codec=st.sampled_from(["auto", "none", "lz4", "zstd", "gzip", None]))
def test_write_array_result_or_error_and_no_partial_output(X, chunks, codec):
    X, _ = X
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.zarr")
        try:
            dclust.write_array(X, path, chunks=chunks, codec=codec)
        except DclustError:
            assert os.listdir(d) == []
            return
        assert os.listdir(d) == ["x.zarr"]
        stored = dclust.open_array(path) if np.ndim(X) in (1, 2) else None
        if stored is not None:
            np.testing.assert_array_equal(np.asarray(stored), np.asarray(X))


# ----------------------------------------------------------------------------------------- corrupted models


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    X = np.random.default_rng(2).normal(size=(60, 3))
    root = tmp_path_factory.mktemp("models")
    paths = {}
    for name in ("KMeans", "DPMeans", "DynamicMeans"):
        model = _estimators()[name]()
        model.partial_fit(X) if name == "DynamicMeans" else model.fit(X)
        paths[name] = Path(dclust.save(model, root / f"{name}.zarr"))
    return paths


def _corrupt(root: Path, how: str, data_) -> None:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    target = data_.draw(st.sampled_from(files))
    if how == "random-bytes":
        target.write_bytes(data_.draw(st.binary(max_size=64)))
    elif how == "truncate":
        raw = target.read_bytes()
        target.write_bytes(raw[: data_.draw(st.integers(0, max(0, len(raw) - 1)))])
    elif how == "delete-file":
        target.unlink()
    elif how == "delete-array":
        arrays = sorted({p.parent for p in files if p.name == "zarr.json" and p.parent != root})
        if arrays:
            shutil.rmtree(data_.draw(st.sampled_from(arrays)))
    elif how == "json-value":
        doc = json.loads((root / "zarr.json").read_text())
        section = data_.draw(st.sampled_from(["params", "attributes"]))
        entries = doc["attributes"][section]
        if entries:
            key = data_.draw(st.sampled_from(sorted(entries)))
            entries[key] = data_.draw(st.sampled_from(
                [None, -1, 1e308, "x", [], {}, {"__dclust__": "array"}, {"__dclust__": "tuple"},
                 {"__dclust__": "evil"}, {"__dclust__": "float", "value": "many"}, [[1, 2], [3]]]))
        (root / "zarr.json").write_text(json.dumps(doc))
    elif how == "json-top":
        doc = json.loads((root / "zarr.json").read_text())
        key = data_.draw(st.sampled_from(["dclust_format", "estimator", "params", "attributes"]))
        doc["attributes"][key] = data_.draw(st.sampled_from([None, 0, 2, "KMeans", "Nope", [], {}, True]))
        (root / "zarr.json").write_text(json.dumps(doc))


@FUZZ
@given(name=st.sampled_from(["KMeans", "DPMeans", "DynamicMeans"]),
       how=st.sampled_from(["random-bytes", "truncate", "delete-file", "delete-array", "json-value", "json-top"]),
       data_=st.data())
def test_load_of_corrupted_model_stores(saved_models, name, how, data_):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "m.zarr"
        shutil.copytree(saved_models[name], root)
        _corrupt(root, how, data_)
        try:
            model = dclust.load(root)
        except DclustError:
            return
        assert type(model).__name__ == name
        try:
            labels = np.asarray(model.predict(np.zeros((4, 3))))
        except DclustError:
            return
        assert labels.shape == (4,)
