"""dclust.model_selection: the DP-means lam sweep (true K on separated blobs, two passes, values equal to full
fits), the suggestion rule, the BIC of GM-PR against scikit-learn, errors before any pass, doctests."""

from __future__ import annotations

import doctest
import threading

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

import dclust
import dclust.metrics as dm
from dclust import model_selection as ms
from dclust.errors import InvalidDataError, InvalidParameterError, NotFittedError
from dclust.model_selection import _criteria, _sweep

TRUE_K = 5


@pytest.fixture(autouse=True, scope="module")
def _sync_scheduler():
    with dask.config.set(scheduler="synchronous"):
        yield


def separated_blobs(n=4000, d=3, k=TRUE_K, seed=0):
    """k unit-variance blobs whose centres are at least 30 apart (well separated), shuffled."""
    rng = np.random.default_rng(seed)
    centers = np.zeros((k, d))
    for i in range(k):
        centers[i, i % d] = 40.0 * (1 + i // d) * (-1) ** i
    y = rng.integers(0, k, size=n)
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float64), y


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X, y = separated_blobs()
    path = str(tmp_path_factory.mktemp("sweep") / "x.zarr")
    dclust.write_array(X, path, chunks=500)
    return path, X, y


class CountingArray:
    """An array-like that counts how often each row chunk is read (every dask chunk read calls __getitem__)."""

    def __init__(self, X, chunk):
        self.X, self.chunk = X, chunk
        self.shape, self.dtype, self.ndim = X.shape, X.dtype, X.ndim
        self.reads = np.zeros(-(-X.shape[0] // chunk), int)
        self.lock = threading.Lock()

    def __getitem__(self, key):
        rows = key[0] if isinstance(key, tuple) else key
        if rows.stop - rows.start > 0:  # dask's meta probes read empty slices
            with self.lock:
                self.reads[rows.start // self.chunk] += 1
        return self.X[key]


def test_suggestion_gives_the_true_k_on_separated_blobs(store):
    path, X, y = store
    sw = ms.sweep_dpmeans(dclust.open_array(path), sample_size=1500, n_lams=16, random_state=0)
    assert sw.suggested_n_clusters == TRUE_K
    assert sw.rule == ms.SUGGESTION_RULE and sw.n_passes == 2
    assert sw.lam == sorted(sw.lam) and len(sw.lam) == 16
    assert max(sw.n_clusters) > TRUE_K and min(sw.n_clusters) == 1  # the grid spans both sides of the truth
    assert sw.n_clusters[0] > TRUE_K > sw.n_clusters[-1]  # K falls across the grid (not always monotone)
    # the suggested lam, refitted on the full data, recovers the blobs
    dp = dclust.DPMeans(lam=sw.suggested_lam, random_state=0).fit(dclust.open_array(path))
    assert dp.n_clusters_ == TRUE_K
    assert dm.adjusted_rand_score(y, np.asarray(dp.predict(X))) == 1.0
    # Calinski-Harabasz is highest at the true K; all fields are JSON-ready and round-trip
    ch = {k: c for k, c in zip(sw.n_clusters, sw.calinski_harabasz) if c is not None}
    assert max(ch, key=ch.get) == TRUE_K
    assert ms.LamSweep.from_dict(sw.to_dict()) == sw


def test_two_passes_over_the_data(store):
    _, X, _ = store
    counting = CountingArray(X, 400)
    sw = ms.sweep_dpmeans(da.from_array(counting, chunks=(400, X.shape[1])), sample_size=300, n_lams=6,
                          random_state=1)
    assert counting.reads.max() == 2 and counting.reads.min() >= 1, counting.reads
    assert len(sw.lam) == 6 and sw.seconds["total"] > 0


def test_values_equal_full_fits_when_the_sample_is_all_data(store):
    _, X, _ = store
    lams = [80.0, 900.0, 1e5]
    sw = ms.sweep_dpmeans(da.from_array(X, chunks=(700, 3)), lams=lams, sample_size=10_000, random_state=3,
                          max_iter=100, split_every=2)
    assert sw.sample_size == X.shape[0]
    for lam, k, obj, sse, ch in zip(sw.lam, sw.n_clusters, sw.objective, sw.sse, sw.calinski_harabasz):
        dp = dclust.DPMeans(lam=lam, random_state=0).fit(X)
        assert k == dp.n_clusters_
        np.testing.assert_allclose(obj, dp.objective_, rtol=1e-9)
        np.testing.assert_allclose(obj, sse + lam * k, rtol=1e-12)
        if k == 1:
            assert ch is None
            continue
        labels = np.asarray(dp.predict(X))
        np.testing.assert_allclose(ch, dm.calinski_harabasz_score(X, labels), rtol=1e-9)
    assert sw.n_clusters[-1] == 1 and TRUE_K in sw.n_clusters


def test_suggest_lam_rule():
    assert ms.suggest_lam([1, 2, 4, 8, 16, 32, 64], [9, 5, 3, 3, 3, 2, 1]) == (8.0, 3)
    assert ms.suggest_lam([64, 1, 2], [1, 4, 4]) == (2.0, 4)  # any order; nearest the middle in log lam
    assert ms.suggest_lam([1.0, 2.0], [1, 1]) == (None, None)
    # a K = 1 plateau, however wide, is never the suggestion
    assert ms.suggest_lam([1, 2, 1e6], [3, 2, 1])[1] in (2, 3)


def test_bad_input_before_any_pass(store):
    path, _, _ = store
    X = dclust.open_array(path)
    for kwargs, match in [({"lams": []}, "lams"), ({"lams": [1.0, -2.0]}, "lams"), ({"lams": ["a"]}, "lams"),
                          ({"n_lams": 1}, "n_lams"), ({"sample_size": 2}, "sample_size"),
                          ({"max_clusters": True}, "max_clusters"), ({"split_every": 1}, "split_every")]:
        with pytest.raises(InvalidParameterError, match=match):
            ms.sweep_dpmeans(X, **kwargs)
    with pytest.raises(InvalidDataError, match="open the store first|Open the store"):
        ms.sweep_dpmeans(path)
    bad = np.ones((50, 2))
    bad[7, 0] = np.inf
    with pytest.raises(InvalidDataError, match="NaN or inf"):
        ms.sweep_dpmeans(da.from_array(bad, chunks=(10, 2)), lams=[1.0], sample_size=10, random_state=0)
    with pytest.raises(InvalidDataError, match="distinct"):
        ms.sweep_dpmeans(np.ones((20, 2)))


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_bic_equals_sklearn_for_the_same_parameters(covariance_type):
    X, _ = separated_blobs(n=600, d=2, k=3, seed=4)
    gm = dclust.GMPR(n_classes=3, covariance_type=covariance_type, random_state=0, max_iter=20).fit(X)
    sk = GaussianMixture(3, covariance_type=covariance_type)
    sk.weights_, sk.means_ = gm.weights_, gm.means_[:, 0]
    sk.covariances_ = gm.covariances_[:, 0]
    chol = np.linalg.cholesky(np.linalg.inv(sk.covariances_)) if covariance_type == "full" else 1 / np.sqrt(
        sk.covariances_)
    sk.precisions_cholesky_ = chol
    np.testing.assert_allclose(ms.bic(gm, X), sk.bic(X), rtol=1e-10)
    assert ms.n_parameters(gm) == sk._n_parameters()
    assert ms.bic(gm, X.shape[0]) == ms.bic(gm, da.from_array(X, chunks=100))


def test_bic_picks_the_number_of_classes_and_errors():
    X, _ = separated_blobs(n=300, d=2, k=3, seed=4)
    scores = {m: ms.bic(dclust.GMPR(n_classes=m, random_state=0, max_iter=15).fit(X), X) for m in (2, 3, 4)}
    assert min(scores, key=scores.get) == 3
    sub = dclust.GMPR(n_classes=2, clusters_per_class=2, random_state=0, max_iter=5).fit(X)
    assert ms.n_parameters(sub) == 1 + 2 * 1 + 4 * 2 + 4 * 3
    with pytest.raises(NotFittedError):
        ms.bic(dclust.GMPR(), X)
    with pytest.raises(InvalidParameterError, match="GMPR"):
        ms.bic(dclust.KMeans(n_clusters=2), X)
    with pytest.raises(InvalidDataError, match="features"):
        ms.bic(sub, np.ones((10, 5)))


@pytest.mark.parametrize("module", [ms, _sweep, _criteria])
def test_doctests(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
