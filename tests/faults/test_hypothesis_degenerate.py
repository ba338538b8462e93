"""Hypothesis over what ``tests/properties/test_fuzz.py`` leaves out: ``open_array`` on Zarr stores of odd shapes,
dtypes and chunkings written by zarr itself (bad ones raise ``dclust.errors`` exceptions, good ones open with the
stored values), and every estimator of the common suite (``tests/cluster/test_common.py::CONFIGS``) on small
degenerate data -- constant rows, duplicated rows, one row per chunk. The only allowed outcomes are a finite model
or a ``dclust.errors`` exception (warnings allowed). Dask's threaded scheduler, tiny data, few examples.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dclust
from dclust._registry import ESTIMATORS
from dclust.errors import DclustError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cluster"))
from test_common import CONFIGS, MODEL_ATTRIBUTES, NAMES  # noqa: E402 - the common suite's registry

FEW = settings(max_examples=12, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True, scope="module")
def threaded():
    with dask.config.set(scheduler="threads"):
        yield


# ------------------------------------------------------------------------------------------------- open_array on Zarr

ZARR_DTYPES = ["float32", "float64", "float16", "int16", "int64", "uint8", "bool", "complex64"]


@st.composite
def zarr_store(draw):
    """A Zarr array written by zarr (not dclust): random shape (0-3 dimensions, empty axes), dtype, chunks."""
    ndim = draw(st.sampled_from([1, 2, 2, 2, 3]))
    shape = tuple(draw(st.sampled_from([0, 1, 2, 5, 9])) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, max(1, s))) for s in shape)
    dtype = draw(st.sampled_from(ZARR_DTYPES))
    values = np.random.default_rng(draw(st.integers(0, 99))).normal(size=shape) * 4
    if draw(st.booleans()) and values.size and dtype.startswith(("float", "complex")):
        values.flat[0] = draw(st.sampled_from([np.nan, np.inf]))
    return values.astype(dtype), chunks


@FEW
@given(store=zarr_store())
def test_open_array_on_zarr_stores_of_odd_shapes_and_dtypes(store):
    """open_array checks the shape from metadata; the dtype and the values are checked where the data is used (the
    estimator's fit): at each step a bad store raises a dclust error, a good one opens and fits."""
    values, chunks = store
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.zarr")
        zarr.create_array(store=path, shape=values.shape, dtype=values.dtype, chunks=chunks)[...] = values
        try:
            X = dclust.open_array(path)
        except DclustError:
            assert values.ndim not in (1, 2), "a 1-D or 2-D store was refused"
            return
        np.testing.assert_array_equal(np.asarray(X.compute()), values)
        good = (values.ndim == 2 and values.size > 0 and values.dtype.kind in "biuf"
                and np.isfinite(values.astype(np.float64)).all())
        try:
            dclust.KMeans(n_clusters=1, max_iter=2, random_state=0).fit(X)
        except DclustError:
            assert not good, "a good store did not fit"
            return
        assert good, "a bad store was fitted"


# ------------------------------------------------------------------------------------- estimators on degenerate data


@st.composite
def degenerate(draw):
    """Small data with constant rows, duplicated rows or one row per chunk, as numpy or dask."""
    kind = draw(st.sampled_from(["constant", "duplicates", "one-row-chunks", "constant-feature"]))
    n = draw(st.sampled_from([6, 12, 30]))
    d = draw(st.sampled_from([1, 2, 3]))
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    if kind == "constant":
        X = np.full((n, d), draw(st.sampled_from([0.0, 1.0, -3.5, 1e6])))
    elif kind == "duplicates":
        m = draw(st.integers(1, 3))  # distinct rows, repeated in turn
        X = rng.normal(size=(m, d))[np.arange(n) % m]
    elif kind == "constant-feature":
        X = np.column_stack([rng.normal(size=(n, d)), np.full(n, 2.0)])
    else:
        X = rng.normal(size=(n, d))
    chunks = 1 if kind == "one-row-chunks" else draw(st.sampled_from([n, 5, 2]))
    X = X.astype(draw(st.sampled_from(["float32", "float64"])))
    return (da.from_array(X, chunks=(chunks, -1)) if draw(st.booleans()) or kind == "one-row-chunks" else X), kind


@pytest.mark.parametrize("name", NAMES)
@settings(FEW, max_examples=4)
@given(data=degenerate())
def test_every_estimator_on_degenerate_data_fits_finitely_or_raises_a_dclust_error(name, data):
    X, kind = data
    est = ESTIMATORS[name](**CONFIGS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            est.fit(X)
        except DclustError:
            return
    model = np.asarray(getattr(est, next(a for a in MODEL_ATTRIBUTES if hasattr(est, a))))
    assert np.isfinite(model).all(), (name, kind)
    labels = np.asarray(est.predict(X)) if hasattr(est, "predict") else None
    if labels is not None:
        assert labels.shape[0] == X.shape[0]
