"""Bad input gets a clear dclust.errors exception (expected / received / fix) before any result exists."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

import dclust
from dclust.errors import DclustError, InvalidDataError, InvalidParameterError, StorageError

ESTIMATORS = [
    pytest.param(lambda **kw: dclust.KMeans(n_clusters=3, random_state=0, **kw), id="KMeans"),
    pytest.param(lambda **kw: dclust.DPMeans(lam=10.0, random_state=0, **kw), id="DPMeans"),
]


def _says_expected_received(err: BaseException) -> None:
    text = str(err).lower()
    assert "expected" in text and "received" in text, text


@pytest.fixture
def X():
    return np.random.default_rng(0).normal(size=(400, 3))


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_the_chunk(make, X, bad):
    X = X.copy()
    X[250, 1] = bad
    est = make()
    with pytest.raises(InvalidDataError) as info:
        est.fit(da.from_array(X, chunks=(100, -1)))
    text = str(info.value)
    _says_expected_received(info.value)
    assert "chunk 2" in text and "rows 200..299" in text, text
    assert not hasattr(est, "cluster_centers_")


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize(
    "data",
    [
        np.array([["a", "b"], ["c", "d"]]),
        np.ones((10, 2), dtype=complex),
        np.ones((10, 2), dtype=object),
        np.ones((10, 2), dtype="datetime64[s]"),
    ],
    ids=["str", "complex", "object", "datetime"],
)
def test_non_numeric_dtypes(make, data):
    with pytest.raises(InvalidDataError, match="dtype") as info:
        make().fit(data)
    _says_expected_received(info.value)


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize("shape", [(10,), (4, 3, 2), ()])
def test_wrong_number_of_dimensions(make, shape):
    with pytest.raises(InvalidDataError, match="2 dimensions") as info:
        make().fit(np.ones(shape))
    _says_expected_received(info.value)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_zero_rows_and_zero_features(make):
    with pytest.raises(InvalidDataError, match="sample") as info:
        make().fit(np.ones((0, 3)))
    _says_expected_received(info.value)
    with pytest.raises(InvalidDataError, match="feature"):
        make().fit(np.ones((5, 0)))


def test_more_clusters_than_samples(X):
    with pytest.raises(DclustError, match="n_clusters") as info:
        dclust.KMeans(n_clusters=401).fit(X)
    _says_expected_received(info.value)
    with pytest.raises(DclustError, match="n_clusters"):
        dclust.DPMeans(n_clusters=401).fit(X)


@pytest.mark.parametrize("lam", [0.0, -1.0, np.nan, np.inf, "4", True])
def test_lam_must_be_positive_and_finite(X, lam):
    with pytest.raises(InvalidParameterError, match="lam") as info:
        dclust.DPMeans(lam=lam).fit(X)
    _says_expected_received(info.value)


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize(
    "weights,match",
    [
        (lambda n: -np.ones(n), "negative"),
        (lambda n: np.ones(n - 1), "length|samples"),
        (lambda n: np.full(n, np.nan), "finite"),
        (lambda n: np.ones((n, 2)), "1-D"),
    ],
    ids=["negative", "wrong-length", "nan", "2-d"],
)
def test_bad_sample_weight(make, X, weights, match):
    est = make()
    with pytest.raises(DclustError, match=match) as info:
        est.fit(X, sample_weight=weights(len(X)))
    _says_expected_received(info.value)
    assert not hasattr(est, "cluster_centers_")


def test_a_path_string_is_not_data(tmp_path, X):
    with pytest.raises(DclustError, match="open_array"):
        dclust.KMeans(n_clusters=2).fit(str(tmp_path / "x.zarr"))


def test_missing_and_non_zarr_paths(tmp_path):
    with pytest.raises(StorageError, match="does not exist") as info:
        dclust.open_array(tmp_path / "missing.zarr")
    _says_expected_received(info.value)
    (tmp_path / "notes.txt").write_text("not a store")
    with pytest.raises(StorageError, match="Zarr"):
        dclust.open_array(tmp_path / "notes.txt")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StorageError, match="Zarr"):
        dclust.open_array(tmp_path / "plain")


def test_existing_output_is_not_overwritten(tmp_path, X):
    labels = dclust.KMeans(n_clusters=2, random_state=0).fit(X).predict(da.from_array(X, chunks=100))
    target = tmp_path / "labels.zarr"
    dclust.write_labels(labels, target)
    before = sorted(p.name for p in target.rglob("*"))
    with pytest.raises(StorageError, match="overwrite") as info:
        dclust.write_labels(labels, target)
    _says_expected_received(info.value)
    assert sorted(p.name for p in target.rglob("*")) == before
    dclust.write_labels(labels, target, overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(target), mode="r")[:], labels.compute())


@pytest.mark.parametrize("make", ESTIMATORS)
def test_predict_refuses_non_finite_rows(make, X):
    est = make().fit(X)
    bad = X.copy()
    bad[130, 0] = np.nan
    with pytest.raises(InvalidDataError, match="chunk 1") as info:
        est.predict(da.from_array(bad, chunks=(100, -1))).compute()
    _says_expected_received(info.value)
    with pytest.raises(InvalidDataError, match="predict again"):
        est.predict(bad)
