"""dclust.metrics internal indices: equal to scikit-learn's (rtol 1e-10), numpy == dask == Zarr, tree fan-in,
errors before any pass."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn import metrics as skm

import dclust
import dclust.metrics as dm
from dclust.errors import InvalidDataError, InvalidParameterError


@pytest.fixture(autouse=True, scope="module")
def _sync_scheduler():
    with dask.config.set(scheduler="synchronous"):
        yield


@pytest.fixture(scope="module")
def data():
    """1,500 x 3 points around 4 centres, labels with gaps and a negative value, far from the origin."""
    rng = np.random.default_rng(3)
    centers = rng.uniform(-20, 20, size=(4, 3)) + 1000.0
    y = rng.integers(0, 4, size=1500)
    X = centers[y] + rng.normal(scale=2.0, size=(1500, 3))
    labels = np.array([-1, 3, 7, 40])[y]
    return X, labels


@pytest.mark.parametrize("score, reference", [
    (dm.calinski_harabasz_score, skm.calinski_harabasz_score),
    (dm.davies_bouldin_score, skm.davies_bouldin_score),
])
@pytest.mark.parametrize("chunks, split_every", [(1500, None), (100, 2), (137, 4)])
def test_equal_to_sklearn_and_chunking_invariant(data, score, reference, chunks, split_every):
    X, y = data
    expected = reference(X, y)
    got_numpy = score(X, y)
    got_dask = score(da.from_array(X, chunks=(chunks, 3)), da.from_array(y, chunks=chunks // 2 + 1),
                     split_every=split_every)
    np.testing.assert_allclose(got_numpy, expected, rtol=1e-10)
    np.testing.assert_allclose(got_dask, expected, rtol=1e-10)


def test_zarr_store_and_tree(data, tmp_path):
    X, y = data
    path = str(tmp_path / "x.zarr")
    dclust.write_array(X, path, chunks=64)
    Xz = dclust.open_array(path)
    assert Xz.numblocks[0] == 24
    np.testing.assert_allclose(dm.calinski_harabasz_score(Xz, y, split_every=3),
                               skm.calinski_harabasz_score(X, y), rtol=1e-10)
    np.testing.assert_allclose(dm.davies_bouldin_score(Xz, da.from_array(y, chunks=64), split_every=3),
                               skm.davies_bouldin_score(X, y), rtol=1e-10)


def test_degenerate_conventions_match_sklearn():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0], [3.0, 4.0]])
    y = np.array([0, 0, 1, 1])
    assert dm.calinski_harabasz_score(X, y) == skm.calinski_harabasz_score(X, y) == 1.0
    assert dm.davies_bouldin_score(X, y) == skm.davies_bouldin_score(X, y) == 0.0


@pytest.mark.parametrize("sample_size", [None, 400])
def test_silhouette_equals_sklearn_on_the_sample(data, sample_size):
    X, y = data
    got = dm.silhouette_score(da.from_array(X, chunks=(250, 3)), y, sample_size=sample_size, random_state=5)
    if sample_size is None:
        idx = np.arange(X.shape[0])
    else:
        idx = np.sort(np.random.default_rng(5).choice(X.shape[0], size=sample_size, replace=False))
    np.testing.assert_allclose(got, skm.silhouette_score(X[idx], y[idx]), rtol=1e-9)
    if sample_size:  # same draw whatever the input type
        assert dm.silhouette_score(X, y, sample_size=sample_size, random_state=5) == got


def test_silhouette_with_singletons():
    X = np.array([[0.0], [1.0], [10.0], [11.0], [30.0]])
    y = np.array([0, 0, 1, 1, 2])
    np.testing.assert_allclose(dm.silhouette_score(X, y, sample_size=None), skm.silhouette_score(X, y), rtol=1e-12)


@pytest.mark.parametrize("score", [dm.calinski_harabasz_score, dm.davies_bouldin_score, dm.silhouette_score])
def test_errors(score):
    X = np.arange(12.0).reshape(6, 2)
    with pytest.raises(InvalidDataError, match="between 2 and"):
        score(X, np.zeros(6, int))
    with pytest.raises(InvalidDataError, match="one label per row"):
        score(X, np.zeros(5, int))
    with pytest.raises(InvalidDataError, match="integer labels"):
        score(X, np.zeros(6))
    bad = X.copy()
    bad[4, 1] = np.nan
    with pytest.raises(InvalidDataError, match="NaN"):
        score(da.from_array(bad, chunks=(2, 2)), np.array([0, 1, 0, 1, 0, 1]))


def test_bad_parameters():
    X = np.arange(12.0).reshape(6, 2)
    with pytest.raises(InvalidParameterError, match="split_every"):
        dm.calinski_harabasz_score(X, [0, 1] * 3, split_every=1)
    with pytest.raises(InvalidParameterError, match="sample_size"):
        dm.silhouette_score(X, [0, 1] * 3, sample_size=2)
