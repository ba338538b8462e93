"""Collapsed DP-means (docs/algorithms.md 1.4, DP7) and capped DP-means (1.5): properties and reference agreement."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from dclust.cluster._collapsed import CappedDPMeans, CollapsedBPMeans, CollapsedDPMeans
from dclust.errors import ConvergenceWarning, InvalidDataError, InvalidParameterError
from dclust.kernels import collapsed as K
from dclust.kernels.dpmeans import dpmeans_reference


def _small(seed=0, n=90):
    rng = np.random.default_rng(seed)
    c = rng.uniform(-6, 6, size=(4, 2))
    return c[rng.integers(0, 4, n)] + rng.normal(size=(n, 2))


def _nondecreasing_violation(h, rtol=1e-12):
    return [(a, b) for a, b in zip(h, h[1:]) if b > a + rtol * abs(a)]


# ---- collapsed DP-means ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("init", ["mean", "empty"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_collapsed_matches_the_plain_python_reference_on_the_same_order(init, seed):
    X = _small(seed)
    for lam in (2.0, 8.0, 30.0):
        m = CollapsedDPMeans(lam=lam, init=init, random_state=seed).fit(X)
        z, h = K.collapsed_dpmeans_reference(X, lam, m.order_, init=init)
        np.testing.assert_array_equal(m.labels_, z)
        np.testing.assert_allclose(m.objective_history_, h, rtol=1e-12)
        assert m.converged_


@pytest.mark.parametrize("init", ["mean", "empty"])
def test_collapsed_objective_is_monotone_and_consistent(blobs, init):
    X = blobs[0]
    for lam in (5.0, 30.0, 200.0):
        m = CollapsedDPMeans(lam=lam, init=init, random_state=3).fit(X)
        assert not _nondecreasing_violation(m.objective_history_)
        assert m.objective_ == pytest.approx(K.collapsed_objective(X, m.labels_, lam), rel=1e-12)
        assert m.n_iter_ == len(m.objective_history_)
        np.testing.assert_array_equal(np.bincount(m.labels_), m.cluster_sizes_)
        assert (m.cluster_sizes_ > 0).all()
        for k in range(m.n_clusters_):
            np.testing.assert_allclose(m.cluster_centers_[k], X[m.labels_ == k].mean(axis=0), rtol=1e-10,
                                       atol=1e-12)
    # the first pass of "mean" cannot be worse than the single cluster it starts from
    m = CollapsedDPMeans(lam=30.0, random_state=0).fit(X)
    assert m.objective_history_[0] <= K.collapsed_objective(X, np.zeros(len(X), dtype=np.int64), 30.0)


def _best_single_move(X, labels, lam):
    """The lowest change of J_C over every single move of one point (another cluster or a new one)."""
    k = labels.max() + 1
    counts, sums = K.collapsed_stats(X, labels, k)
    best = np.inf
    for i in range(len(X)):
        c = labels[i]
        n_c = counts[c]
        if n_c > 1:
            mean_wo = (sums[c] - X[i]) / (n_c - 1)
            saved = (n_c - 1) / n_c * ((X[i] - mean_wo) ** 2).sum()
        else:
            saved = lam  # removing a singleton drops its cluster
        for q in range(k):
            if q != c:
                best = min(best, counts[q] / (counts[q] + 1) * ((X[i] - sums[q] / counts[q]) ** 2).sum() - saved)
        if n_c > 1:
            best = min(best, lam - saved)
    return best


@pytest.mark.parametrize("init", ["mean", "empty"])
def test_collapsed_converges_to_a_point_where_no_single_move_helps(init):
    X = _small(5, n=120)
    for lam in (1.0, 6.0, 25.0):
        m = CollapsedDPMeans(lam=lam, init=init, random_state=1).fit(X)
        assert m.converged_
        assert _best_single_move(X, m.labels_, lam) >= -1e-9 * m.objective_
        # and refitting from the converged labels does not move anything
        z, moved = K.collapsed_pass(X, m.order_, m.labels_, lam)
        assert moved == 0
        np.testing.assert_array_equal(z, m.labels_)


@pytest.mark.parametrize("init", ["mean", "empty"])
def test_collapsed_large_lam_gives_one_cluster_at_the_mean(blobs, init):
    X = blobs[0]
    m = CollapsedDPMeans(lam=1e9, init=init, random_state=0).fit(X)
    assert m.n_clusters_ == 1
    np.testing.assert_allclose(m.cluster_centers_[0], X.mean(axis=0), rtol=1e-10)
    assert m.objective_ == pytest.approx(((X - X.mean(axis=0)) ** 2).sum() + 1e9, rel=1e-12)


@pytest.mark.parametrize("init", ["mean", "empty"])
@pytest.mark.parametrize("tiny", [0.0, None])
def test_collapsed_tiny_lam_gives_one_cluster_per_distinct_point(init, tiny):
    rng = np.random.default_rng(4)
    P = rng.integers(0, 6, size=(40, 2)).astype(np.float64)  # integer grid: many duplicates
    n_distinct = np.unique(P, axis=0).shape[0]
    lam = 0.2 if tiny is None else tiny  # below 1/4 of the smallest squared distance (1) between distinct points
    m = CollapsedDPMeans(lam=lam, init=init, random_state=0).fit(P)
    assert m.n_clusters_ == n_distinct
    assert m.objective_ == pytest.approx(lam * n_distinct, abs=1e-12)
    for k in range(m.n_clusters_):  # each cluster holds copies of one point
        assert np.unique(P[m.labels_ == k], axis=0).shape[0] == 1


def test_collapsed_processing_order():
    X = _small(2)
    a = CollapsedDPMeans(lam=3.0, shuffle=False).fit(X)
    np.testing.assert_array_equal(a.order_, np.arange(len(X)))
    b = CollapsedDPMeans(lam=3.0, random_state=7).fit(X)
    np.testing.assert_array_equal(b.order_, np.random.default_rng(7).permutation(len(X)))
    c = CollapsedDPMeans(lam=3.0, random_state=np.random.default_rng(7)).fit(X)
    np.testing.assert_array_equal(b.labels_, c.labels_)


# ---- capped DP-means ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("init", ["mean", "empty"])
def test_capped_without_a_cap_is_serial_dpmeans(blobs, init):
    X = blobs[0][:600]
    for lam in (10.0, 40.0):
        m = CappedDPMeans(lam=lam, init=init, random_state=2).fit(X)
        z, C, h = dpmeans_reference(X, lam, m.order_, init=init)
        np.testing.assert_array_equal(m.labels_, z)
        np.testing.assert_allclose(m.cluster_centers_, C, rtol=1e-10)
        np.testing.assert_allclose(m.objective_history_, h, rtol=1e-10)


@pytest.mark.parametrize("init", ["mean", "empty"])
@pytest.mark.parametrize("cap", [1, 2, 3, 5])
def test_capped_matches_its_reference_and_respects_the_cap(init, cap):
    X = _small(3, n=150)
    lam = 2.0
    m = CappedDPMeans(lam=lam, max_clusters=cap, init=init, random_state=cap).fit(X)
    z, C, h = K.capped_dpmeans_reference(X, lam, m.order_, cap, init=init)
    np.testing.assert_array_equal(m.labels_, z)
    np.testing.assert_allclose(m.cluster_centers_, C, rtol=1e-10)
    np.testing.assert_allclose(m.objective_history_, h, rtol=1e-10)
    assert 1 <= m.n_clusters_ <= cap
    assert not _nondecreasing_violation(m.objective_history_)
    # fixed point (DP2): every point at a nearest centre, centres the means, no empty cluster
    d = ((X[:, None, :] - m.cluster_centers_[None]) ** 2).sum(axis=2)
    np.testing.assert_array_equal(m.labels_, d.argmin(axis=1))
    np.testing.assert_array_equal(m.predict(X), m.labels_)
    assert np.bincount(m.labels_).min() > 0
    if m.n_clusters_ < cap:
        assert d.min(axis=1).max() <= lam


def test_capped_one_cluster_is_the_mean(blobs):
    X = blobs[0]
    m = CappedDPMeans(lam=1e-3, max_clusters=1, random_state=0).fit(X)
    assert m.n_clusters_ == 1 and m.n_iter_ == 1
    np.testing.assert_allclose(m.cluster_centers_[0], X.mean(axis=0), rtol=1e-12)


def test_capped_objective_is_monotone(blobs):
    for cap in (None, 3, 8):
        m = CappedDPMeans(lam=15.0, max_clusters=cap, random_state=0).fit(blobs[0])
        assert not _nondecreasing_violation(m.objective_history_)


# ---- input handling ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [CollapsedDPMeans, CappedDPMeans])
def test_size_limit_is_checked_from_metadata(cls):
    huge = da.zeros((10**10, 3), chunks=(10**6, 3))  # computing this would never finish
    with pytest.raises(InvalidDataError, match="max_samples=1000") as info:
        cls(lam=1.0, max_samples=1000).fit(huge)
    assert "10000000000 rows" in str(info.value)


@pytest.mark.parametrize("cls", [CollapsedDPMeans, CappedDPMeans])
def test_bad_data_is_rejected(cls):
    X = _small(0)
    X[7, 1] = np.nan
    with pytest.raises(InvalidDataError, match="NaN"):
        cls(lam=1.0).fit(X)
    with pytest.raises(InvalidDataError):
        cls(lam=1.0).fit(np.empty((0, 2)))
    with pytest.raises(InvalidParameterError, match="lam"):
        cls(lam=-1.0).fit(_small(0))


@pytest.mark.parametrize("cls", [CollapsedDPMeans, CappedDPMeans])
def test_max_iter_reached_warns(cls, blobs):
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        m = cls(lam=30.0, max_iter=1, random_state=0).fit(blobs[0])
    assert not m.converged_ and m.n_iter_ == 1


@pytest.mark.parametrize("cls", [CollapsedDPMeans, CappedDPMeans])
def test_fit_predict_and_dask_input(cls, blobs):
    X = blobs[0]
    a = cls(lam=30.0, random_state=0).fit(X)
    b = cls(lam=30.0, random_state=0)
    np.testing.assert_array_equal(b.fit_predict(da.from_array(X, chunks=(700, -1))), a.labels_)
    np.testing.assert_array_equal(a.predict(X), b.predict(da.from_array(X, chunks=500)).compute())


def test_collapsed_bpmeans_restarts_reach_the_generating_objective_on_the_tabletop_generator():
    """[MB] restarts collapsed BP-means: restarts never end above the single run (which is restart 0), and 5 of
    them bring the objective from 1.21x to within 10 % of the generating model's (20 restarts: 1.05x here, 1.01x on
    100 images; measured, not asserted, to keep the test fast)."""
    from dclust.datasets import make_tabletop

    t = make_tabletop(60, random_state=1)
    X = t.X.astype(np.float64)
    Z = np.column_stack([np.ones(len(X)), t.Z])
    generating = float(((X - Z @ np.vstack([t.background, t.features])) ** 2).sum()) + 1.0 * Z.shape[1]
    single = CollapsedBPMeans(lam=1.0, random_state=3).fit(X)
    best = CollapsedBPMeans(lam=1.0, n_init=5, random_state=3).fit(X)
    assert best.objective_ < single.objective_ and single.objective_ > 1.1 * generating
    assert best.objective_ <= 1.1 * generating, (best.objective_, generating)
    np.testing.assert_allclose(best.allocation_ @ best.features_, X, atol=0.5)


def test_collapsed_bpmeans_restarts_need_shuffle_and_no_checkpoint(tmp_path):
    X = np.eye(6)
    for bad in (dict(shuffle=False), dict(checkpoint=tmp_path / "ck")):
        with pytest.raises(InvalidParameterError, match="n_init"):
            CollapsedBPMeans(lam=1.0, n_init=3, **bad).fit(X)
    assert not (tmp_path / "ck").exists()
