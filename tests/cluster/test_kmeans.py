import dask.array as da
import numpy as np
import pytest
from sklearn.cluster import KMeans as SKKMeans

import dclust
from dclust.errors import InvalidParameterError


@pytest.mark.parametrize("rows", [3000, 512])
def test_equals_scikit_learn_lloyd_with_the_same_init(blobs, rows):
    X, _ = blobs
    C0 = X[[0, 10, 20, 30, 40, 50]].copy()
    ours = dclust.KMeans(n_clusters=6, init=C0).fit(da.from_array(X, chunks=(rows, -1)))
    ref = SKKMeans(n_clusters=6, init=C0, n_init=1, algorithm="lloyd").fit(X)
    np.testing.assert_array_equal(ours.predict(X), ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-6)
    assert ours.n_iter_ == ref.n_iter_


def test_equals_scikit_learn_with_sample_weight(blobs):
    X, _ = blobs
    w = np.random.default_rng(3).uniform(0.1, 3.0, size=len(X))
    C0 = X[:4].copy()
    ours = dclust.KMeans(n_clusters=4, init=C0, tol=0).fit(X, sample_weight=w)
    ref = SKKMeans(n_clusters=4, init=C0, n_init=1, algorithm="lloyd", tol=0).fit(X, sample_weight=w)
    np.testing.assert_array_equal(ours.predict(X), ref.labels_)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-6)


def test_integer_weights_equal_repeated_rows(blobs):
    X, _ = blobs
    X = X[:400]
    w = np.random.default_rng(0).integers(1, 4, size=len(X))
    C0 = X[:3].copy()
    a = dclust.KMeans(n_clusters=3, init=C0, tol=0).fit(X, sample_weight=w)
    b = dclust.KMeans(n_clusters=3, init=C0, tol=0).fit(np.repeat(X, w, axis=0))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=1e-10)
    np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-10)


@pytest.mark.parametrize("init", ["k-means||", "k-means++", "random"])
def test_seedings_find_the_blobs(blobs, init):
    X, y = blobs
    km = dclust.KMeans(n_clusters=5, init=init, n_init=10 if init == "random" else 3,
                       random_state=0).fit(da.from_array(X, chunks=(700, -1)))
    assert dclust.metrics.adjusted_rand_score(y, km.predict(X)) > 0.95
    hist = km.objective_history_
    assert all(b <= a * (1 + 1e-12) for a, b in zip(hist, hist[1:]))


def test_empty_cluster_moves_to_the_farthest_row():
    X = np.array([[0.0], [0.1], [0.2], [10.0]])
    km = dclust.KMeans(n_clusters=2, init=np.array([[0.1], [100.0]]), max_iter=5).fit(X)
    np.testing.assert_allclose(sorted(km.cluster_centers_[:, 0]), [0.1, 10.0])
    assert km.inertia_ == pytest.approx(0.02)


def test_predict_transform_score_are_consistent(blobs):
    X, _ = blobs
    km = dclust.KMeans(n_clusters=5, random_state=1).fit(X)
    D = km.transform(X)
    assert D.shape == (len(X), 5)
    np.testing.assert_array_equal(D.argmin(axis=1), km.predict(X))
    np.testing.assert_allclose(-km.score(X), D.min(axis=1).sum(), rtol=1e-9)
    np.testing.assert_allclose(-km.score(X), km.inertia_, rtol=1e-9)
    np.testing.assert_array_equal(km.fit_predict(X), km.predict(X))


def test_predict_is_lazy_for_dask_and_keeps_xarray_coordinates(blobs):
    xr = pytest.importorskip("xarray")
    X, _ = blobs
    dX = da.from_array(X, chunks=(1000, -1))
    km = dclust.KMeans(n_clusters=3, random_state=0).fit(dX)
    lazy = km.predict(dX)
    assert isinstance(lazy, da.Array) and lazy.chunks == (dX.chunks[0],)
    arr = xr.DataArray(dX, dims=("time", "band"), coords={"time": np.arange(len(X)) * 10})
    out = km.predict(arr)
    assert isinstance(out, xr.DataArray) and out.dims == ("time",)
    np.testing.assert_array_equal(out["time"].values, arr["time"].values)
    np.testing.assert_array_equal(out.values, lazy.compute())


@pytest.mark.parametrize("seed", [0, 3])
def test_n_init_keeps_the_best_run(blobs, seed):
    """The objective of every run's last pass comes from its progress events (the cost before that pass's center
    update, so the run's final inertia is at most it); the model is the run with the lowest. Seed 0's best run is
    the first, seed 3's the last, and the runs differ by more than 0.5 %: keeping the first or the last run fails."""
    X, _ = blobs
    events = []
    with dclust.on_progress(events.append):
        km = dclust.KMeans(n_clusters=8, init="random", n_init=4, random_state=seed).fit(X)
    runs = []
    for e in events:
        if e.phase == "init":
            runs.append(None)
        elif e.phase == "iter":
            runs[-1] = e.objective
    assert len(runs) == 4 and len(set(runs)) > 1
    assert min(runs) * (1 - 1e-3) <= km.inertia_ <= min(runs)


def test_init_array_with_n_init_is_rejected(blobs):
    X, _ = blobs
    with pytest.raises(InvalidParameterError, match="n_init=1"):
        dclust.KMeans(n_clusters=2, init=X[:2], n_init=2).fit(X)
    with pytest.raises(InvalidParameterError, match="shape"):
        dclust.KMeans(n_clusters=3, init=X[:2]).fit(X)


def test_fewer_distinct_points_than_clusters_warns_with_the_count():
    X = np.ones((500, 3))
    X[:100] = 2.0  # two distinct points
    with pytest.warns(dclust.errors.ConvergenceWarning, match="found 2 distinct cluster"):
        km = dclust.KMeans(n_clusters=5, random_state=0).fit(X)
    assert np.unique(km.cluster_centers_, axis=0).shape[0] == 2


def _passes_of(fit) -> int:
    """dclust passes computed by ``fit()`` on the threaded scheduler: graphs with a ``dclust-pass-`` key (also
    inside the name of a fused task; one pass is one compute)."""
    from dask.callbacks import Callback

    seen: list[int] = []

    class Count(Callback):
        def _start(self, dsk):
            names = " ".join(str(k[0] if isinstance(k, tuple) else k) for k in dsk)
            seen.extend([1] if "dclust-pass-" in names else [])

    with Count():
        fit()
    return len(seen)


def test_kmeans_parallel_seeding_takes_two_passes_and_ignores_the_chunking(blobs):
    X, y = blobs
    fits = {}
    for rows in (97, 700, len(X)):
        Xd = da.from_array(X, chunks=(rows, -1))
        km = dclust.KMeans(n_clusters=5, random_state=3, max_iter=1, tol=0)
        # seeding (2 passes) + one Lloyd pass + the inertia pass
        assert _passes_of(lambda: km.fit(Xd)) == 4
        fits[rows] = dclust.KMeans(n_clusters=5, random_state=3).fit(Xd)
    for rows in (97, 700):
        np.testing.assert_allclose(fits[rows].cluster_centers_, fits[len(X)].cluster_centers_, rtol=1e-10)
    assert dclust.metrics.adjusted_rand_score(y, fits[700].predict(X)) > 0.95
