"""Degenerate data: fewer distinct points than clusters warns (with the count) on every input path."""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest

import dclust
from dclust.errors import ConvergenceWarning


def _distinct_warnings(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = fit()
    return model, [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


def _three_points_repeated():
    """Three distinct rows (not exactly representable sums) repeated 100 times each, shuffled."""
    rng = np.random.default_rng(0)
    return rng.permutation(np.repeat(rng.random((3, 3)) * 0.1, 100, axis=0))


@pytest.mark.parametrize("path", ["numpy", "dask", "zarr", "zarr-persisted", "zarr-streamed"])
def test_kmeans_on_constant_rows_warns_on_every_input_path(path, tmp_path):
    X = np.ones((500, 3))
    store = tmp_path / "x.zarr"
    dclust.write_array(da.from_array(X, chunks=(70, 3)), store)
    data = {"numpy": lambda: X, "dask": lambda: da.from_array(X, chunks=(70, 3))}.get(
        path, lambda: dclust.open_array(store))
    persist = {"zarr-persisted": True, "zarr-streamed": False}.get(path, "auto")
    km, messages = _distinct_warnings(lambda: dclust.KMeans(n_clusters=5, random_state=0, persist=persist).fit(data()))
    assert messages == ["KMeans found 1 distinct cluster(s), fewer than n_clusters=5: the data holds fewer distinct "
                        "points than clusters (duplicate rows). Lower n_clusters to 1."]
    np.testing.assert_array_equal(km.cluster_centers_, np.ones((5, 3)))


@pytest.mark.parametrize("chunks", [300, 70, 7])
def test_the_count_ignores_summation_rounding_whatever_the_chunking(chunks):
    # the means of one set of identical rows differ in their last bits across chunkings: still one cluster
    X = _three_points_repeated()
    _, messages = _distinct_warnings(lambda: dclust.KMeans(n_clusters=5, random_state=0)
                                     .fit(da.from_array(X, chunks=(chunks, 3))))
    assert len(messages) == 1 and "found 3 distinct cluster(s)" in messages[0]


def test_enough_distinct_points_do_not_warn():
    X = np.random.default_rng(1).normal(size=(400, 2))
    _, messages = _distinct_warnings(lambda: dclust.KMeans(n_clusters=8, random_state=0).fit(X))
    assert messages == []


def test_a_finished_checkpoint_returns_the_model_with_the_same_warning(tmp_path):
    X = np.ones((200, 2))
    ck = tmp_path / "ck"
    first, m1 = _distinct_warnings(lambda: dclust.KMeans(n_clusters=3, random_state=0, checkpoint=ck).fit(X))
    again, m2 = _distinct_warnings(lambda: dclust.KMeans(n_clusters=3, random_state=0, checkpoint=ck).fit(X))
    assert m1 == m2 and len(m1) == 1 and "found 1 distinct" in m1[0]
    np.testing.assert_array_equal(first.cluster_centers_, again.cluster_centers_)


def test_kmeans_on_a_distributed_cluster_warns_on_the_driver(client):
    X = da.from_array(np.zeros((300, 4), dtype=np.float32), chunks=(50, 4))
    _, messages = _distinct_warnings(lambda: dclust.KMeans(n_clusters=4, random_state=0).fit(X))
    assert len(messages) == 1 and "found 1 distinct" in messages[0]
